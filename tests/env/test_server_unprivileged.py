"""The unprivileged mode (docs/isolation.md): a hostile agent without namespaces of its own.

The server runs contained (tests/contained.py: its own PID namespace, so a kill by UID
reaches only its processes, over an overlay of /), told `ARENA_ISOLATION=unprivileged`,
as it takes that mode by itself under Docker's default seccomp profile. Each class of
issue 46 is tried as an agent would: a hopper, sockets to any port, files left in the
scratch directories, System V and POSIX IPC, `setsid` daemons and nested namespaces.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from env.catalog import CASE_IDS
from pipeline.checks.isolation_checks import HOPPER_SCRIPT, LEFTOVERS_FIND, LEFTOVERS_PLANT
from pipeline.checks.shell import count_processes
from tests.env.conftest import start_server
from tests.env.test_server_isolation import _zygote

pytestmark = pytest.mark.root

CASE = CASE_IDS[0]


@pytest.fixture(scope="module")
def unprivileged(tmp_path_factory):
    from tests.env.conftest import require_root

    require_root()
    live = start_server(tmp_path_factory.mktemp("unprivileged"), isolation="unprivileged", shell_timeout_s=10)
    try:
        yield live
    finally:
        live.stop()


def run(env, command: str) -> dict:
    return env.step({"operation": "shell", "command": command}).observation


def script(env, name: str, text: str, *args: str) -> dict:
    return run(env, f"cat > $HOME/{name} <<'EOF'\n{text}\nEOF\npython3 $HOME/{name} {' '.join(args)}")


def test_the_mode_is_logged_and_served(unprivileged, server):
    assert unprivileged.get("/metadata")[1]["isolation"] == "unprivileged"
    assert server.get("/metadata")[1]["isolation"] == "namespaces"
    assert "arena: isolation: unprivileged" in unprivileged.log_path.read_text()


def test_a_hopper_dies_at_reset(unprivileged):
    marker = f"hop-{time.monotonic_ns()}"
    with unprivileged.session() as env:
        env.reset(task_id=CASE)
        started = script(env, "hop.py", HOPPER_SCRIPT, marker)
        assert started["exit_code"] == 0, started
        time.sleep(0.3)
        env.reset(task_id=CASE)
        after = run(env, f"{count_processes(marker)}; ls -A . $TMPDIR")
        assert after["output"].split()[0] == "0", after["output"]
        assert marker not in after["output"]


def test_no_socket_reaches_any_port(unprivileged):
    port = unprivileged.url.rsplit(":", 1)[1]
    with unprivileged.session() as env:
        env.reset(task_id=CASE)
        out = run(
            env,
            "python3 -c 'import socket; socket.socket()' 2>&1 | tail -1; "
            f"(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>&1; echo tcp=$?; "
            "python3 -c 'import socket; a, b = socket.socketpair(); a.send(b\"ok\"); print(b.recv(2))'",
        )
        assert "PermissionError" in out["output"] and "Operation not permitted" in out["output"], out
        assert "tcp=1" in out["output"] and "b'ok'" in out["output"], out["output"]


def test_nothing_of_an_episode_is_in_the_next(unprivileged):
    marker = f"left-{time.monotonic_ns()}"
    with unprivileged.session() as env:
        env.reset(task_id=CASE)
        planted = script(env, "plant.py", LEFTOVERS_PLANT, marker)
        assert "DAEMON" in planted["output"] and "FILE /tmp" in planted["output"], planted["output"]
        assert "NOFILE /dev/shm" in planted["output"] and "SHM -1" in planted["output"], planted["output"]
        assert "MQ -1" in planted["output"], planted["output"]
        env.reset(task_id=CASE)
        found = script(env, "find.py", LEFTOVERS_FIND, marker)
        assert "LOOKED" in found["output"] and "LEFT" not in found["output"], found["output"]


def test_no_nested_namespace_and_no_capability(unprivileged):
    with unprivileged.session() as env:
        env.reset(task_id=CASE)
        out = run(
            env,
            "unshare -U true; echo rc=$?; grep -E '^Cap(Bnd|Eff)' /proc/self/status; "
            "cat /proc/self/oom_score_adj; id -u",
        )
        assert "rc=1" in out["output"], out["output"]
        assert out["output"].count("0000000000000000") == 2, out["output"]
        assert out["output"].split()[-2:] == ["1000", "2000"], out["output"]


def test_an_answer_is_graded_and_the_next_episode_starts_clean(unprivileged, oracle_json):
    with unprivileged.session() as env:
        env.reset(task_id=CASE)
        run(
            env,
            f"cat > answer.json <<'EOF'\n{oracle_json(CASE)}\nEOF\n"
            "for i in $(seq 2000); do echo $i > $TMPDIR/f$i; done",
        )
        assert env.step({"operation": "finish"}).reward == 1.0
        started = time.monotonic()
        env.reset(task_id=CASE)
        assert time.monotonic() - started < 2.0
        listing = run(env, "ls -A . $TMPDIR $HOME")["output"]
        assert "answer.json" not in listing and "f1" not in listing, listing


def _zombie_children(pid: int) -> list[int]:
    children = [
        int(child) for task in Path(f"/proc/{pid}/task").iterdir() for child in (task / "children").read_text().split()
    ]
    zombies = []
    for child in children:
        try:
            if Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                zombies.append(child)
        except (OSError, IndexError):
            pass
    return zombies


def test_a_killed_zygote_leaves_no_zombie_and_resets_go_on(unprivileged):
    """The zygote reaps the orphans of killed episodes; killed itself, they come to the
    server, which must reap them: a zombie of UID 2000 would keep the next kill by UID from
    ever finding none left."""
    with unprivileged.session() as env:
        env.reset(task_id=CASE)
        run(env, "for i in $(seq 8); do (setsid sleep 1000 &); done; sleep 0.2")
        zygote = _zygote(unprivileged)
        assert zygote is not None
        os.kill(zygote, signal.SIGKILL)
        for _ in range(3):
            env.reset(task_id=CASE)
            assert run(env, "echo works")["output"] == "works\n"
        server_pid = unprivileged.contained.init_pid()
        assert _zombie_children(server_pid) == []
