"""The attack battery: what a hostile agent leaves behind, and the reset that must undo it.

Each test makes one shape (or trace) as UID 2000 in the workspace and in the scratch
directories, resets, and requires the next episode to start clean: only the case's
files in the workspace, no UID-2000 file in any directory, no UID-2000 process, no IPC
object, the server healthy. Every other directory is read-only to the agent, even a
world-writable one. The server runs contained (tests/contained.py), so all this happens
in its namespace only.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from env.catalog import CASE_IDS
from tests.env.conftest import after_teardown, alive_after_teardown, require_root, start_server

pytestmark = pytest.mark.root

CASE = CASE_IDS[3]
PYTHON = "/usr/bin/python3"
SHARED = ("/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue")
# A world-writable directory no list names: the agent sees it read-only.
UNLISTED = "/var/lib/arena-drop"


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    """A contained server with a 30 s shell timeout (building 100,000 files takes a while)
    and a world-writable directory of its own that no list in the server names."""
    require_root()
    live = start_server(tmp_path_factory.mktemp("attacked"), shell_timeout_s=30.0)
    try:
        drop = live.contained.path(UNLISTED)  # the server's own view, writable by root
        drop.mkdir()
        os.chmod(drop, 0o1777)
        yield live
    finally:
        live.stop()


def run(env, command: str) -> dict:
    return env.step({"operation": "shell", "command": command}).observation


def script(server, env, text: str, *, where: str = ".") -> dict:
    """Run ``text`` with python3 as UID 2000, from ``where``."""
    write = server.write_command("/workspace/home/attack.py", text)
    return run(env, write + f"\ncd {where} && {PYTHON} /workspace/home/attack.py")


def assert_clean(server, env) -> None:
    """The state right after a reset: nothing of the last episode anywhere."""
    assert server.healthy()
    repo = server.path("/workspace/repo")
    names = sorted(os.listdir(repo))
    assert len(names) == 4 and "INSTRUCTIONS.md" in names, names
    assert os.listdir(server.path("/workspace/home")) == []
    assert sorted(os.listdir(server.path("/workspace"))) == ["home", "repo"]
    sandbox = server.sandbox_id
    for directory in (*SHARED, UNLISTED):
        left = [n for n in os.listdir(server.path(directory)) if _owner(server.path(directory) / n) == sandbox]
        assert left == [], f"{directory}: {left}"
    # The last episode's namespace goes a moment after the reset answers.
    assert after_teardown(lambda: sandbox_processes(server)) == []
    out = run(env, "echo alive; ipcs -q -m -s | grep -c '^0x' ; ls -A /dev/mqueue | wc -l")
    assert out["output"].split() == ["alive", "0", "0"], out["output"]


def _owner(path: Path) -> int | None:
    """The owner of `path`; None once it is gone (the server's own temporary files come and go)."""
    try:
        return os.lstat(path).st_uid
    except FileNotFoundError:
        return None


def sandbox_processes(server) -> list[int]:
    sandbox = str(server.sandbox_id)
    found = []
    for name in os.listdir(server.path("/proc")):
        if name.isdigit():
            try:
                status = server.path(f"/proc/{name}/status").read_text()
            except (FileNotFoundError, ProcessLookupError):
                continue
            uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:4]
            if sandbox in uids and "Z (zombie)" not in status:
                found.append(int(name))
    return found


def attack_then_reset(server, text: str, *, places=("/workspace/repo", "/tmp")) -> None:
    with server.session(message_timeout_s=120) as env:
        env.reset(task_id=CASE)
        for place in places:
            out = script(server, env, text, where=place)
            assert out["exit_code"] == 0, out["output"]
        env.reset(task_id=CASE)
        assert_clean(server, env)


DEEP = """
import os
for _ in range(10_000):
    os.mkdir("d")
    os.chdir("d")
open("bottom", "w").close()
"""

# As many files as the place allows (a scratch tmpfs has an inode limit of its own).
WIDE = """
import errno, os
os.mkdir("wide")
for i in range(100_000):
    try:
        os.close(os.open(f"wide/{i}", os.O_CREAT | os.O_WRONLY, 0o644))
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        break
"""

