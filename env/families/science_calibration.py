"""science_calibration: instrument calibration with linear drift."""

from __future__ import annotations

import random
from fractions import Fraction
from typing import Any

from ._common import numbered_ids, prompt

FAMILY = "science_calibration"
DOMAIN = "natural science"

PROMPT = prompt(
    "Calibration with linear drift",
    {
        "calibration.json": 'list of three standards `{"reference", "time", "raw"}`.',
        "samples.json": 'sample ID -> `{"time", "weight", "raw": [replicate readings]}`.',
        "policy.json": '`{"acceptable_median": [low, high], "max_replicate_span": integer}`.',
    },
    """
- The instrument reads raw = gain * true + offset + drift * time. Infer the integers gain,
  offset and drift from the three standards (their `reference` is the true value).
- Correct every replicate of a sample at that sample's time: true = (raw - offset - drift * time) / gain.
- A sample's median is the middle corrected value (each sample has an odd number of replicates).
- Quarantine a sample when its corrected span (largest minus smallest corrected value) exceeds
  `max_replicate_span`, or when its median lies outside the inclusive `acceptable_median` interval.
- The accepted mean is sum(median * weight) / sum(weight) over the samples not quarantined,
  given as a reduced fraction with a positive denominator.
""",
    """
`{"calibration": {"gain": integer, "offset": integer, "drift": integer},
"medians": {sample ID: integer} (every sample), "quarantine": [sorted sample IDs],
"accepted_mean": {"numerator": integer, "denominator": integer}}`
""",
)

STANDARD_POINTS = ((5, 0), (45, 0), (5, 10))
ACCEPTABLE_MEDIAN = (15, 35)


def generate(rng: random.Random, difficulty: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Draw the instrument and the samples from integer true values, corrupting 1..n-2 samples."""
    gain, offset = rng.randint(2, 7), rng.randint(-15, 15)
    drift = rng.choice((-3, -2, -1, 1, 2, 3))

    def reading(true: int, time: int) -> int:
        return gain * true + offset + drift * time

    standards = [{"reference": r, "time": t, "raw": reading(r, t)} for r, t in STANDARD_POINTS]
    rng.shuffle(standards)
    max_span = rng.randint(6, 9)
    count = 4 + 2 * difficulty
    replicates = 3 if difficulty == 1 else 5
    ids = numbered_ids(rng, "sample", count)
    corrupted = set(rng.sample(ids, rng.randint(1, count - 2)))

    samples: dict[str, dict[str, Any]] = {}
    truths: dict[str, list[int]] = {}
    weights: dict[str, int] = {}
    for sample in ids:
        time, weight, base = rng.randint(1, 12), rng.randint(1, 2 + difficulty), rng.randint(19, 31)
        values = [base - replicates // 2 + k for k in range(replicates)]
        rng.shuffle(values)
        if sample in corrupted:
            # Either fault pushes the sample out of policy: a dropped replicate widens the span
            # past the limit, a +20 shift moves the median (>= 39) above the acceptable range.
            if rng.random() < 0.5:
                values[rng.randrange(replicates)] -= max_span + 3
            else:
                values = [v + 20 for v in values]
        truths[sample], weights[sample] = values, weight
        samples[sample] = {"time": time, "weight": weight, "raw": [reading(v, time) for v in values]}

    medians = {s: sorted(v)[replicates // 2] for s, v in truths.items()}
    low, high = ACCEPTABLE_MEDIAN
    quarantine = sorted(s for s, v in truths.items() if max(v) - min(v) > max_span or not low <= medians[s] <= high)
    accepted = [s for s in ids if s not in quarantine]
    mean = Fraction(sum(medians[s] * weights[s] for s in accepted), sum(weights[s] for s in accepted))
    expected = {
        "calibration": {"gain": gain, "offset": offset, "drift": drift},
        "medians": medians,
        "quarantine": quarantine,
        "accepted_mean": {"numerator": mean.numerator, "denominator": mean.denominator},
    }
    policy = {"acceptable_median": list(ACCEPTABLE_MEDIAN), "max_replicate_span": max_span}
    files = {"calibration.json": standards, "samples.json": samples, "policy.json": policy}
    return files, expected
