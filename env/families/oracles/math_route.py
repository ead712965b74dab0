"""Oracle for math_route: every subset of intermediate nodes is a candidate route, checked in full."""

from __future__ import annotations

from typing import Any


def solve(files: dict[str, Any]) -> dict[str, Any]:
    """Solve from graph.json, request.json and policy.json.

    Edges only climb in node index, so a route is fixed by the set of nodes it visits.
    """
    edges = {(e["from"], e["to"]): e for e in files["graph.json"]}
    request, policy = files["request.json"], files["policy.json"]
    nodes = sorted({n for pair in edges for n in pair} | {request["start"], request["goal"]})
    middle = [n for n in nodes if request["start"] < n < request["goal"]]
    best = None
    for mask in range(1 << len(middle)):
        route = [request["start"]] + [n for i, n in enumerate(middle) if mask >> i & 1] + [request["goal"]]
        outcome = _walk(route, edges, request, policy)
        if outcome is not None and (best is None or outcome < best):
            best = outcome
    if best is None:
        raise ValueError("no feasible route from start to goal")
    return {"route": best[2], "minutes": best[0], "exposure": best[1]}


def _walk(route: list[str], edges: dict, request: dict[str, Any], policy: dict[str, Any]):
    if set(route) & set(policy["forbidden"]) or not set(request["required"]) <= set(route):
        return None
    minutes = exposure = 0
    for i in range(1, len(route)):
        edge = edges.get((route[i - 1], route[i]))
        if edge is None:
            return None
        node = route[i]
        if not set(policy["required_before"].get(node, [])) <= set(route[:i]):
            return None
        minutes += edge["minutes"]
        exposure += edge["exposure"]
        if node in policy["node_windows"]:
            opening, closing = policy["node_windows"][node]
            if minutes > closing:
                return None
            minutes = max(minutes, opening)
    if exposure > policy["max_exposure"]:
        return None
    return (minutes, exposure, route)
