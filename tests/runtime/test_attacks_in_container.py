"""The attack batteries against the server in a container under limits, as the image runs:
tests/env/test_server_reset_attacks.py (every shape and trace, then a reset, then the next
episode must be clean, seen from inside by the sandbox user itself) and tests/env/route_attacks.py
(the OpenEnv standard's routes, /mcp and /openapi.json, from clients beside the episode)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from urllib.parse import urlsplit

import pytest

from pipeline.checks.client import Session, http_get
from pipeline.runtime.limits import ContainerLimits
from tests.curriculum import all_cases
from tests.env import route_attacks
from tests.env import test_server_reset_attacks as battery

from .conftest import checkout_servers

pytestmark = [pytest.mark.root, pytest.mark.container, pytest.mark.slow]

MIB = 1 << 20
LIMITS = ContainerLimits(memory_bytes=1024 * MIB, pids=1024, cpus=1.0, workspace_bytes=256 * MIB)
CASE = all_cases()[3]
SHARED = ("/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue")

# Run as UID 2000 right after a reset: what of the last episode it can still find.
CLEAN_PROBE = r"""
import json, os
def owned(d):
    try:
        return [n for n in os.listdir(d) if os.lstat(os.path.join(d, n)).st_uid == 2000]
    except FileNotFoundError:
        return []
