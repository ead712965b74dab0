"""media_timeline: an edit list with mixed frame rates."""

from __future__ import annotations

import math
import random
from typing import Any

from ._common import numbered_ids, prompt

FAMILY = "media_timeline"
DOMAIN = "media and content production"

PROMPT = prompt(
    "Edit list with mixed frame rates",
    {
        "assets.json": 'asset ID -> `{"frames", "licensed", "fps"}`.',
        "delivery.json": '`{"max_overlap", "delivery_budget", "require_license", "fps"}`.',
        "edits.json": (
            'list of clips `{"id", "asset", "in", "out", "speed_num", "speed_den", "overlap", '
            '"gap_before"}`, in timeline order.'
        ),
    },
    """
Walk the clips in file order.
- Rendered duration = (out - in) * speed_den * delivery fps / (speed_num * asset fps).
- Reject a clip with every code that applies: `unlicensed` (the delivery requires a licence and
  the asset is not licensed), `source_bounds` (unless 0 <= in < out <= the asset's frames),
  `fractional_frame` (the rendered duration is not a whole number). Rejected clips and their
  gaps are skipped entirely.
- The cursor starts at 0. A retained clip starts at cursor + gap_before - overlap, where
  overlap is 0 when gap_before is positive or the clip is the first retained clip, and
  otherwise min(the clip's requested overlap, max_overlap, the previous retained clip's
  duration - 1, this clip's duration - 1). Its end is start + duration (exclusive), and the
  end becomes the cursor.
- total_frames is the end of the last retained clip; over_budget_frames is
  max(0, total_frames - delivery_budget).
""",
    """
`{"rejected": {clip ID: [sorted codes]} (rejected clips only), "timeline": [{"id": clip ID,
"start": integer, "end": integer} for each retained clip, in order], "total_frames": integer,
"over_budget_frames": integer}`
""",
)

SPEEDS = ((1, 1), (1, 1), (2, 1), (1, 2), (3, 2), (2, 3))
FRAME_RATES = (24, 25, 30)
FAULTS = ("unlicensed", "source_bounds", "fractional_frame")


def generate(rng: random.Random, difficulty: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Draw assets and clips; between one and n-2 clips carry at least one fault."""
    asset_ids = [f"asset_{i}" for i in range(1, 5 + difficulty)]
    unlicensed = set(rng.sample(asset_ids, rng.randint(1, 2)))
    assets = {
        a: {"frames": rng.randint(350, 650), "licensed": a not in unlicensed, "fps": rng.choice(FRAME_RATES)}
        for a in asset_ids
    }
    delivery = {
        "max_overlap": rng.randint(8, 18),
        "delivery_budget": 150 + 60 * difficulty,
        "require_license": True,
        "fps": rng.choice(FRAME_RATES),
    }
    count = 4 + 2 * difficulty
    faulty = set(rng.sample(range(count), rng.randint(1, count - 2)))
    clips = []
    for k, clip_id in enumerate(numbered_ids(rng, "clip", count)):
        faults = set()
        if k in faulty:
            faults = {f for f in FAULTS if rng.random() < 0.4} or {rng.choice(FAULTS)}
        clip = _clip(rng, assets, delivery, faults)
        clip.update(id=clip_id, overlap=rng.randint(0, 30), gap_before=0 if rng.random() < 0.7 else rng.randint(1, 12))
        clips.append(clip)
    return {"assets.json": assets, "delivery.json": delivery, "edits.json": clips}, _render(assets, delivery, clips)


def _clip(rng: random.Random, assets: dict[str, Any], delivery: dict[str, Any], faults: set[str]) -> dict[str, Any]:
    """Draw source ranges until the clip has exactly the wanted faults."""
    pool = sorted(a for a, spec in assets.items() if spec["licensed"] != ("unlicensed" in faults))
    while True:
        asset = rng.choice(pool)
        frames = assets[asset]["frames"]
        num, den = rng.choice(SPEEDS)
        rendered_per_step = den * delivery["fps"]
        source_per_step = num * assets[asset]["fps"]
        step = math.gcd(rendered_per_step, source_per_step)
        # A whole number of `unit` source frames renders to a whole number of frames.
        unit = source_per_step // step
        length = unit * rng.randint(1, max(1, 90 * step // rendered_per_step))
        if "fractional_frame" in faults:
            if unit == 1:
                continue
            length += rng.randint(1, unit - 1)
        if length >= frames:
            continue
        if "source_bounds" in faults:
            start = frames - length + rng.randint(1, 40)
        else:
            start = rng.randint(0, frames - length)
        clip = {"asset": asset, "in": start, "out": start + length, "speed_num": num, "speed_den": den}
        if set(_codes(assets, delivery, clip)) == faults:
            return clip


def _codes(assets: dict[str, Any], delivery: dict[str, Any], clip: dict[str, Any]) -> list[str]:
    spec = assets[clip["asset"]]
    codes = []
    if delivery["require_license"] and not spec["licensed"]:
        codes.append("unlicensed")
    if not 0 <= clip["in"] < clip["out"] <= spec["frames"]:
        codes.append("source_bounds")
    numerator = (clip["out"] - clip["in"]) * clip["speed_den"] * delivery["fps"]
    if numerator % (clip["speed_num"] * spec["fps"]):
        codes.append("fractional_frame")
    return sorted(codes)


def _render(assets: dict[str, Any], delivery: dict[str, Any], clips: list[dict[str, Any]]) -> dict[str, Any]:
    rejected: dict[str, list[str]] = {}
    timeline: list[dict[str, Any]] = []
    cursor, previous = 0, None
    for clip in clips:
        codes = _codes(assets, delivery, clip)
        if codes:
            rejected[clip["id"]] = codes
            continue
        spec = assets[clip["asset"]]
        duration = (clip["out"] - clip["in"]) * clip["speed_den"] * delivery["fps"] // (clip["speed_num"] * spec["fps"])
        overlap = 0
        if clip["gap_before"] <= 0 and previous is not None:
            overlap = min(clip["overlap"], delivery["max_overlap"], previous - 1, duration - 1)
        start = cursor + clip["gap_before"] - overlap
        timeline.append({"id": clip["id"], "start": start, "end": start + duration})
        cursor, previous = start + duration, duration
    total = timeline[-1]["end"]
    return {
        "rejected": rejected,
        "timeline": timeline,
        "total_frames": total,
        "over_budget_frames": max(0, total - delivery["delivery_budget"]),
    }
