"""A hostile agent against the real server: nothing it does crosses a reset.

The five classes of issue 39, each tried as an agent would: a process that forks faster
than any kill loop, connections to the server's port, a kernel keyring left for the next
episode, an inode flood and the reset after it, and messages that used to end a session
ungraded. The server runs contained (tests/contained.py); each episode runs in
namespaces of its own inside it (env/server/sandbox.py).
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest
import websockets.sync.client

from env.catalog import CASE_IDS
from pipeline.checks.isolation_checks import HOPPER_SCRIPT
from tests.env.conftest import TEARDOWN_S, pids_in

pytestmark = pytest.mark.root

CASE = CASE_IDS[0]
PYTHON = "/usr/bin/python3"


def run(env, command: str) -> dict:
    return env.step({"operation": "shell", "command": command}).observation


def test_a_hopper_that_outruns_any_kill_loop_dies_with_its_episode(server):
    # The check suite's hopper: forks in a tight loop, the parent exiting each time, and
    # writes its marker (the next episode's answer, say) wherever it can.
    with server.session(message_timeout_s=60) as env:
        env.reset(task_id=CASE)
        run(
            env,
            server.write_command("/workspace/home/hop.py", HOPPER_SCRIPT)
            + f"\n{PYTHON} /workspace/home/hop.py hopper-was-here; sleep 0.5; echo started",
        )
        episode = server.episode_pid_namespace()
        # The hopper's PID changes faster than /proc can be listed: seen at least once.
        assert any(len(pids_in(episode)) > 1 for _ in range(50)), "the hopper runs before the reset"
        env.reset(task_id=CASE)
        # Killed at the reset, reaped in the background (env/server/sandbox.py, retire): PID 1
        # is gone soon after, and with it every process of its namespace.
        deadline = time.monotonic() + 10
        while pids_in(episode) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pids_in(episode) == []
        time.sleep(0.5)
        out = run(env, "ls /workspace/repo /tmp; for i in $(seq 50); do sleep 0.01 & done; wait; echo forks-ok")
        assert "hopper-was-here" not in out["output"] and "forks-ok" in out["output"], out["output"]
        assert env.step({"operation": "finish"}).reward == 0.0


def test_the_agent_cannot_reach_the_server_or_any_network(server):
    port = urlparse(server.url).port
    probe = (
        f"import socket\nfor port in ({port}, 8000):\n"
        "    s = socket.socket()\n    s.settimeout(2)\n"
        "    try:\n        s.connect(('127.0.0.1', port)); print('connected', port)\n"
        "    except OSError as exc:\n        print('refused', port, exc.errno)\n"
        "print(sorted(l.split(':')[0].strip() for l in open('/proc/self/net/dev').readlines()[2:]))\n"
    )
    with server.session() as env:
        env.reset(task_id=CASE)
        out = run(env, server.write_command("/workspace/home/net.py", probe) + f"\n{PYTHON} /workspace/home/net.py")
        assert "connected" not in out["output"], out["output"]
        assert "['lo']" in out["output"], out["output"]


def test_a_flood_of_idle_connections_leaves_the_server_healthy(start_live_server):
    live = start_live_server(nofile=1024)
    host, port = "127.0.0.1", urlparse(live.url).port
    held = []
    try:
        for _ in range(1100):
            sock = socket.socket()
            sock.settimeout(5)
            try:
                sock.connect((host, port))
            except OSError:
                sock.close()
                continue
            held.append(sock)
        deadline = time.monotonic() + 20
        while True:
            try:
                if live.get("/health")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the server did not answer /health under the flood"
            time.sleep(0.5)
        with live.session() as env:
            assert env.reset(task_id=CASE).observation["task_id"] == CASE
    finally:
        for sock in held:
            sock.close()


KEYRING = r"""
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
KEY_SPEC_USER, KEY_SPEC_SESSION = -4, -3
if sys.argv[1] == "plant":
    for ring in (KEY_SPEC_USER, KEY_SPEC_SESSION):
        made = libc.syscall(248, b"keyring", b"MSG-FROM-EPISODE-1:answer=42", None, 0, ring)  # add_key
        print("planted" if made > 0 else "refused", ctypes.get_errno())
