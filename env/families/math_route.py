"""math_route: constrained shortest routing in a DAG."""

from __future__ import annotations

import random
from typing import Any

from ._common import prompt

FAMILY = "math_route"
DOMAIN = "math and formal reasoning"

PROMPT = prompt(
    "Constrained routing in a DAG",
    {
        "graph.json": 'list of directed edges `{"from", "to", "minutes", "exposure"}`.',
        "request.json": '`{"start": node, "goal": node, "required": [checkpoint nodes]}`.',
        "policy.json": (
            '`{"forbidden": [nodes], "max_exposure": integer, "node_windows": {node: [open, close]}, '
            '"required_before": {node: [nodes]}}`.'
        ),
    },
    """
- Travel from `start` to `goal` along directed edges. Time starts at zero; each edge adds its
  minutes to the time and its exposure to the exposure.
- Arriving at a node in `node_windows` before `open` means waiting until `open` (the time grows,
  the exposure does not); arriving after `close` is infeasible.
- Entering a node that is a key of `required_before` requires every node in its list to have
  been visited already.
- Never enter a forbidden node. Visit every node of `required`. The summed exposure must not
  exceed `max_exposure`.
- Objective: minimise the arrival time at the goal (`minutes`, waits included), then the
  exposure, then the route (the list of nodes compared lexicographically).
""",
    """
`{"route": [nodes in travel order, start and goal included], "minutes": integer,
"exposure": integer}`
""",
)


def generate(rng: random.Random, difficulty: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Lay a feasible backbone around one forbidden node, add extra edges and constraints."""
    count = 6 + 2 * difficulty
    nodes = [f"N{i:02d}" for i in range(count)]
    forbidden = nodes[rng.randint(1, count - 2)]
    backbone = [n for n in nodes if n != forbidden]
    edges: dict[tuple[str, str], dict[str, int]] = {}
    for a, b in zip(backbone, backbone[1:]):
        edges[a, b] = {"minutes": rng.randint(1, 7), "exposure": rng.randint(0, 2)}
    for i in range(count):
        for j in range(i + 1, count):
            if (nodes[i], nodes[j]) not in edges and rng.random() < 0.23:
                edges[nodes[i], nodes[j]] = {"minutes": rng.randint(2, 12), "exposure": rng.randint(0, 5)}

    inner = backbone[1:-1]
    required = sorted(rng.sample(inner, difficulty))
    windowed = set(rng.sample(backbone[1:], difficulty + 1))
    windows: dict[str, list[int]] = {}
    clock = 0
    for a, b in zip(backbone, backbone[1:]):
        clock += edges[a, b]["minutes"]
        if b in windowed:
            # Windows are cut around the backbone's own arrival times, so the backbone fits.
            opening = max(0, clock + rng.randint(-6, 5))
            windows[b] = [opening, max(clock, opening) + rng.randint(0, 6)]
            clock = max(clock, opening)
    required_before = {}
    for key in rng.sample(backbone[2:], difficulty):
        position = backbone.index(key)
        required_before[key] = [rng.choice(backbone[1:position])]
    backbone_exposure = sum(edges[a, b]["exposure"] for a, b in zip(backbone, backbone[1:]))

    graph = [{"from": a, "to": b, **cost} for (a, b), cost in sorted(edges.items())]
    request = {"start": nodes[0], "goal": nodes[-1], "required": required}
    policy = {
        "forbidden": [forbidden],
        "max_exposure": backbone_exposure + rng.randint(0, 3),
        "node_windows": windows,
        "required_before": required_before,
    }
    files = {"graph.json": graph, "request.json": request, "policy.json": policy}
    return files, _search(edges, request, policy)


def _search(
    edges: dict[tuple[str, str], dict[str, int]], request: dict[str, Any], policy: dict[str, Any]
) -> dict[str, Any]:
    """Depth-first search from the start, pruning on every constraint as soon as it breaks."""
    successors: dict[str, list[str]] = {}
    for a, b in sorted(edges):
        successors.setdefault(a, []).append(b)
    windows, before = policy["node_windows"], policy["required_before"]
    best: dict[str, Any] = {}

    def walk(route: list[str], minutes: int, exposure: int) -> None:
        here = route[-1]
        if here == request["goal"]:
            key = (minutes, exposure, list(route))
            if set(request["required"]) <= set(route) and (not best or key < best["key"]):
                best["key"] = key
            return
        for nxt in successors.get(here, []):
            cost = edges[here, nxt]
            arrive, spent = minutes + cost["minutes"], exposure + cost["exposure"]
            if nxt in policy["forbidden"] or spent > policy["max_exposure"]:
                continue
            if nxt in windows:
                if arrive > windows[nxt][1]:
                    continue
                arrive = max(arrive, windows[nxt][0])
            if not set(before.get(nxt, [])) <= set(route):
                continue
            walk(route + [nxt], arrive, spent)

    walk([request["start"]], 0, 0)
    minutes, exposure, route = best["key"]
    return {"route": route, "minutes": minutes, "exposure": exposure}