procs = []
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            status = open("/proc/" + p + "/status").read()
            cmd = open("/proc/" + p + "/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        uid = [l for l in status.splitlines() if l.startswith("Uid:")][0].split()[1]
        if uid == "2000" and "CLEAN" + "PROBE" not in cmd:
            procs.append(cmd)
# An episode's own /proc (docs/isolation.md) has no sysvipc: its IPC namespace is new too.
ipc = ({k: len(open("/proc/sysvipc/" + k).read().splitlines()) - 1 for k in ("msg", "shm", "sem")}
       if os.path.isdir("/proc/sysvipc") else "the episode's own namespace")
print("CLEANPROBE " + json.dumps({"repo": len(os.listdir("/workspace/repo")), "home": os.listdir("/workspace/home"),
      "shared": {d: owned(d) for d in SHARED}, "procs": procs, "ipc": ipc}))
""".replace("SHARED", repr(list(SHARED)))


@pytest.fixture(scope="module")
def server(base_image, local_registry):
    with checkout_servers(base_image, local_registry, 1, LIMITS) as (container,):
        yield container


def _clean(session: Session) -> dict:
    out = session.shell("python3 -c " + _quote(CLEAN_PROBE)).output
    line = next((l for l in out.splitlines() if l.startswith("CLEANPROBE ")), None)
    assert line is not None, out
    seen = json.loads(line[len("CLEANPROBE ") :])
    if seen["ipc"] == "the episode's own namespace":
        seen["ipc"] = CLEAN["ipc"]  # nothing of the last episode's can be in it
    return seen


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


CLEAN = {"repo": 4, "home": [], "shared": dict.fromkeys(SHARED, []), "procs": [], "ipc": {"msg": 0, "shm": 0, "sem": 0}}


WIDE_PARTS = 4


def _in_parts(text: str) -> list[str]:
    """The battery's wide directory made in WIDE_PARTS actions of 25,000 files each (the same
    100,000 entries): in a container held to one CPU on a loaded machine, one action making
    all of them can pass the 60 s limit. Other shapes run as they are."""
    if text != battery.WIDE:
        return [text]
    step = 100_000 // WIDE_PARTS
    whole = 'os.mkdir("wide")\nfor i in range(100_000):'
    assert whole in text, "the battery's wide attack changed: update _in_parts"
    return [
        text.replace(whole, f'os.makedirs("wide", exist_ok=True)\nfor i in range({k * step}, {(k + 1) * step}):')
        for k in range(WIDE_PARTS)
    ]


@pytest.mark.parametrize(
    ("shape", "text"),
    [
        ("depth-10000", battery.DEEP),
        ("width-100000", battery.WIDE),
        ("links-and-loops", battery.LINKS_AND_LOOPS),
        ("chmod-000", battery.UNREADABLE),
        ("fifo-and-socket", battery.SPECIAL),
        ("odd-names", battery.ODD_NAMES),
        ("held-open-ignoring-sigterm", battery.HELD_OPEN),
    ],
)
def test_every_shape_is_gone_after_reset_in_the_container(server, shape, text):
    with Session(server.url) as session:
        session.reset(CASE.id, seed=1)
        for place in ("/workspace/repo", "/tmp", "/dev/shm"):
            for part in _in_parts(text):
                write = f"cat > /workspace/home/attack.py <<'ARENA_EOF'\n{part}\nARENA_EOF\n"
                out = session.shell(write + f"cd {place} && python3 /workspace/home/attack.py; echo rc=$?")
                assert "rc=0" in out.output, out.output
        session.reset(CASE.id, seed=2)
        assert _clean(session) == CLEAN


def test_processes_and_ipc_are_gone_after_reset_in_the_container(server):
    with Session(server.url) as session:
        session.reset(CASE.id, seed=3)
        out = session.shell(
            "setsid sleep 1000 </dev/null >/dev/null 2>&1 & "
            "( ( sleep 1000 </dev/null >/dev/null 2>&1 & ) & ); "
            "ipcmk -Q >/dev/null 2>&1 || echo sysv-refused; "
            'python3 -c \'import ctypes, os; rt = ctypes.CDLL("librt.so.1"); '
            'assert rt.mq_open(b"/arena-mq", os.O_CREAT | os.O_RDWR, 0o600, None) >= 0\'; '
            "sleep 0.2; ls /dev/mqueue; echo made"
        )
        assert "arena-mq" in out.output and "made" in out.output and "sysv-refused" in out.output, out.output
        before = _clean(session)
        assert len(before["procs"]) >= 2
        session.reset(CASE.id, seed=4)
        assert _clean(session) == CLEAN


def test_route_attacks_beside_an_episode_in_the_container(server):
    """tests/env/route_attacks.py as the image runs: a second client on the published port
    (the agent cannot reach it): nothing on /mcp or the dropped routes touches the episode."""
    port = urlsplit(server.url).port
    assert route_attacks.attack(server.url, CASE.id, port=port, secrets=("/opt/arena", "expected")) == []


def test_a_flood_from_outside_leaves_the_episode_and_its_budget(server):
    """A client outside floods POST /mcp (valid, malformed, oversized) while an episode runs: every
    reply is JSON-RPC, the episode ends at its 16th action, the server stays healthy."""
    bodies = [json.dumps(m).encode() for _, m in route_attacks.MCP_CALLS]
    bodies += [b"{", b"[" * 5000, b"x" * (70 * 1024)]
    statuses: list[int] = []
    stop = threading.Event()

    def flood() -> None:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        i = 0
        while not stop.is_set():
            request = urllib.request.Request(
                server.url + "/mcp",
                data=bodies[i % len(bodies)],
                method="POST",
                headers={"Content-Type": "application/json"},
            )
            try:
                with opener.open(request, timeout=30) as reply:
                    statuses.append(reply.status)
            except urllib.error.HTTPError as exc:
                statuses.append(exc.code)
            i += 1

    threads = [threading.Thread(target=flood) for _ in range(6)]
    for t in threads:
        t.start()
    try:
        with Session(server.url) as session:
            session.reset(CASE.id, seed=5)
            replies = [session.shell(f"echo {n} >> count && wc -l < count") for n in range(1, 17)]
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert len(statuses) > 50 and set(statuses) <= {200, 202}
    assert [r.done for r in replies] == [False] * 15 + [True]
    assert [r.output.strip() for r in replies[:15]] == [str(n) for n in range(1, 16)]
    assert http_get(server.url, "/health") == (200, {"status": "healthy"})
