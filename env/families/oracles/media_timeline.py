"""Oracle for media_timeline: exact fractional durations, then a single pass over retained clips."""

from __future__ import annotations

from fractions import Fraction
from typing import Any


def solve(files: dict[str, Any]) -> dict[str, Any]:
    """Solve from assets.json, delivery.json and edits.json."""
    assets, delivery = files["assets.json"], files["delivery.json"]
    rejected: dict[str, list[str]] = {}
    kept: list[tuple[dict[str, Any], int]] = []
    for clip in files["edits.json"]:
        asset = assets[clip["asset"]]
        duration = Fraction(
            (clip["out"] - clip["in"]) * clip["speed_den"] * delivery["fps"], clip["speed_num"] * asset["fps"]
        )
        codes = []
        if delivery["require_license"] and not asset["licensed"]:
            codes.append("unlicensed")
        if not (0 <= clip["in"] and clip["in"] < clip["out"] and clip["out"] <= asset["frames"]):
            codes.append("source_bounds")
        if duration.denominator != 1:
            codes.append("fractional_frame")
        if codes:
            rejected[clip["id"]] = sorted(codes)
        else:
            kept.append((clip, duration.numerator))
    timeline: list[dict[str, Any]] = []
    for i, (clip, frames) in enumerate(kept):
        cursor = timeline[-1]["end"] if timeline else 0
        gap = clip["gap_before"]
        overlap = (
            0 if gap > 0 or i == 0 else min(clip["overlap"], delivery["max_overlap"], kept[i - 1][1] - 1, frames - 1)
        )
        start = cursor + gap - overlap
        timeline.append({"id": clip["id"], "start": start, "end": start + frames})
    total = timeline[-1]["end"] if timeline else 0
    return {
        "rejected": rejected,
        "timeline": timeline,
        "total_frames": total,
        "over_budget_frames": max(0, total - delivery["delivery_budget"]),
    }
