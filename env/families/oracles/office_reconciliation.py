"""Oracle for office_reconciliation: replay matched rows in ascending priority, last write wins."""

from __future__ import annotations

import re
from typing import Any


def solve(files: dict[str, Any]) -> dict[str, Any]:
    """Solve from contacts.json, changes.json and policy.json."""
    policy = files["policy.json"]
    by_email = {c["email"]: c["id"] for c in files["contacts.json"]}
    state = {c["id"]: {"phone": c["phone"], "team": c["team"]} for c in files["contacts.json"]}
    unresolved, matched = [], []
    for row in files["changes.json"]:
        email = row["email"].strip().lower()
        email = policy["aliases"].get(email, email)
        if email in by_email:
            priority = policy["source_priority"][row["source"]]
            matched.append((row["timestamp"], priority, row["id"], by_email[email], row))
        else:
            unresolved.append(row["id"])
    for *_, person, row in sorted(matched, key=lambda m: m[:3]):
        for field, value in row["fields"].items():
            state[person][field] = re.sub(r"[^0-9]", "", value) if field == "phone" else value
    return {"contacts": state, "unresolved": sorted(unresolved)}
