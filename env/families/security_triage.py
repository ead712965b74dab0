"""security_triage: access-policy audit of request events."""

from __future__ import annotations

import random
from typing import Any

from ._common import numbered_ids, prompt

FAMILY = "security_triage"
DOMAIN = "cybersecurity"

PROMPT = prompt(
    "Access-policy audit",
    {
        "identities.json": 'user ID -> `{"role", "enabled"}`.',
        "policy.json": (
            '`{"role_actions": {role: [actions]}, "secret_roles": [roles], "trusted_zones": [zones], '
            '"mfa_actions": [actions], "containment_denials": integer}`.'
        ),
        "events.json": (
            'list of requests `{"id", "user", "action", "sensitivity", "zone", "mfa", "time", "expires"}`.'
        ),
    },
    """
Check every request against every rule; each failed rule adds its reason code:
- `disabled`: the user is not enabled.
- `action_forbidden`: the user's role does not include the action in `role_actions`.
- `secret_role`: the sensitivity is `secret` and the user's role is not in `secret_roles`.
- `mfa_required`: the action is in `mfa_actions` or the sensitivity is `secret`, and `mfa` is false.
- `untrusted_zone`: the sensitivity is not `public` and the zone is not in `trusted_zones`.
- `expired`: time >= expires.
A request failing any rule is denied with all its codes; the others are allowed. A user is
contained when their number of denied requests is at least `containment_denials`.
""",
    """
`{"allowed_ids": [sorted event IDs], "denied": {event ID: [sorted reason codes]} (denied events
only), "containment": [sorted user IDs]}`
""",
)

ROLES = ("reader", "operator", "admin")
POLICY: dict[str, Any] = {
    "role_actions": {"reader": ["read"], "operator": ["read", "write"], "admin": ["read", "write", "delete"]},
    "secret_roles": ["admin"],
    "trusted_zones": ["office", "vpn"],
    "mfa_actions": ["write", "delete"],
    "containment_denials": 2,
}
ACTIONS = ("read", "write", "delete")
SENSITIVITIES = ("public", "internal", "secret")
ZONES = ("office", "vpn", "external")
EXPIRES = 100


def generate(rng: random.Random, difficulty: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Draw users and a mix of clean and random requests (at least one allowed, one denied)."""
    identities = {f"user_{i}": {"role": ROLES[i % 3], "enabled": i != 1} for i in range(1, 4 + difficulty)}
    count = 7 + 3 * difficulty
    while True:
        ids = numbered_ids(rng, "event", count)
        events = [_clean(rng, identities, i) if rng.random() < 0.45 else _random(rng, identities, i) for i in ids]
        verdicts = {e["id"]: _codes(identities, e) for e in events}
        if any(verdicts.values()) and not all(verdicts.values()):
            break
    denied = {event_id: codes for event_id, codes in verdicts.items() if codes}
    counts: dict[str, int] = {}
    for event in events:
        if event["id"] in denied:
            counts[event["user"]] = counts.get(event["user"], 0) + 1
    expected = {
        "allowed_ids": sorted(i for i in verdicts if i not in denied),
        "denied": denied,
        "containment": sorted(u for u, n in counts.items() if n >= POLICY["containment_denials"]),
    }
    return {"identities.json": identities, "policy.json": POLICY, "events.json": events}, expected


def _clean(rng: random.Random, identities: dict[str, Any], event_id: str) -> dict[str, Any]:
    user = rng.choice([u for u, ident in identities.items() if ident["enabled"]])
    role = identities[user]["role"]
    sensitivity = rng.choice(SENSITIVITIES if role in POLICY["secret_roles"] else SENSITIVITIES[:2])
    return {
        "id": event_id,
        "user": user,
        "action": rng.choice(POLICY["role_actions"][role]),
        "sensitivity": sensitivity,
        "zone": rng.choice(POLICY["trusted_zones"]),
        "mfa": True,
        "time": rng.randint(95, EXPIRES - 1),
        "expires": EXPIRES,
    }


def _random(rng: random.Random, identities: dict[str, Any], event_id: str) -> dict[str, Any]:
    return {
        "id": event_id,
        "user": rng.choice(sorted(identities)),
        "action": rng.choice(ACTIONS),
        "sensitivity": rng.choice(SENSITIVITIES),
        "zone": rng.choice(ZONES),
        "mfa": rng.random() < 0.5,
        "time": rng.randint(95, 105),
        "expires": EXPIRES,
    }


def _codes(identities: dict[str, Any], event: dict[str, Any]) -> list[str]:
    identity = identities[event["user"]]
    role, action, sensitivity = identity["role"], event["action"], event["sensitivity"]
    codes = []
    if not identity["enabled"]:
        codes.append("disabled")
    if action not in POLICY["role_actions"][role]:
        codes.append("action_forbidden")
    if sensitivity == "secret" and role not in POLICY["secret_roles"]:
        codes.append("secret_role")
    if (action in POLICY["mfa_actions"] or sensitivity == "secret") and not event["mfa"]:
        codes.append("mfa_required")
    if sensitivity != "public" and event["zone"] not in POLICY["trusted_zones"]:
        codes.append("untrusted_zone")
    if event["time"] >= event["expires"]:
        codes.append("expired")
    return sorted(codes)
