"""Oracle for industrial_schedule: every permutation, filtered by precedence, simulated."""

from __future__ import annotations

from itertools import permutations
from typing import Any


def solve(files: dict[str, Any]) -> dict[str, Any]:
    """Solve from jobs.json, precedences.json and calendar.json."""
    jobs = {job["id"]: job for job in files["jobs.json"]}
    pairs = files["precedences.json"]
    lo, hi = files["calendar.json"]["blackout"]
    best = None
    for order in permutations(sorted(jobs)):
        rank = {job_id: i for i, job_id in enumerate(order)}
        if any(rank[a] > rank[b] for a, b in pairs):
            continue
        clock = files["calendar.json"]["start"]
        completion = {}
        for job_id in order:
            job = jobs[job_id]
            start = max(clock, job["release"])
            if max(start, lo) < min(start + job["duration"], hi):
                start = hi
            clock = completion[job_id] = start + job["duration"]
        tardiness = sum(j["weight"] * max(0, completion[i] - j["due"]) for i, j in jobs.items())
        key = (tardiness, max(completion.values()), list(order), completion)
        if best is None or key[:3] < best[:3]:
            best = key
    if best is None:
        raise ValueError("the precedences admit no order (they contain a cycle)")
    return {"order": best[2], "completion": best[3], "weighted_tardiness": best[0], "makespan": best[1]}