else:  # searched by name: an episode's /proc has no /proc/keys
    for ring in (KEY_SPEC_USER, -5, KEY_SPEC_SESSION):
        if libc.syscall(250, 10, ring, b"keyring", b"MSG-FROM-EPISODE-1:answer=42", 0) > 0:  # KEYCTL_SEARCH
            print("found MSG-FROM-EPISODE-1")
    print("searched")
"""


def test_a_keyring_left_by_one_episode_is_not_seen_by_the_next(server):
    with server.session() as env:
        env.reset(task_id=CASE)
        write = server.write_command("/workspace/home/keys.py", KEYRING)
        planted = run(env, write + f"\n{PYTHON} /workspace/home/keys.py plant")
        assert planted["output"].split() == ["refused", "1", "refused", "1"], planted  # EPERM
        env.reset(task_id=CASE)
        seen = run(env, write + f"\n{PYTHON} /workspace/home/keys.py read")
        assert "searched" in seen["output"] and "MSG-FROM-EPISODE-1" not in seen["output"], seen["output"]


def test_an_inode_flood_is_bounded_and_the_reset_after_it_is_quick(server):
    flood = (
        "import errno, os, sys\nmade = 0\nfor place in sys.argv[1:]:\n"
        "    for i in range(10**7):\n        try:\n"
        "            os.close(os.open(f'{place}/f{i}', os.O_CREAT | os.O_WRONLY, 0o644))\n"
        "        except OSError as exc:\n            assert exc.errno == errno.ENOSPC, exc\n            break\n"
        "        made += 1\nprint('made', made)\n"
    )
    with server.session(message_timeout_s=120) as env:
        env.reset(task_id=CASE)
        out = run(
            env,
            server.write_command("/workspace/home/flood.py", flood)
            + f"\n{PYTHON} /workspace/home/flood.py /tmp /dev/shm /var/tmp; df -i /tmp | tail -1",
        )
        made = int(out["output"].split("made ")[1].split()[0])
        assert 0 < made < 200_000, out["output"]  # each place stops at its own inode limit
        started = time.monotonic()
        env.reset(task_id=CASE)
        assert time.monotonic() - started < 5
        after = run(env, "ls -A /tmp /dev/shm /var/tmp | grep -c '^f' ; true")
        assert after["output"].strip() == "0", after["output"]


def _ws(server):
    return websockets.sync.client.connect(server.url.replace("http", "ws", 1) + "/ws", max_size=None)


def _call(ws, payload) -> dict:
    ws.send(payload)
    return json.loads(ws.recv(timeout=30))


MALFORMED = [
    ("lone-surrogate", '{"type": "step", "data": {"operation": "shell", "command": "echo \\ud800"}}', "surrogate"),
    ("deep-nesting", "[" * 100_000, "nests deeper"),
    ("long-episode-id", json.dumps({"type": "reset", "data": {"episode_id": "x" * 100_000}}), "at most 256"),
    ("not-json", "not json", "not JSON"),
    ("binary", b"\x00\xff binary", "binary"),
    ("top-level-array", "[]", "JSON object"),
    ("top-level-null", "null", "JSON object"),
    ("top-level-number", "1", "JSON object"),
    ("top-level-string", '"step"', "JSON object"),
]


# The payloads are not in the tests' ids: a 100,000-character id floods every report.
@pytest.mark.parametrize(("name", "payload", "says"), MALFORMED, ids=[name for name, _, _ in MALFORMED])
def test_a_malformed_message_gets_an_error_and_the_episode_goes_on(server, name, payload, says):
    with _ws(server) as ws:
        assert _call(ws, json.dumps({"type": "reset", "data": {"task_id": CASE}}))["type"] == "observation"
        reply = _call(ws, payload)
        assert reply["type"] == "error" and says in reply["data"]["message"], (name, reply)
        assert len(reply["data"]["message"]) < 1000
        after = _call(ws, json.dumps({"type": "step", "data": {"operation": "shell", "command": "echo still"}}))
        assert after["type"] == "observation" and after["data"]["observation"]["output"] == "still\n", after
        graded = _call(ws, json.dumps({"type": "step", "data": {"operation": "finish"}}))
        assert graded["data"]["done"] is True


def test_the_longest_command_in_four_byte_characters_runs(server):
    # 15,980 characters of U+1F600 (4 bytes each in UTF-8, 12 characters each as JSON's
    # \\u escapes): the message to the sandbox's PID 1 must still fit, and PID 1 survive.
    with server.session() as env:
        env.reset(task_id=CASE)
        out = run(env, ": " + "\U0001f600" * 15_980 + "\necho done")
        assert out["exit_code"] == 0 and out["output"] == "done\n", out["output"][:200]
        assert run(env, "echo again")["output"] == "again\n"


def test_a_next_sandbox_killed_while_it_waits_is_replaced_at_reset(server):
    # The sandbox made ahead of time is killed before its episode (the OOM killer, say):
    # the reset makes another instead of failing.
    with server.session() as env:
        env.reset(task_id=CASE)
        current = server.episode_init()
        spare = None
        for _ in range(100):
            spare = next((pid for pid in server.sandbox_inits() if pid != current), None)
            if spare is not None:
                break
            time.sleep(0.05)
        assert spare is not None, "the server keeps a next sandbox ready"
        pidfd = os.pidfd_open(spare)
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            # Dead before the reset, as the server sees it (its pidfd readable): a kill that
            # lands while the reset takes the sandbox is a death during the episode instead.
            assert select.select([pidfd], [], [], TEARDOWN_S)[0], "the killed sandbox exited"
        finally:
            os.close(pidfd)
        obs = env.reset(task_id=CASE)
        assert obs.observation["task_id"] == CASE
        assert run(env, "echo works")["output"] == "works\n"


def _zygote(server) -> int | None:
    """The host PID of the server's zygote (env/server/nsinit.py run once, a child of the server)."""
    server_pid = server.contained.init_pid()
    # A child is listed under the thread that started it (the sandbox factory's own).
    children = [
        child
        for task in Path(f"/proc/{server_pid}/task").iterdir()
        for child in (task / "children").read_text().split()
    ]
    for child in children:
        try:
            if b"nsinit.py" in Path(f"/proc/{child}/cmdline").read_bytes():
                return int(child)
        except OSError:
            continue
    return None


