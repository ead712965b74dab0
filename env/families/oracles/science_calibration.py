"""Oracle for science_calibration: exact elimination on the standards, exact fractions after."""

from __future__ import annotations

from fractions import Fraction
from typing import Any


def _solve_linear(rows: list[list[Fraction]]) -> list[Fraction]:
    """Gauss-Jordan elimination on an augmented n x (n+1) matrix with exact arithmetic."""
    n = len(rows)
    for col in range(n):
        pivot = next(r for r in range(col, n) if rows[r][col] != 0)
        rows[col], rows[pivot] = rows[pivot], rows[col]
        lead = rows[col][col]
        rows[col] = [x / lead for x in rows[col]]
        for r in range(n):
            if r != col and rows[r][col] != 0:
                factor = rows[r][col]
                rows[r] = [x - factor * y for x, y in zip(rows[r], rows[col])]
    return [row[n] for row in rows]


def _integer(value: Fraction) -> int:
    if value.denominator != 1:
        raise ValueError(f"expected an integer-valued result, got {value}")
    return value.numerator


def solve(files: dict[str, Any]) -> dict[str, Any]:
    """Solve from calibration.json, samples.json and policy.json."""
    system = [
        [Fraction(s["reference"]), Fraction(1), Fraction(s["time"]), Fraction(s["raw"])]
        for s in files["calibration.json"]
    ]
    gain, offset, drift = _solve_linear(system)
    policy = files["policy.json"]
    low, high = policy["acceptable_median"]
    medians, quarantine = {}, []
    total, weights = Fraction(0), 0
    for sample, spec in files["samples.json"].items():
        corrected = sorted((raw - offset - drift * spec["time"]) / gain for raw in spec["raw"])
        median = corrected[len(corrected) // 2]
        medians[sample] = _integer(median)
        if corrected[-1] - corrected[0] > policy["max_replicate_span"] or not low <= median <= high:
            quarantine.append(sample)
        else:
            total += median * spec["weight"]
            weights += spec["weight"]
    mean = total / weights
    return {
        "calibration": {"gain": _integer(gain), "offset": _integer(offset), "drift": _integer(drift)},
        "medians": medians,
        "quarantine": sorted(quarantine),
        "accepted_mean": {"numerator": mean.numerator, "denominator": mean.denominator},
    }