LINKS_AND_LOOPS = """
import os
os.mkdir("links")
open("links/file", "w").close()
for i in range(50):
    os.link("links/file", f"links/hard{i}")
os.symlink("loop-b", "links/loop-a")
os.symlink("loop-a", "links/loop-b")
os.symlink(".", "links/self")
os.symlink("/", "links/root")
os.symlink("/etc/passwd", "links/passwd")
os.symlink("/workspace", "links/workspace")
"""

UNREADABLE = """
import os
os.makedirs("locked/a/b")
open("locked/a/b/x", "w").close()
for path in ("locked/a/b", "locked/a", "locked"):
    os.chmod(path, 0)
"""

SPECIAL = """
import os, socket
os.mkdir("special")
os.mkfifo("special/fifo")
s = socket.socket(socket.AF_UNIX)
s.bind("special/sock")
os.mkfifo("top-fifo")
"""

ODD_NAMES = """
import os
os.mkdir(b"bad\\xff\\nname")
open(b"bad\\xff\\nname/in\\nner\\xfe", "w").close()
open(b"\\n", "w").close()
open(b"-rf *", "w").close()
"""

HELD_OPEN = """
import os, signal, sys
open("held", "w").write("x")
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        f = open("held", "a")
        devnull = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        signal.pause()
    os._exit(0)
os.wait()
"""


SHAPES = [
    ("depth-10000", DEEP),
    ("width-100000", WIDE),
    ("links-and-loops", LINKS_AND_LOOPS),
    ("chmod-000", UNREADABLE),
    ("fifo-and-socket", SPECIAL),
    ("odd-names", ODD_NAMES),
    ("held-open-ignoring-sigterm", HELD_OPEN),
]


@pytest.mark.parametrize(("shape", "text"), SHAPES, ids=[name for name, _ in SHAPES])
def test_reset_survives_every_shape(attacked, shape, text):
    attack_then_reset(attacked, text)
    # The server's own view: once the session has closed, its episode's namespaces may be
    # gone already, and the agent's /etc is this one, mounted read-only.
    assert attacked.contained.path("/etc/passwd").read_text().startswith("root:")


def test_reset_after_random_trees_across_many_episodes(attacked):
    seed = int(os.environ.get("ARENA_RESET_SEED", random.SystemRandom().randrange(2**32)))
    rng = random.Random(seed)
    with attacked.session(message_timeout_s=120) as env:
        env.reset(task_id=CASE)
        for episode in range(8):
            place = rng.choice(["/workspace/repo", "/tmp", "/dev/shm", "/var/tmp", "/workspace/home"])
            parts = rng.sample(
                [DEEP.replace("10_000", str(rng.randrange(1, 800))), LINKS_AND_LOOPS, UNREADABLE, SPECIAL, ODD_NAMES],
                k=rng.randrange(1, 4),
            )
            text = "import os\nbase = os.getcwd()\n" + "\n".join(
                f"os.chdir(base)\nos.makedirs('r{i}', exist_ok=True)\nos.chdir('r{i}')\n{part}"
                for i, part in enumerate(parts)
            )
            out = script(attacked, env, text, where=place)
            assert out["exit_code"] == 0, (seed, episode, out["output"])
            env.reset(task_id=CASE)
            try:
                assert_clean(attacked, env)
            except AssertionError as exc:
                raise AssertionError(f"ARENA_RESET_SEED={seed}, episode {episode}: {exc}") from exc


def test_what_an_episode_leaves_is_seen_before_the_reset(attacked):
    """The teeth of assert_clean: a process and a file of the sandbox user, left in shared
    places, are found (as the host sees UID 2000 of the server's namespace)."""
    with attacked.session(message_timeout_s=120) as env:
        env.reset(task_id=CASE)
        out = run(env, "(setsid sleep 300 >/dev/null 2>&1 &); echo left > /tmp/left-behind; echo ok")
        assert out["output"].strip() == "ok", out
        assert sandbox_processes(attacked) != []
        assert _owner(attacked.path("/tmp/left-behind")) == attacked.sandbox_id != 2000
        with pytest.raises(AssertionError):
            assert_clean(attacked, env)
        env.reset(task_id=CASE)
        assert_clean(attacked, env)


