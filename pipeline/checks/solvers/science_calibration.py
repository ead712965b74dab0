"""Solver for science_calibration: drift-corrected medians, quarantine, weighted mean.

Stdlib only; `program()` in this package adds the main that reads the three input
files, writes answer.json and prints the answer as one JSON line.
"""

import json
from fractions import Fraction

FILES = ("calibration.json", "samples.json", "policy.json")


def _parameters(standards):
    # Cramer's rule on raw = gain*reference + offset + drift*time, exact in fractions.
    rows = [(Fraction(s["reference"]), Fraction(1), Fraction(s["time"]), Fraction(s["raw"])) for s in standards]

    def det(m):
        return (
            m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
            - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
            + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
        )

    base = det([r[:3] for r in rows])
    unknowns = []
    for col in range(3):
        m = [list(r[:3]) for r in rows]
        for i, r in enumerate(rows):
            m[i][col] = r[3]
        unknowns.append(det(m) / base)
    return tuple(unknowns)


def solve(files):
    """Answer from the three input texts (name -> text)."""
    gain, offset, drift = _parameters(json.loads(files["calibration.json"]))
    samples = json.loads(files["samples.json"])
    policy = json.loads(files["policy.json"])
    low, high = policy["acceptable_median"]
    medians, quarantine = {}, []
    weighted, weights = Fraction(0), 0
    for name in sorted(samples):
        sample = samples[name]
        values = sorted((Fraction(r) - offset - drift * sample["time"]) / gain for r in sample["raw"])
        median = values[len(values) // 2]
        medians[name] = int(median)
        if values[-1] - values[0] > policy["max_replicate_span"] or not low <= median <= high:
            quarantine.append(name)
        else:
            weighted += median * sample["weight"]
            weights += sample["weight"]
    mean = weighted / weights
    return {
        "calibration": {"gain": int(gain), "offset": int(offset), "drift": int(drift)},
        "medians": medians,
        "quarantine": quarantine,
        "accepted_mean": {"numerator": mean.numerator, "denominator": mean.denominator},
    }
