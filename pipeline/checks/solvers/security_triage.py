"""Solver for security_triage: allow/deny with every reason code, containment.

Stdlib only; `program()` in this package adds the main that reads the three input
files, writes answer.json and prints the answer as one JSON line.
"""

import json

FILES = ("identities.json", "policy.json", "events.json")


def solve(files):
    """Answer from the three input texts (name -> text)."""
    users = json.loads(files["identities.json"])
    policy = json.loads(files["policy.json"])
    events = json.loads(files["events.json"])
    allowed, denied = [], {}
    denials = dict.fromkeys(users, 0)
    for ev in events:
        user = users[ev["user"]]
        secret = ev["sensitivity"] == "secret"
        rules = {
            "disabled": not user["enabled"],
            "action_forbidden": ev["action"] not in policy["role_actions"].get(user["role"], []),
            "secret_role": secret and user["role"] not in policy["secret_roles"],
            "mfa_required": (ev["action"] in policy["mfa_actions"] or secret) and not ev["mfa"],
            "untrusted_zone": ev["sensitivity"] != "public" and ev["zone"] not in policy["trusted_zones"],
            "expired": ev["time"] >= ev["expires"],
        }
        codes = sorted(code for code, hit in rules.items() if hit)
        if codes:
            denied[ev["id"]] = codes
            denials[ev["user"]] += 1
        else:
            allowed.append(ev["id"])
    contained = sorted(u for u, n in denials.items() if n >= policy["containment_denials"])
    return {"allowed_ids": sorted(allowed), "denied": denied, "containment": contained}
