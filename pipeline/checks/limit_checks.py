"""image/limit-*: the budget's container limits are in force, seen from inside as UID 2000.

The container runtime applies them (pipeline/runtime/limits.py); these checks read what the
kernel enforces (the cgroup the shell runs in, the size of the /workspace filesystem)
through the server's own shell, so they see what an agent's processes are held to.
A limit that cannot be read or is not set fails with the reason (for example a
hybrid cgroup v1 host whose container does not see the controller): never a silent pass.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from pipeline.checks._record import Recorder
from pipeline.checks.client import ServerError, Session
from pipeline.curriculum import Case

LIMIT_CHECKS = ("limit-memory", "limit-pids", "limit-cpus", "limit-workspace")
# A cgroup v1 "no limit" is a huge number (PAGE_COUNTER_MAX pages); anything at or over
# this is treated as unlimited.
_UNLIMITED = 1 << 62

_PROBE = r"""
import json, os
def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError as exc:
        return "unreadable: %s (%s)" % (path, exc.strerror)
out = {"cgroup": "v2" if os.path.exists("/sys/fs/cgroup/cgroup.controllers") else "v1"}
if out["cgroup"] == "v2":
    out["memory"] = read("/sys/fs/cgroup/memory.max")
    out["pids"] = read("/sys/fs/cgroup/pids.max")
    out["cpu"] = read("/sys/fs/cgroup/cpu.max")
else:
    out["memory"] = read("/sys/fs/cgroup/memory/memory.limit_in_bytes")
    out["pids"] = read("/sys/fs/cgroup/pids/pids.max")
    out["cpu"] = read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") + " " + read("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
try:
    st = os.statvfs("/workspace")
    out["workspace"] = st.f_blocks * st.f_frsize
except OSError as exc:
    out["workspace"] = "unreadable: /workspace (%s)" % exc.strerror
out["uid"] = os.getuid()
print("LIMITS " + json.dumps(out))
"""


def probe_command() -> str:
    return "python3 -c " + _quote(_PROBE)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def _number(value: object) -> int | None:
    """A cgroup value as a number; None for "max", unreadable or unlimited."""
    text = str(value)
    if not text.isdigit():
        return None
    number = int(text)
    return None if number >= _UNLIMITED else number


def _cpus(value: object) -> float | None:
    parts = str(value).split()
    if len(parts) != 2 or parts[0] in ("max", "-1") or not parts[1].isdigit():
        return None
    try:
        quota = int(parts[0])
    except ValueError:
        return None
    return quota / int(parts[1]) if quota > 0 else None


def verdicts(seen: Mapping[str, object], expected: Mapping[str, float]) -> dict[str, tuple[bool, object]]:
    """check name -> (passed, observed) for what the probe saw against the expected limits."""
    found = {
        "limit-memory": (_number(seen.get("memory")), seen.get("memory"), expected["memory_bytes"]),
        "limit-pids": (_number(seen.get("pids")), seen.get("pids"), expected["pids"]),
        "limit-cpus": (_cpus(seen.get("cpu")), seen.get("cpu"), expected["cpus"]),
        "limit-workspace": (_number(seen.get("workspace")), seen.get("workspace"), expected["workspace_bytes"]),
    }
    result: dict[str, tuple[bool, object]] = {}
    for name, (value, raw, want) in found.items():
        if value is None:
            result[name] = (False, f"not in force as seen from the container ({seen.get('cgroup')}): {raw}")
        else:
            result[name] = (abs(value - want) <= want * 0.001, value)
    return result


def limit_checks(session: Session, case: Case, seed: int, expected: Mapping[str, float], rec: Recorder) -> None:
    """One episode: the probe runs as the sandbox user and reports each limit."""
    try:
        session.reset(case.id, seed=seed)
        out = session.shell(probe_command())
    except ServerError as exc:
        for name in LIMIT_CHECKS:
            rec.error(name, exc)
        return
    line = next((l for l in out.output.splitlines() if l.startswith("LIMITS ")), None)
    seen = json.loads(line[len("LIMITS ") :]) if line else {}
    keys = {
        "limit-memory": "memory_bytes",
        "limit-pids": "pids",
        "limit-cpus": "cpus",
        "limit-workspace": "workspace_bytes",
    }
    for name, (passed, observed) in verdicts(seen, expected).items():
        ok = passed and seen.get("uid") == 2000
        rec.add(
            name,
            ok,
            observed={"value": observed, "seen_as_uid": seen.get("uid")} if line else out.output[-300:],
            expected={"value": expected[keys[name]], "seen_as_uid": 2000},
        )