def test_reset_kills_setsid_and_double_forked_processes(attacked):
    with attacked.session() as env:
        env.reset(task_id=CASE)
        run(
            env,
            "setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $!; "
            "( ( sleep 1000 </dev/null >/dev/null 2>&1 & echo $! ) & ); sleep 0.2",
        )
        pids = attacked.episode_pids()
        assert len(pids) == 2
        env.reset(task_id=CASE)
        assert alive_after_teardown(pids) == []
        assert_clean(attacked, env)


def test_sysv_ipc_is_refused_and_posix_message_queues_go_at_reset(attacked):
    """System V objects would pin memory no process holds: the episode gets none. Its POSIX
    message queues live in its own mqueue mount, which goes with it."""
    mq = (
        "import ctypes, os\n"
        "rt = ctypes.CDLL('librt.so.1', use_errno=True)\n"
        "rt.mq_open.restype = ctypes.c_int\n"
        "fd = rt.mq_open(b'/arena-mq', os.O_CREAT | os.O_RDWR, 0o600, None)\n"
        "assert fd >= 0, ctypes.get_errno()\n"
    )
    with attacked.session() as env:
        env.reset(task_id=CASE)
        for kind in ("-Q", "-M 4096", "-S 2"):
            refused = run(env, f"ipcmk {kind}")
            assert refused["exit_code"] != 0 and "Operation not permitted" in refused["output"], refused
        assert run(env, "ipcs -q -m -s | grep -c '^0x'")["output"].split()[-1] == "0"
        assert script(attacked, env, mq)["exit_code"] == 0
        assert run(env, "ls /dev/mqueue")["output"] == "arena-mq\n"
        env.reset(task_id=CASE)
        assert_clean(attacked, env)


def test_every_other_directory_is_read_only_to_the_agent(attacked):
    with attacked.session() as env:
        env.reset(task_id=CASE)
        for place in (UNLISTED, "/etc", "/var/lib", "/opt"):
            out = run(env, f"touch {place}/left; mkdir {place}/tree")
            assert out["exit_code"] != 0, place
            assert out["output"].count("Read-only file system") == 2 or place != UNLISTED, out["output"]
        assert run(env, f"ls -A {UNLISTED}")["output"] == ""
        env.reset(task_id=CASE)
        assert_clean(attacked, env)


def test_fork_bomb_output_flood_memory_hog_sparse_answer_and_killing_the_server(attacked):
    bomb = (
        "import os, time\n"
        "for _ in range(100000):\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(100)\n"
        "            os._exit(0)\n"
        "    except OSError:\n"
        "        break\n"
    )
    with attacked.session(message_timeout_s=120) as env:
        env.reset(task_id=CASE)
        # Host mode has no cgroup limits: the process and address-space limits are what
        # hold, so confirm them before pushing against them.
        assert run(env, "ulimit -u; ulimit -v")["output"].split() == ["256", str(4 * 1024 * 1024)]
        script(attacked, env, bomb)
        env.reset(task_id=CASE)
        assert_clean(attacked, env)
        flood = run(env, "yes | head -c 50M; echo")
        assert flood["output"].startswith("[output truncated")
        hog = run(env, f"{PYTHON} -c 'x = bytearray(8 * 1024**3)'; echo status=$?")
        assert "MemoryError" in hog["output"]
        # The file size limit stops a 10 GB sparse answer; what is left is refused.
        run(env, "truncate -s 10G answer.json; ls -ls answer.json")
        # The server (PID 1 here, as in a container) is another user's: it cannot be killed.
        killer = run(env, "kill -9 1; kill -9 $PPID; echo tried")
        assert "Operation not permitted" in killer["output"] and attacked.healthy()
        graded = env.step({"operation": "finish"})
        assert graded.reward == 0.0 and graded.done
        env.reset(task_id=CASE)
        assert_clean(attacked, env)
