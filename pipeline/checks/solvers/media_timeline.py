"""Solver for media_timeline: clip rejection and overlap-aware timeline.

Stdlib only; `program()` in this package adds the main that reads the three input
files, writes answer.json and prints the answer as one JSON line.
"""

import json

FILES = ("assets.json", "edits.json", "delivery.json")


def solve(files):
    """Answer from the three input texts (name -> text)."""
    assets = json.loads(files["assets.json"])
    clips = json.loads(files["edits.json"])
    delivery = json.loads(files["delivery.json"])
    rejected, timeline = {}, []
    cursor, previous = 0, None
    for clip in clips:
        asset = assets[clip["asset"]]
        top = (clip["out"] - clip["in"]) * clip["speed_den"] * delivery["fps"]
        bottom = clip["speed_num"] * asset["fps"]
        codes = []
        if delivery["require_license"] and not asset["licensed"]:
            codes.append("unlicensed")
        if not (0 <= clip["in"] and clip["in"] < clip["out"] and clip["out"] <= asset["frames"]):
            codes.append("source_bounds")
        if top % bottom:
            codes.append("fractional_frame")
        if codes:
            rejected[clip["id"]] = sorted(codes)
            continue
        duration = top // bottom
        gap = clip["gap_before"]
        if previous is None or gap > 0:
            overlap = 0
        else:
            overlap = min(clip["overlap"], delivery["max_overlap"], previous - 1, duration - 1)
        start = cursor + gap - overlap
        cursor = start + duration
        timeline.append({"id": clip["id"], "start": start, "end": cursor})
        previous = duration
    return {
        "rejected": rejected,
        "timeline": timeline,
        "total_frames": cursor,
        "over_budget_frames": max(0, cursor - delivery["delivery_budget"]),
    }
