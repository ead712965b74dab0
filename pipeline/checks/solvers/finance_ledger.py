"""Solver for finance_ledger: sequence-ordered posting with capped partial reversals.

Self-contained program (stdlib only): run in a directory holding the three input
files, it writes answer.json there and prints the answer as one JSON line.
"""

import json

FILES = ("accounts.json", "events.json", "policy.json")


def solve(files):
    """Answer from the three input texts (name -> text)."""
    balances = dict(json.loads(files["accounts.json"]))
    events = sorted(json.loads(files["events.json"]), key=lambda e: e["sequence"])
    applied, rejected, held = [], [], []
    entries = {}
    reversed_so_far = {}
    for event in events:
        if event["status"] != "posted":
            held.append(event["id"])
            continue
        if event["kind"] == "entry":
            balances[event["account"]] += event["cents"]
            entries[event["id"]] = event
            applied.append(event["id"])
            continue
        target = entries.get(event["target"])
        cents = event["cents"]
        if target is None or cents <= 0:
            rejected.append(event["id"])
            continue
        total = reversed_so_far.get(target["id"], 0) + cents
        if total > abs(target["cents"]):
            rejected.append(event["id"])
            continue
        reversed_so_far[target["id"]] = total
        balances[target["account"]] += -cents if target["cents"] > 0 else cents
        applied.append(event["id"])
    return {"closing_cents": balances, "applied_ids": sorted(applied),
            "rejected_ids": sorted(rejected), "held_ids": sorted(held)}


def main():
    files = {}
    for name in FILES:
        with open(name, encoding="utf-8") as f:
            files[name] = f.read()
    text = json.dumps(solve(files), sort_keys=True, separators=(",", ":"))
    with open("answer.json", "w", encoding="utf-8") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
