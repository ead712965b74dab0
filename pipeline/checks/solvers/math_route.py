"""Solver for math_route: exhaustive path search under windows and precedence.

Stdlib only; `program()` in this package adds the main that reads the three input
files, writes answer.json and prints the answer as one JSON line.
"""

import json

FILES = ("graph.json", "request.json", "policy.json")


def solve(files):
    """Answer from the three input texts (name -> text)."""
    edges = json.loads(files["graph.json"])
    request = json.loads(files["request.json"])
    policy = json.loads(files["policy.json"])
    forbidden = set(policy["forbidden"])
    windows = policy["node_windows"]
    needs = policy["required_before"]
    out = {}
    for e in edges:
        out.setdefault(e["from"], []).append(e)
    best = []

    # The graph is a small DAG: enumerate every path, pruning on exposure only.
    def walk(route, minutes, exposure):
        node = route[-1]
        if node == request["goal"]:
            if set(request["required"]) <= set(route):
                key = (minutes, exposure, list(route))
                if not best or key < best[0]:
                    best[:] = [key]
            return
        for e in out.get(node, []):
            nxt = e["to"]
            if nxt in forbidden or not set(needs.get(nxt, [])) <= set(route):
                continue
            spent = exposure + e["exposure"]
            if spent > policy["max_exposure"]:
                continue
            arrive = minutes + e["minutes"]
            if nxt in windows:
                opens, closes = windows[nxt]
                arrive = max(arrive, opens)
                if arrive > closes:
                    continue
            route.append(nxt)
            walk(route, arrive, spent)
            route.pop()

    walk([request["start"]], 0, 0)
    minutes, exposure, route = best[0]
    return {"route": route, "minutes": minutes, "exposure": exposure}
