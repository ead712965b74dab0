"""Solver for finance_ledger: sequence-ordered posting with capped partial reversals.

Stdlib only; `program()` in this package adds the main that reads the three input
files, writes answer.json and prints the answer as one JSON line.
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
    return {
        "closing_cents": balances,
        "applied_ids": sorted(applied),
        "rejected_ids": sorted(rejected),
        "held_ids": sorted(held),
    }
