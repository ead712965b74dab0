"""office_reconciliation: contact reconciliation from change rows."""

from __future__ import annotations

import random
from typing import Any

from ._common import numbered_ids, prompt

FAMILY = "office_reconciliation"
DOMAIN = "office and white-collar work"

PROMPT = prompt(
    "Contact reconciliation",
    {
        "contacts.json": 'master list of `{"id", "email", "phone", "team"}`.',
        "changes.json": (
            'list of change rows `{"id", "email", "timestamp", "source", "fields"}`; '
            "`fields` holds `team` and sometimes `phone`."
        ),
        "policy.json": '`{"aliases": {legacy email: primary email}, "source_priority": {source: rank}}`.',
    },
    """
- Normalise a row's email (trim surrounding spaces, lower-case), then apply exactly one alias
  lookup (if the normalised email is a key of `aliases`, replace it by its value, once), then
  match it against the master emails. A row that matches no master email is unresolved and
  changes nothing.
- For each person and each field independently, the matched update with the greatest
  (timestamp, source priority, row ID) wins; a field nobody updates keeps its master value.
- An updated phone keeps its digits only (drop every other character).
""",
    """
`{"contacts": {person ID: {"phone": string, "team": string}} (every person),
"unresolved": [sorted row IDs]}`
""",
)

FIRST_NAMES = ("ada", "bruno", "chen", "dara", "elif", "femi", "greta", "hiro", "ines", "jonas")
LAST_NAMES = ("khan", "lopez", "moreau", "novak", "okafor", "park", "quinn", "rossi", "silva", "tanaka")
TEAMS = ("design", "finance", "legal", "payments", "platform", "research", "support")
SOURCE_PRIORITY = {"hr": 3, "crm": 2, "import": 1}
PHONE_FORMATS = ("({a}) {b}-{c}", "{a}-{b}-{c}", "{a}.{b}.{c}", "{a}/{b}-{c}")


def _phone(rng: random.Random) -> str:
    return f"{rng.randint(200, 989)}{rng.randint(200, 999)}{rng.randint(0, 9999):04d}"


def generate(rng: random.Random, difficulty: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Draw people, aliases and change rows (exactly one with an unknown address)."""
    count = 3 + difficulty
    firsts, lasts = rng.sample(FIRST_NAMES, count), rng.sample(LAST_NAMES, count)
    contacts = [
        {
            "id": f"person_{i + 1}",
            "email": f"{firsts[i]}.{lasts[i]}@example.com",
            "phone": _phone(rng),
            "team": rng.choice(TEAMS),
        }
        for i in range(count)
    ]
    aliases = {f"{firsts[i]}@legacy.example.org": c["email"] for i, c in enumerate(contacts) if rng.random() < 0.7}
    legacy_of = {primary: legacy for legacy, primary in aliases.items()}

    rows_count = 6 + 3 * difficulty
    row_ids = numbered_ids(rng, "row", rows_count)
    unknown_at = rng.randrange(rows_count)
    rows: list[dict[str, Any]] = []
    owner: dict[str, dict[str, Any]] = {}
    for k, row_id in enumerate(row_ids):
        if k == unknown_at:
            address = f"{rng.choice(FIRST_NAMES)}.{rng.choice(LAST_NAMES)}@partner.example.net"
        else:
            person = rng.choice(contacts)
            owner[row_id] = person
            address = person["email"]
            if address in legacy_of and rng.random() < 0.5:
                address = legacy_of[address]
        fields: dict[str, str] = {"team": rng.choice(TEAMS)}
        if rng.random() < 0.4:
            digits = _phone(rng)
            fields["phone"] = rng.choice(PHONE_FORMATS).format(a=digits[:3], b=digits[3:6], c=digits[6:])
        rows.append(
            {
                "id": row_id,
                "email": " " * rng.randint(0, 2) + address.upper() + " " * rng.randint(1, 3),
                "timestamp": rng.randint(100, 103),
                "source": rng.choice(tuple(SOURCE_PRIORITY)),
                "fields": fields,
            }
        )

    merged = {c["id"]: {"phone": c["phone"], "team": c["team"]} for c in contacts}
    for person in contacts:
        for field in ("phone", "team"):
            updates = [r for r in rows if owner.get(r["id"]) is person and field in r["fields"]]
            if updates:
                winner = max(updates, key=lambda r: (r["timestamp"], SOURCE_PRIORITY[r["source"]], r["id"]))
                value = winner["fields"][field]
                merged[person["id"]][field] = "".join(ch for ch in value if ch.isdigit()) if field == "phone" else value
    expected = {"contacts": merged, "unresolved": [row_ids[unknown_at]]}
    policy = {"aliases": aliases, "source_priority": SOURCE_PRIORITY}
    files = {"contacts.json": contacts, "changes.json": rows, "policy.json": policy}
    return files, expected
