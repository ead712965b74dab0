"""finance_ledger: a ledger with pending events and partial reversals."""

from __future__ import annotations

import random
from typing import Any

from ._common import numbered_ids, prompt

FAMILY = "finance_ledger"
DOMAIN = "finance and economics"

PROMPT = prompt(
    "Ledger with partial reversals",
    {
        "accounts.json": "account ID -> opening balance in cents.",
        "events.json": (
            'list of events `{"id", "kind": "entry"|"reversal", "status": "posted"|"pending", '
            '"sequence", ...}`; entries carry `account` and signed `cents`, reversals carry '
            "`target` (an event ID) and `cents`."
        ),
        "policy.json": "currency, unit and a one-line statement of the reversal rule.",
    },
    """
- Process events by ascending `sequence`, not in file order.
- A pending event (entry or reversal) is held: it has no effect and is neither applied nor rejected.
- A posted entry adds its signed cents to its account and is applied.
- A posted reversal is rejected when its target is not a previously applied posted entry
  (unknown ID, an event later in sequence, a pending event, or a reversal), when its cents are
  not positive, or when the cumulative cents of the accepted reversals of that target would
  exceed the absolute cents of the target (the whole reversal is rejected, never clipped).
  Otherwise it moves the target's account back by its cents, against the sign of the target's
  cents, and is applied. A fully reversed entry stays applied.
""",
    """
`{"closing_cents": {account ID: integer}, "applied_ids": [sorted event IDs],
"rejected_ids": [sorted event IDs], "held_ids": [sorted event IDs]}`
""",
)

POLICY = {
    "currency": "EUR",
    "unit": "cents",
    "reversal_rule": (
        "a posted reversal of a previously applied posted entry is accepted while the cumulative "
        "accepted reversal cents for that entry stay within the entry's absolute cents"
    ),
}


def generate(rng: random.Random, difficulty: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Lay out events in sequence order, then shuffle the file; replay the ledger for the answer."""
    accounts = {f"acct_{i}": rng.randint(2000, 12000) for i in range(1, 3 + difficulty)}
    entries_count = 5 + 2 * difficulty
    reversals_count = rng.randint(3, 4 + difficulty)
    ids = numbered_ids(rng, "txn", entries_count + reversals_count + 1)
    unknown_id = ids.pop()

    timeline: list[dict[str, Any]] = [
        {
            "id": ids.pop(),
            "kind": "entry",
            "status": "posted",
            "account": rng.choice(sorted(accounts)),
            "cents": rng.choice((-1, 1)) * rng.randint(50, 1900),
        }
        for _ in range(entries_count)
    ]
    # The partial-reversal pair: it reverses part of an entry, then (sometimes) too much of it.
    anchor = timeline[rng.randrange(entries_count)]
    size = abs(anchor["cents"])
    first = rng.randint(max(1, size // 5), size - 1)
    second = rng.randint(1, size - first) if rng.random() < 0.5 else rng.randint(size - first + 1, size)
    for pending in rng.sample([e for e in timeline if e is not anchor], rng.randint(0, difficulty + 1)):
        pending["status"] = "pending"
    for _ in range(reversals_count - 2):
        position = rng.randint(0, len(timeline))
        # The anchor is nobody else's target, so the pair's first reversal is always accepted.
        earlier = [e for e in timeline[:position] if e is not anchor]
        later = [e for e in timeline[position:] if e is not anchor]
        # Roughly half aim at a valid target; the rest exercise one rejection cause each.
        kind = rng.choice(("valid", "valid", "later", "pending", "reversal", "unknown"))
        pools = {
            "valid": [e for e in earlier if e["kind"] == "entry" and e["status"] == "posted"],
            "later": later,
            "pending": [e for e in timeline if e["status"] == "pending"],
            "reversal": [e for e in timeline if e["kind"] == "reversal"],
            "unknown": [],
        }
        target = rng.choice(pools[kind]) if pools[kind] else None
        limit = abs(target["cents"]) if target and target["kind"] == "entry" else 1900
        timeline.insert(
            position,
            {
                "id": ids.pop(),
                "kind": "reversal",
                "status": "pending" if rng.random() < 0.15 else "posted",
                "target": target["id"] if target else unknown_id,
                "cents": rng.randint(10, limit),
            },
        )
    at = timeline.index(anchor)
    timeline[at + 1 : at + 1] = [
        {"id": ids.pop(), "kind": "reversal", "status": "posted", "target": anchor["id"], "cents": cents}
        for cents in (first, second)
    ]
    events = [dict(event, sequence=k) for k, event in enumerate(timeline, start=1)]
    expected = _replay(accounts, events)
    shuffled = list(events)
    rng.shuffle(shuffled)
    return {"accounts.json": accounts, "events.json": shuffled, "policy.json": POLICY}, expected


def _replay(accounts: dict[str, int], events: list[dict[str, Any]]) -> dict[str, Any]:
    balances = dict(accounts)
    applied_entries: dict[str, dict[str, Any]] = {}
    reversed_cents: dict[str, int] = {}
    applied, rejected, held = [], [], []
    for event in sorted(events, key=lambda e: e["sequence"]):
        if event["status"] == "pending":
            held.append(event["id"])
        elif event["kind"] == "entry":
            balances[event["account"]] += event["cents"]
            applied_entries[event["id"]] = event
            applied.append(event["id"])
        else:
            target = applied_entries.get(event["target"])
            total = reversed_cents.get(event["target"], 0) + event["cents"]
            if target is None or event["cents"] <= 0 or total > abs(target["cents"]):
                rejected.append(event["id"])
                continue
            reversed_cents[event["target"]] = total
            balances[target["account"]] -= event["cents"] if target["cents"] > 0 else -event["cents"]
            applied.append(event["id"])
    return {
        "closing_cents": balances,
        "applied_ids": sorted(applied),
        "rejected_ids": sorted(rejected),
        "held_ids": sorted(held),
    }