def test_a_killed_zygote_is_started_again_and_episodes_go_on(server):
    # The zygote forks every sandbox; killed (the OOM killer, say), the next sandbox is made
    # by a new one, and the episode already running is not touched.
    with server.session() as env:
        env.reset(task_id=CASE)
        zygote = _zygote(server)
        assert zygote is not None, "the server forks sandboxes from one zygote"
        os.kill(zygote, signal.SIGKILL)
        assert run(env, "echo current")["output"] == "current\n"
        for _ in range(3):
            env.reset(task_id=CASE)
            assert run(env, "echo works")["output"] == "works\n"
        replaced = _zygote(server)
        assert replaced not in (None, zygote)


PID_PROBE = "readlink /proc/self; ls /proc | grep -c '^[0-9]'"


def test_the_pid_counter_carries_nothing_to_the_next_episode(server):
    # An episode forks until the PID counter encodes a message; the next one reads its own
    # PID. With a /proc of the episode's own PID namespace, the next one's first PID is the
    # same whatever the last episode forked, and /proc lists only the episode's processes.
    assert server.get("/metadata")[1]["proc"] == "episode"
    firsts = []
    with server.session(message_timeout_s=60) as env:
        for forks in (0, 300, 7):
            env.reset(task_id=CASE)
            pid, listed = run(env, PID_PROBE)["output"].split()
            firsts.append(pid)
            assert int(listed) <= 4, listed  # PID 1, the shell, ls, grep
            run(env, f"for i in $(seq {forks}); do /bin/true; done; echo forked")
    assert len(set(firsts)) == 1, firsts


def test_the_oom_killer_takes_the_agents_commands_before_the_episodes_pid_1(server):
    # The check suite's probe: the command's oom_score_adj, then its first ancestor that is
    # not the agent's (the sandbox's PID 1). The flood itself: tests/runtime/test_memory_in_container.py.
    from pipeline.checks.isolation_checks import OOM_PROBE

    with server.session() as env:
        env.reset(task_id=CASE)
        out = run(env, server.write_command("/workspace/home/oom.py", OOM_PROBE) + f"\n{PYTHON} /workspace/home/oom.py")
        _, command, init, uid = out["output"].split()
        assert (int(command), int(init), uid) == (1000, 500, "0"), out["output"]
