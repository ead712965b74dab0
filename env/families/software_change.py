"""software_change: dependency impact and test selection."""

from __future__ import annotations

import heapq
import random
from typing import Any

from ._common import prompt

FAMILY = "software_change"
DOMAIN = "software engineering"

PROMPT = prompt(
    "Dependency impact and test selection",
    {
        "modules.json": "module ID -> sorted list of the modules it depends on directly.",
        "change.json": '`{"changed": [module IDs]}`: the modules edited by the change.',
        "tests.json": 'suite ID -> `{"targets": [module IDs], "cost": integer}`.',
    },
    """
- A module is affected when it changed or when it depends, directly or transitively, on an
  affected module. `affected` lists every affected module.
- `tests` is the set of suites whose targets together cover every affected module (extra
  coverage is allowed) that minimises, in this order: total cost, number of suites, then the
  sorted list of suite IDs compared lexicographically. `test_cost` is its total cost.
- `build_order` lists the affected modules in topological order: a module comes after every
  affected module it depends on (dependencies outside the affected set are ignored); whenever
  several modules are eligible, take the lexicographically smallest one next.
""",
    """
`{"affected": [sorted module IDs], "tests": [sorted suite IDs], "test_cost": integer,
"build_order": [module IDs in build order]}`
""",
)


def generate(rng: random.Random, difficulty: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Draw the three input files and derive the expected answer from the drawn structure."""
    modules = [f"svc_{i:02d}" for i in range(1, 5 + 2 * difficulty)]
    deps: dict[str, list[str]] = {modules[0]: []}
    for i in range(1, len(modules)):
        deps[modules[i]] = sorted(rng.sample(modules[:i], rng.randint(1, min(3, i))))
    changed = sorted(rng.sample(modules, difficulty))
    suites: dict[str, dict[str, Any]] = {}
    for k in range(1, 6 + difficulty):
        targets = sorted(rng.sample(modules, rng.randint(1, 3)))
        suites[f"test_s{k:02d}"] = {"targets": targets, "cost": rng.randint(2, 10)}
    # The two fallback suites split the modules between them, so every set has a cover.
    fallback_cost = 12 + difficulty
    suites["test_full_a"] = {"targets": modules[0::2], "cost": fallback_cost}
    suites["test_full_b"] = {"targets": modules[1::2], "cost": fallback_cost}

    affected = _affected(deps, changed)
    tests = _cheapest_cover(suites, affected)
    expected = {
        "affected": affected,
        "tests": tests,
        "test_cost": sum(suites[s]["cost"] for s in tests),
        "build_order": _build_order(deps, affected),
    }
    files = {"modules.json": deps, "change.json": {"changed": changed}, "tests.json": suites}
    return files, expected


def _affected(deps: dict[str, list[str]], changed: list[str]) -> list[str]:
    consumers: dict[str, list[str]] = {m: [] for m in deps}
    for module, needs in deps.items():
        for need in needs:
            consumers[need].append(module)
    reached = set(changed)
    frontier = list(changed)
    while frontier:
        for consumer in consumers[frontier.pop()]:
            if consumer not in reached:
                reached.add(consumer)
                frontier.append(consumer)
    return sorted(reached)


def _cheapest_cover(suites: dict[str, dict[str, Any]], affected: list[str]) -> list[str]:
    """Include/exclude search over suites in ID order, pruning on cost."""
    names = sorted(suites)
    best: list[tuple[int, int, list[str]]] = []

    def search(i: int, chosen: list[str], cost: int, uncovered: frozenset[str]) -> None:
        if best and cost > best[0][0]:
            return
        if not uncovered:
            key = (cost, len(chosen), sorted(chosen))
            if not best or key < best[0]:
                best[:] = [key]
            return
        if i == len(names):
            return
        suite = suites[names[i]]
        search(i + 1, chosen + [names[i]], cost + suite["cost"], uncovered - set(suite["targets"]))
        search(i + 1, chosen, cost, uncovered)

    search(0, [], 0, frozenset(affected))
    return best[0][2]


def _build_order(deps: dict[str, list[str]], affected: list[str]) -> list[str]:
    inside = set(affected)
    waiting = {m: sum(1 for d in deps[m] if d in inside) for m in affected}
    ready = [m for m in affected if waiting[m] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        module = heapq.heappop(ready)
        order.append(module)
        for other in affected:
            if module in deps[other]:
                waiting[other] -= 1
                if waiting[other] == 0:
                    heapq.heappush(ready, other)
    return order
