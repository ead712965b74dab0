"""industrial_schedule: constrained single-machine scheduling."""

from __future__ import annotations

import random
from typing import Any

from ._common import prompt

FAMILY = "industrial_schedule"
DOMAIN = "industrial and physical systems"

PROMPT = prompt(
    "Constrained single-machine scheduling",
    {
        "jobs.json": 'list of `{"id", "duration", "release", "due", "weight"}` (minutes).',
        "precedences.json": "list of `[a, b]` pairs: job a must run before job b.",
        "calendar.json": '`{"blackout": [lo, hi], "start": minute}`: the machine is down during [lo, hi).',
    },
    """
- One machine runs every job exactly once, one at a time, without preemption, in an order you
  choose that respects every precedence pair.
- Time starts at `start`. In the chosen order each job starts at max(completion of the previous
  job, its release); if [start, start + duration) overlaps [lo, hi), the start moves to hi
  (ending exactly at lo or starting exactly at hi is fine). There is no other idle time.
  completion = start + duration.
- Objective: minimise the weighted tardiness, the sum over jobs of
  weight * max(0, completion - due); then the makespan (the last completion); then the order
  itself (the list of job IDs compared lexicographically).
""",
    """
`{"order": [job IDs in execution order], "completion": {job ID: completion minute},
"weighted_tardiness": integer, "makespan": integer}`
""",
)


def generate(rng: random.Random, difficulty: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Draw jobs, precedences and a blackout; search the optimal order depth-first."""
    count = 4 + difficulty
    jobs: list[dict[str, Any]] = [
        {
            "id": f"job_{i}",
            "duration": rng.randint(2, 8),
            "release": rng.randint(0, 8),
            "due": rng.randint(9, 30),
            "weight": rng.randint(1, 5),
        }
        for i in range(1, count + 1)
    ]
    precedences = [
        [jobs[i]["id"], jobs[j]["id"]]
        for i in range(count)
        for j in range(i + 1, count)
        if rng.random() < 0.12 * difficulty
    ]
    calendar = {"blackout": [rng.randint(7, 11), rng.randint(14, 18)], "start": 0}
    files = {"jobs.json": jobs, "precedences.json": precedences, "calendar.json": calendar}
    return files, _solve(jobs, precedences, calendar)


def _solve(jobs: list[dict[str, Any]], precedences: list[list[str]], calendar: dict[str, Any]) -> dict[str, Any]:
    """Depth-first over precedence-feasible prefixes in ID order; the first optimum found wins ties."""
    by_id = {job["id"]: job for job in jobs}
    ids = sorted(by_id)
    before = {job_id: {a for a, b in precedences if b == job_id} for job_id in ids}
    lo, hi = calendar["blackout"]
    best: dict[str, Any] = {}

    def extend(order: list[str], done: dict[str, int], clock: int, tardiness: int) -> None:
        if best and (tardiness, clock) > best["key"]:
            return
        if len(order) == len(ids):
            if not best or (tardiness, clock) < best["key"]:
                best.update(key=(tardiness, clock), order=list(order), completion=dict(done))
            return
        for job_id in ids:
            if job_id in done or not before[job_id] <= done.keys():
                continue
            job = by_id[job_id]
            start = max(clock, job["release"])
            if start < hi and start + job["duration"] > lo:
                start = hi
            end = start + job["duration"]
            late = job["weight"] * max(0, end - job["due"])
            order.append(job_id)
            done[job_id] = end
            extend(order, done, end, tardiness + late)
            order.pop()
            del done[job_id]

    extend([], {}, calendar["start"], 0)
    return {
        "order": best["order"],
        "completion": best["completion"],
        "weighted_tardiness": best["key"][0],
        "makespan": best["key"][1],
    }
