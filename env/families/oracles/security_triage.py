"""Oracle for security_triage: a table of named predicates evaluated per request."""

from __future__ import annotations

from typing import Any


def solve(files: dict[str, Any]) -> dict[str, Any]:
    """Solve from identities.json, policy.json and events.json."""
    users, policy = files["identities.json"], files["policy.json"]
    checks = {
        "disabled": lambda u, e: not u["enabled"],
        "action_forbidden": lambda u, e: e["action"] not in policy["role_actions"].get(u["role"], []),
        "secret_role": lambda u, e: e["sensitivity"] == "secret" and u["role"] not in policy["secret_roles"],
        "mfa_required": lambda u, e: (
            (e["action"] in policy["mfa_actions"] or e["sensitivity"] == "secret") and not e["mfa"]
        ),
        "untrusted_zone": lambda u, e: e["sensitivity"] != "public" and e["zone"] not in policy["trusted_zones"],
        "expired": lambda u, e: e["time"] >= e["expires"],
    }
    allowed: list[str] = []
    denied: dict[str, list[str]] = {}
    tally: dict[str, int] = {}
    for event in files["events.json"]:
        user = users[event["user"]]
        codes = sorted(code for code, failed in checks.items() if failed(user, event))
        if codes:
            denied[event["id"]] = codes
            tally[event["user"]] = tally.get(event["user"], 0) + 1
        else:
            allowed.append(event["id"])
    contained = sorted(u for u, n in tally.items() if n >= policy["containment_denials"])
    return {"allowed_ids": sorted(allowed), "denied": denied, "containment": contained}
