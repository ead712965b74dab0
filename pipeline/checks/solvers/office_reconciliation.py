"""Solver for office_reconciliation: per-field winning updates, unresolved rows.

Stdlib only; `program()` in this package adds the main that reads the three input
files, writes answer.json and prints the answer as one JSON line.
"""

import json

FILES = ("contacts.json", "changes.json", "policy.json")


def solve(files):
    """Answer from the three input texts (name -> text)."""
    people = json.loads(files["contacts.json"])
    rows = json.loads(files["changes.json"])
    policy = json.loads(files["policy.json"])
    by_email = {p["email"]: p["id"] for p in people}
    winner = {}
    unresolved = []
    for row in rows:
        email = row["email"].strip().lower()
        email = policy["aliases"].get(email, email)
        person = by_email.get(email)
        if person is None:
            unresolved.append(row["id"])
            continue
        rank = (row["timestamp"], policy["source_priority"][row["source"]], row["id"])
        for field, value in row["fields"].items():
            if field == "phone":
                value = "".join(ch for ch in value if ch in "0123456789")
            current = winner.get((person, field))
            if current is None or rank > current[0]:
                winner[(person, field)] = (rank, value)
    contacts = {}
    for p in people:
        contacts[p["id"]] = {
            field: winner[(p["id"], field)][1] if (p["id"], field) in winner else p[field]
            for field in ("phone", "team")
        }
    return {"contacts": contacts, "unresolved": sorted(unresolved)}
