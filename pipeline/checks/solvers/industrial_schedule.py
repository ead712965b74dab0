"""Solver for industrial_schedule: best precedence-feasible order on one machine.

Stdlib only; `program()` in this package adds the main that reads the three input
files, writes answer.json and prints the answer as one JSON line.
"""

import json

FILES = ("jobs.json", "precedences.json", "calendar.json")


def solve(files):
    """Answer from the three input texts (name -> text)."""
    jobs = {j["id"]: j for j in json.loads(files["jobs.json"])}
    before = {name: set() for name in jobs}
    for a, b in json.loads(files["precedences.json"]):
        before[b].add(a)
    calendar = json.loads(files["calendar.json"])
    lo, hi = calendar["blackout"]
    best = []

    # Depth-first over precedence-respecting orders; the objective tuple decides.
    def extend(order, clock, tardiness, completion):
        if len(order) == len(jobs):
            key = (tardiness, clock, list(order))
            if not best or key < best[0]:
                best[:] = [key, dict(completion)]
            return
        done = set(order)
        for name in sorted(jobs):
            if name in done or not before[name] <= done:
                continue
            job = jobs[name]
            start = max(clock, job["release"])
            if start < hi and lo < start + job["duration"]:
                start = hi
            end = start + job["duration"]
            completion[name] = end
            order.append(name)
            extend(order, end, tardiness + job["weight"] * max(0, end - job["due"]), completion)
            order.pop()
            del completion[name]

    extend([], calendar["start"], 0, {})
    (tardiness, makespan, order), completion = best
    return {"order": order, "completion": completion, "weighted_tardiness": tardiness, "makespan": makespan}
