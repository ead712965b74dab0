"""Oracle for software_change: fixed-point closure, exhaustive subset cover, repeated scans."""

from __future__ import annotations

from typing import Any


def solve(files: dict[str, Any]) -> dict[str, Any]:
    """Solve from modules.json, change.json and tests.json."""
    deps: dict[str, list[str]] = files["modules.json"]
    suites: dict[str, dict[str, Any]] = files["tests.json"]
    affected = set(files["change.json"]["changed"])
    grew = True
    while grew:
        grew = False
        for module, needs in deps.items():
            if module not in affected and affected.intersection(needs):
                affected.add(module)
                grew = True

    names = sorted(suites)
    best = None
    for mask in range(1, 1 << len(names)):
        chosen = [names[i] for i in range(len(names)) if mask >> i & 1]
        covered = set().union(*(suites[s]["targets"] for s in chosen))
        if affected <= covered:
            key = (sum(suites[s]["cost"] for s in chosen), len(chosen), chosen)
            best = key if best is None or key < best else best
    if best is None:
        raise ValueError("no combination of suites covers the affected modules")

    order: list[str] = []
    remaining = sorted(affected)
    while remaining:
        module = next(m for m in remaining if all(d in order for d in deps[m] if d in affected))
        order.append(module)
        remaining.remove(module)
    return {"affected": sorted(affected), "tests": best[2], "test_cost": best[0], "build_order": order}
