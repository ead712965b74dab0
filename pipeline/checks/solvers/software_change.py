"""Solver for software_change: impact set, cheapest covering suites, build order.

Stdlib only; `program()` in this package adds the main that reads the three input
files, writes answer.json and prints the answer as one JSON line.
"""

import json

FILES = ("modules.json", "change.json", "tests.json")


def solve(files):
    """Answer from the three input texts (name -> text)."""
    modules = json.loads(files["modules.json"])
    changed = json.loads(files["change.json"])["changed"]
    suites = json.loads(files["tests.json"])

    # Fixed point: a module is affected when it changed or depends on an affected one.
    affected = set(changed)
    grew = True
    while grew:
        grew = False
        for name, deps in modules.items():
            if name not in affected and affected.intersection(deps):
                affected.add(name)
                grew = True

    order = []
    placed = set()
    while len(order) < len(affected):
        ready = sorted(m for m in affected - placed if all(d in placed or d not in affected for d in modules[m]))
        order.append(ready[0])
        placed.add(ready[0])

    # Exhaustive search over every subset of suites (at most a few thousand).
    names = sorted(suites)
    best = None
    for mask in range(1, 1 << len(names)):
        chosen = [names[i] for i in range(len(names)) if mask >> i & 1]
        covered = set()
        for s in chosen:
            covered.update(suites[s]["targets"])
        if not affected <= covered:
            continue
        key = (sum(suites[s]["cost"] for s in chosen), len(chosen), chosen)
        if best is None or key < best:
            best = key
    return {"affected": sorted(affected), "tests": best[2], "test_cost": best[0], "build_order": order}
