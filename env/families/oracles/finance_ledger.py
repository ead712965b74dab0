"""Oracle for finance_ledger: decide each event's fate first, then total the balances."""

from __future__ import annotations

from typing import Any


def solve(files: dict[str, Any]) -> dict[str, Any]:
    """Solve from accounts.json, events.json and policy.json."""
    events = sorted(files["events.json"], key=lambda e: e["sequence"])
    by_id = {e["id"]: e for e in events}
    fate: dict[str, str] = {}
    for event in events:
        if event["status"] != "posted":
            fate[event["id"]] = "held"
        elif event["kind"] == "entry":
            fate[event["id"]] = "applied"
        else:
            target = by_id.get(event["target"])
            valid_target = (
                target is not None
                and target["kind"] == "entry"
                and target["status"] == "posted"
                and target["sequence"] < event["sequence"]
            )
            prior = sum(
                e["cents"]
                for e in events
                if e["kind"] == "reversal" and e.get("target") == event["target"] and fate.get(e["id"]) == "applied"
            )
            ok = (
                valid_target
                and target is not None
                and event["cents"] > 0
                and prior + event["cents"] <= abs(target["cents"])
            )
            fate[event["id"]] = "applied" if ok else "rejected"
    closing = dict(files["accounts.json"])
    for event in events:
        if fate[event["id"]] != "applied":
            continue
        if event["kind"] == "entry":
            closing[event["account"]] += event["cents"]
        else:
            target = by_id[event["target"]]
            sign = 1 if target["cents"] > 0 else -1
            closing[target["account"]] -= sign * event["cents"]
    return {
        "closing_cents": closing,
        "applied_ids": sorted(i for i, f in fate.items() if f == "applied"),
        "rejected_ids": sorted(i for i, f in fate.items() if f == "rejected"),
        "held_ids": sorted(i for i, f in fate.items() if f == "held"),
    }
