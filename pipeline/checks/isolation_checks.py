"""image/isolation-*, connection-flood, malformed-input, slow-headers: a hostile agent against the image.

Each check plays one attack that once crossed a reset or ended a session (docs/isolation.md)
and passes only if the next episode, or the server, shows nothing of it:

- `isolation-hopper`: a process that forks in a tight loop, its parent exiting each time
  (no snapshot of PIDs can catch it), writing marker files; after a reset none of it runs
  and no marker is anywhere, and the next episode can fork;
- `isolation-network`: the agent connects to no port the container listens on (TCP over
  IPv4 and IPv6) and sends no UDP; with namespaces it sees no network interface but its
  loopback, without (the unprivileged mode) it can make no socket at all;
- `isolation-keyring`: a kernel keyring named by one episode is not seen by the next;
- `isolation-scratch`: an inode flood of the scratch directories is bounded (with
  namespaces, by each tmpfs's inode limit), the reset after it is quick, and the next
  episode finds none of it;
- `isolation-leftovers`: files in /tmp, /var/tmp, /dev/shm and /run/lock, System V shared
  memory, a POSIX message queue and a `setsid nohup` daemon are not in the next episode;
- `isolation-writable`: nothing but the episode's own places is writable by the agent:
  with namespaces, its workspace and scratch tmpfs mounts; without, its workspace's
  `repo`, `home` and `tmp` only;
- `isolation-nested`: the agent can make no namespace of its own (`unshare`, `clone` with
  a CLONE_NEW* flag, `clone3`), whose teardown it could make outlast a reset, and holds no
  capability, not even in its bounding set;
- `isolation-pid-counter`: an episode forks until the PID counter encodes a message, the
  next reads its own PID: with namespaces, whose episodes see a /proc of their own PID
  namespace, every episode's first command reads the same PID whatever the last one
  forked; in the unprivileged mode the container's /proc is shared, as /metadata's `proc`
  and docs/isolation.md say;
- `isolation-oom-order`: the OOM killer's order, read from /proc as the agent: its
  commands' `oom_score_adj` is the highest there is (1000), the sandbox's PID 1 (which
  holds the episode) below it, so a memory flood kills the agent's commands, never the
  episode (the flood itself, in a container of 1 GiB: tests/runtime/test_memory_in_container.py);
- `connection-flood`: more idle connections than the server has file descriptors, held
  open, do not stop /health from answering, nor a session from starting;
- `malformed-input`: a lone surrogate, deep nesting, an oversized episode id, non-JSON,
  a binary frame and JSON that is not an object each get an error reply naming the
  problem; the longest command, in 4-byte characters, runs; and the episode goes on;
- `slow-headers`: hundreds of connections from one peer, each trickling its request's
  headers a byte a second, do not stop /health from answering within a second: the server
  holds no more of them than its per-peer limit, closes each once its header deadline has
  passed, however the bytes arrive, and a session starts after.
"""

from __future__ import annotations

import json
import re
import resource
import select
import shlex
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from websockets.exceptions import WebSocketException
from websockets.sync.client import connect

from pipeline.checks import shell as cmd
from pipeline.checks._record import Recorder
from pipeline.checks.client import ServerError, Session, http_get
from pipeline.checks.target import Target
from pipeline.curriculum import Case

ISOLATION_CHECKS = (
    "isolation-hopper",
    "isolation-network",
    "isolation-keyring",
    "isolation-scratch",
    "isolation-leftovers",
    "isolation-nested",
    "isolation-writable",
    "isolation-pid-counter",
    "isolation-oom-order",
    "connection-flood",
    "malformed-input",
    "slow-headers",
)
# The server's isolation modes (/metadata's `isolation`, docs/isolation.md): namespaces of
# the episode's own, or the container's with the agent's system calls filtered.
NAMESPACES_MODE, UNPRIVILEGED_MODE = "namespaces", "unprivileged"
# The port the server listens on inside the image (release.toml's `port`).
IMAGE_PORT = 8000
FLOOD_CONNECTIONS = 1_100  # more than the 1,024 descriptors of the budget's container
FLOOD_HEALTHY_WITHIN_S = 20.0
# slow-headers: connections from one peer, each sending one byte of its request's headers
# a second, for SLOW_ROUNDS seconds; /health is asked twice a second meanwhile.
SLOW_CONNECTIONS = 300
SLOW_ROUNDS = 8
SLOW_HEALTH_WITHIN_S = 1.0
# The server's limits (env/server/serve.py, docs/isolation.md): the connections one peer
# may hold, and the seconds a request's headers have from the accept. Every trickling
# connection must be gone before the rounds end.
PEER_CONNECTIONS = 64
HEADERS_WITHIN_S = 5
SLOW_BATCH = 32  # half the server's listen backlog
SLOW_REQUEST = b"GET /health HTTP/1.1\r\nHost: arena\r\nX-Slow: " + b"a" * 64
SCRATCH = ("/tmp", "/dev/shm", "/var/tmp")
# More than the largest scratch directory's inode limit (env/server/sandbox.py).
SCRATCH_FILES_EACH = 70_000
RESET_AFTER_FLOOD_S = 10.0
# An inode limit at or above this is none (a disk's count, not a tmpfs's nr_inodes).
INODE_LIMIT_MAX = 1_000_000

HOPPER_SCRIPT = r"""
import os, sys, time
marker = sys.argv[1]
if os.fork():
    os._exit(0)
os.setsid()
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    for place in ("/workspace/repo/", "/tmp/", "/dev/shm/"):
        try:
            with open(place + marker, "w") as out:
                out.write("{}")
        except OSError:
            pass
    try:
        if os.fork():
            os._exit(0)
    except OSError:
        time.sleep(0.001)
"""

_KEYRING = r"""
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
if sys.argv[1] == "plant":
    for ring in (-4, -3):  # the user and the session keyring
        made = libc.syscall(248, b"keyring", sys.argv[2].encode(), None, 0, ring)  # add_key
        print("planted" if made > 0 else "refused-%d" % ctypes.get_errno())
for ring in (-4, -5, -3):  # the user, user-session and session keyrings, searched by name
    found = libc.syscall(250, 10, ring, b"keyring", sys.argv[2].encode(), 0)  # keyctl(KEYCTL_SEARCH)
    if found > 0:
        print("found", sys.argv[2])
try:  # where /proc is the container's, every key the UID may view
    print(open("/proc/keys").read())
except OSError as exc:
    print("no /proc/keys:", exc)
"""

FLOOD_SCRIPT = r"""
import errno, os, sys, time
marker, each = sys.argv[1], int(sys.argv[2])
deadline = time.monotonic() + 20
for place in sys.argv[3:]:
    made, stop = 0, "count"
    for i in range(each):
        try:
            os.close(os.open(os.path.join(place, f"{marker}-{i}"), os.O_CREAT | os.O_WRONLY, 0o644))
        except OSError as exc:
            stop = errno.errorcode.get(exc.errno, str(exc.errno))
            break
        made += 1
        if time.monotonic() > deadline:
            stop = "time"
            break
    print("FLOOD", place, made, stop)
"""

_COUNT = r"""
import os, sys
marker = sys.argv[1]
for place in sys.argv[2:]:
    st = os.statvfs(place)
    left = sum(1 for name in os.listdir(place) if name.startswith(marker))
    print("LEFT", place, left, st.f_files)
"""


def _script(name: str, text: str, *args: str) -> str:
    path = f"/workspace/home/{name}"
    return (
        f"cat > {path} <<'ARENA_CHECK_EOF'\n{text}\nARENA_CHECK_EOF\n"
        f"python3 {path} {' '.join(shlex.quote(a) for a in args)}"
    )


def hopper_check(session: Session, case: Case, seed: int, rec: Recorder) -> None:
    marker = f"hop-{cmd.token()}"
    try:
        session.reset(case.id, seed=seed)
        started = session.shell(_script("hop.py", HOPPER_SCRIPT, marker) + f"; sleep 0.5; ls {marker} && echo seen")
        seen = "seen" in started.output
        session.reset(case.id, seed=seed + 1)
        time.sleep(1.0)
        after = session.shell(
            # The hopper's PID changes faster than /proc can be listed: looked for 20 times.
            f"ls -A . /tmp /dev/shm; for i in $(seq 20); do n=$({cmd.count_processes(marker)}); "
            '[ "$n" -gt 0 ] && break; done; echo processes=$n; '
            "for i in $(seq 50); do sleep 0.01 & done; wait && echo forks-ok"
        )
        procs = re.search(r"processes=(\d+)", after.output)
        left = marker in after.output
        forks = "forks-ok" in after.output
        running = procs is None or procs.group(1) != "0"
        rec.add(
            "isolation-hopper",
            seen and not left and not running and forks,
            observed={
                "hopper_ran": seen,
                "marker_after_reset": left,
                "hopper_running_after": running,
                "next_episode_forks": forks,
                "after": after.output[-300:],
            },
            expected={
                "hopper_ran": True,
                "marker_after_reset": False,
                "hopper_running_after": False,
                "next_episode_forks": True,
            },
        )
    except ServerError as exc:
        rec.error("isolation-hopper", exc)


NETWORK_PROBE = r"""
import socket, sys
ports = sorted({int(p) for p in sys.argv[1:]} | {
    int(line.split()[1].split(":")[1], 16)
    for table in ("/proc/1/net/tcp", "/proc/1/net/tcp6") for line in open(table).readlines()[1:]
    if line.split()[3] == "0A"})  # and what its PID 1's tables list (the container's, where /proc is)
for port in ports:
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        try:
            s = socket.socket(family)
        except OSError as exc:
            print("NOSOCKET", family, exc.errno)
            continue
        s.settimeout(3)
        try:
            s.connect((host, port))
            print("CONNECTED", host, port)
        except OSError as exc:
            print("REFUSED", host, port, exc.errno)
try:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.sendto(b"x", ("127.0.0.1", ports[0]))
    print("UDP-SENT")
except OSError as exc:
    print("NOUDP", exc.errno)
lines = open("/proc/self/net/dev").read().splitlines()[2:]
print("INTERFACES", ",".join(sorted(l.split(":")[0].strip() for l in lines)))
"""


def _listening(target: Target) -> set[int]:
    """The TCP ports the server's network namespace listens on, read from outside (the agent
    may see only its own /proc): /proc/<server's host PID>/net/tcp and tcp6."""
    if not target.host_root:
        return set()
    found = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (Path(target.host_root).parent / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        found |= {int(line.split()[1].rsplit(":", 1)[1], 16) for line in lines if line.split()[3] == "0A"}
    return found


def network_check(session: Session, target: Target, case: Case, seed: int, rec: Recorder, mode: str) -> None:
    """No TCP port of the server's or the container's is reached. With namespaces the agent
    sees only its own loopback; without (unprivileged), it can make no socket at all."""
    ports = sorted({IMAGE_PORT, urlparse(target.url).port or IMAGE_PORT, *_listening(target)})
    try:
        session.reset(case.id, seed=seed)
        out = session.shell(_script("net.py", NETWORK_PROBE, *map(str, ports)))
        interfaces = re.search(r"INTERFACES (\S*)", out.output)
        reached = "CONNECTED" in out.output
        tried = "REFUSED" in out.output or "NOSOCKET" in out.output
        if mode == UNPRIVILEGED_MODE:
            contained = "NOSOCKET" in out.output and "REFUSED" not in out.output and "UDP-SENT" not in out.output
            expected: dict[str, Any] = {"server_port_reached": False, "sockets": "refused, TCP and UDP"}
        else:
            contained = interfaces is not None and interfaces.group(1) == "lo" and "REFUSED" in out.output
            expected = {"server_port_reached": False, "interfaces": "lo"}
        rec.add(
            "isolation-network",
            tried and contained and not reached,
            observed={
                "mode": mode,
                "server_port_reached": reached,
                "interfaces": interfaces and interfaces.group(1),
                "output": out.output[-300:],
            },
            expected=expected,
        )
    except ServerError as exc:
        rec.error("isolation-network", exc)


def keyring_check(session: Session, case: Case, seed: int, rec: Recorder) -> None:
    marker = f"MSG-FROM-EPISODE-{cmd.token()}"
    try:
        session.reset(case.id, seed=seed)
        planted = session.shell(_script("keys.py", _KEYRING, "plant", marker))
        session.reset(case.id, seed=seed + 1)
        read = session.shell(_script("keys.py", _KEYRING, "read", marker))
        tried = planted.output.count("planted") + planted.output.count("refused")
        leaked = marker in read.output
        rec.add(
            "isolation-keyring",
            tried == 2 and not leaked,
            observed={"planting": re.findall(r"planted|refused-\d+", planted.output), "seen_by_next_episode": leaked},
            expected={"planting": "planted or refused, twice", "seen_by_next_episode": False},
        )
    except ServerError as exc:
        rec.error("isolation-keyring", exc)


def scratch_check(session: Session, case: Case, seed: int, rec: Recorder, mode: str) -> None:
    """An inode flood of the scratch directories is gone after a quick reset. With namespaces
    each is a tmpfs with an inode limit; without, they are the episode's own directory
    (renamed away at reset) or locked."""
    marker = f"flood-{cmd.token()}"
    try:
        session.reset(case.id, seed=seed)
        flood = session.shell(_script("flood.py", FLOOD_SCRIPT, marker, str(SCRATCH_FILES_EACH), *SCRATCH))
        made = {m.group(1): int(m.group(2)) for m in re.finditer(r"FLOOD (\S+) (\d+) \S+", flood.output)}
        started = time.monotonic()
        session.reset(case.id, seed=seed + 1)
        reset_s = time.monotonic() - started
        after = session.shell(_script("count.py", _COUNT, marker, *SCRATCH))
        found = {
            m.group(1): (int(m.group(2)), int(m.group(3))) for m in re.finditer(r"LEFT (\S+) (\d+) (\d+)", after.output)
        }
        left = sum(count for count, _ in found.values())
        unlimited = (
            sorted(p for p, (_, inodes) in found.items() if not 0 < inodes < INODE_LIMIT_MAX)
            if mode == NAMESPACES_MODE
            else []
        )
        ok = (
            sum(made.values()) > 0
            and len(found) == len(SCRATCH)
            and left == 0
            and not unlimited
            and reset_s <= RESET_AFTER_FLOOD_S
        )
        rec.add(
            "isolation-scratch",
            ok,
            observed={
                "mode": mode,
                "files_made": made,
                "reset_seconds": round(reset_s, 2),
                "files_left": left,
                "without_inode_limit": unlimited,
                "after": after.output[-300:] if not ok else "",
            },
            expected={
                "files_left": 0,
                "reset_seconds": f"<= {RESET_AFTER_FLOOD_S:g}",
                "without_inode_limit": [],
                "inode_limit": f"< {INODE_LIMIT_MAX}" if mode == NAMESPACES_MODE else "any",
            },
        )
    except ServerError as exc:
        rec.error("isolation-scratch", exc)


LEFTOVERS_PLANT = r"""
import ctypes, os, subprocess, sys
marker = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
for place in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock"):
    try:
        with open(os.path.join(place, marker), "w") as out:
            out.write(marker)
        print("FILE", place)
    except OSError as exc:
        print("NOFILE", place, exc.errno)
segment = libc.shmget(0x4152454E, 4096, 0o1666)  # IPC_CREAT | 0666
print("SHM", segment if segment >= 0 else -ctypes.get_errno())
rt = ctypes.CDLL("librt.so.1", use_errno=True)
rt.mq_open.restype = ctypes.c_int
queue = rt.mq_open(("/" + marker).encode(), os.O_CREAT | os.O_RDWR, 0o600, None)
print("MQ", queue if queue >= 0 else -ctypes.get_errno())
subprocess.Popen(["setsid", "nohup", "sleep", "3600", marker], stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL, start_new_session=True)
print("DAEMON")
"""

LEFTOVERS_FIND = r"""
import ctypes, os, sys
marker = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
for place in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/dev/mqueue"):
    try:
        if any(marker in name for name in os.listdir(place)):
            print("LEFT-FILE", place)
    except OSError:
        pass
if libc.shmget(0x4152454E, 0, 0) >= 0:
    print("LEFT-SHM")
try:
    if "0x4152454e" in open("/proc/sysvipc/shm").read():
        print("LEFT-SHM-LISTED")
except OSError:
    pass
for pid in os.listdir("/proc"):
    try:
        if pid.isdigit() and b"3600\0" + marker.encode() in open(f"/proc/{pid}/cmdline", "rb").read():
            print("LEFT-PROCESS", pid)
    except OSError:
        pass
print("LOOKED")
"""


def leftovers_check(session: Session, case: Case, seed: int, rec: Recorder) -> None:
    """Files in the scratch directories, System V shared memory, a POSIX message queue and a
    `setsid nohup` daemon, each made (or refused) in one episode, are not in the next."""
    marker = f"left-{cmd.token()}"
    try:
        session.reset(case.id, seed=seed)
        planted = session.shell(_script("plant.py", LEFTOVERS_PLANT, marker) + "; sleep 0.3")
        session.reset(case.id, seed=seed + 1)
        found = session.shell(_script("find.py", LEFTOVERS_FIND, marker))
        left = re.findall(r"LEFT-\S+(?: \S+)?", found.output)
        made = re.findall(r"^(FILE \S+|SHM \d+|MQ \d+|DAEMON)$", planted.output, re.MULTILINE)
        rec.add(
            "isolation-leftovers",
            "DAEMON" in planted.output and "LOOKED" in found.output and not left,
            observed={"made": made, "left_after_reset": left, "output": found.output[-300:]},
            expected={"made": "at least the daemon", "left_after_reset": []},
        )
    except ServerError as exc:
        rec.error("isolation-leftovers", exc)


NESTED_PROBE = r"""
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
flags = {"user": 0x10000000, "mount": 0x00020000, "net": 0x40000000, "pid": 0x20000000,
         "ipc": 0x08000000, "uts": 0x04000000, "cgroup": 0x02000000}
for name, flag in flags.items():
    made = libc.unshare(flag) == 0
    print("UNSHARE", name, "made" if made else "refused-%d" % ctypes.get_errno())
# clone(2) with CLONE_NEWUSER: the child exits at once if it was made.
child = libc.syscall(56, flags["user"] | signal.SIGCHLD, None, None, None, 0)
if child == 0:
    os._exit(0)
print("CLONE user", "made" if child > 0 else "refused-%d" % ctypes.get_errno())
if child > 0:
    os.waitpid(child, 0)
print("CLONE3", "refused-%d" % ctypes.get_errno() if libc.syscall(435, None, 0) < 0 else "made")
status = dict(line.split(":	", 1) for line in open("/proc/self/status").read().splitlines() if ":	" in line)
print("CAPS", status["CapEff"].strip(), status["CapBnd"].strip())
"""


def nested_check(session: Session, case: Case, seed: int, rec: Recorder) -> None:
    """No namespace of the agent's own (unshare, clone, clone3), and no capability."""
    try:
        session.reset(case.id, seed=seed)
        out = session.shell(_script("nested.py", NESTED_PROBE))
        made = re.findall(r"^(?:UNSHARE|CLONE) (\S+) made$", out.output, re.MULTILINE)
        tried = len(re.findall(r"^(?:UNSHARE|CLONE) \S+ ", out.output, re.MULTILINE))
        clone3 = re.search(r"^CLONE3 (\S+)$", out.output, re.MULTILINE)
        caps = re.search(r"^CAPS (\S+) (\S+)$", out.output, re.MULTILINE)
        no_caps = caps is not None and int(caps.group(1), 16) == 0 and int(caps.group(2), 16) == 0
        # clone3 with no arguments fails with EINVAL where it is allowed; refused, ENOSYS.
        clone3_refused = clone3 is not None and clone3.group(1) == "refused-38"
        rec.add(
            "isolation-nested",
            tried == 8 and not made and clone3_refused and no_caps,
            observed={
                "namespaces_made": made,
                "tried": tried,
                "clone3": clone3 and clone3.group(1),
                "capabilities": caps and caps.groups(),
                "output": out.output[-300:],
            },
            expected={
                "namespaces_made": [],
                "tried": 8,
                "clone3": "refused-38 (ENOSYS)",
                "capabilities": ["0000000000000000", "0000000000000000"],
            },
        )
    except ServerError as exc:
        rec.error("isolation-nested", exc)


# Where the agent may write: the episode's own places (docs/isolation.md).
WRITABLE_WITH_NAMESPACES = ("/workspace/", "/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/dev/mqueue")
WRITABLE_UNPRIVILEGED = ("/workspace/repo", "/workspace/home", "/workspace/tmp")
WRITABLE_PROBE = (
    "find / \\( -path /proc -o -path /sys -o -path /dev/pts \\) -prune -o "
    "\\( -type d -o -type f \\) -writable -print 2>/dev/null "
    "| grep -v '^/dev/\\(null\\|zero\\|full\\|random\\|urandom\\|tty\\)$' | head -200; echo FOUND-END"
)


def writable_check(session: Session, case: Case, seed: int, rec: Recorder, mode: str) -> None:
    """Every directory and file the agent can write is one of the episode's own places."""
    allowed = WRITABLE_UNPRIVILEGED if mode == UNPRIVILEGED_MODE else WRITABLE_WITH_NAMESPACES
    try:
        session.reset(case.id, seed=seed)
        out = session.shell(WRITABLE_PROBE)
        found = [line for line in out.output.splitlines() if line.startswith("/")]
        outside = [
            path
            for path in found
            if not any(
                path == place or path.startswith(place.rstrip("/") + "/") or path == place.rstrip("/")
                for place in allowed
            )
        ]
        rec.add(
            "isolation-writable",
            "FOUND-END" in out.output and not outside,
            observed={"mode": mode, "writable_elsewhere": outside[:20]},
            expected={"writable_elsewhere": [], "allowed": list(allowed)},
        )
    except ServerError as exc:
        rec.error("isolation-writable", exc)


# isolation-pid-counter: what each episode forks before the next one starts (a message
# an agent would encode in the counter), and the first command of every episode.
PID_MESSAGES = (0, 300, 7)
PID_PROBE = "readlink /proc/self"


def pid_counter_check(session: Session, target: Target, case: Case, seed: int, rec: Recorder, mode: str) -> None:
    """No episode's first PID depends on what the last one forked (module doc)."""
    try:
        firsts = []
        for forks in PID_MESSAGES:
            session.reset(case.id, seed=seed)
            firsts.append(session.shell(PID_PROBE).output.strip())
            session.shell(f"for i in $(seq {forks}); do /bin/true; done")
        proc, _ = _metadata(target, "proc")  # the /proc of the episode handed out last
        independent = len(set(firsts)) == 1 and firsts[0].isdigit()
        if mode == NAMESPACES_MODE:
            ok, want = proc == "episode" and independent, {"proc": "episode", "first_pids": "all equal"}
        else:  # the container's /proc: the channel docs/isolation.md measures, as reported
            ok, want = (
                proc == "container" and not independent,
                {"proc": "container", "first_pids": "the container's counter"},
            )
        rec.add(
            "isolation-pid-counter",
            ok,
            observed={"mode": mode, "proc": proc, "forked": list(PID_MESSAGES), "first_pids": firsts},
            expected=want,
        )
    except ServerError as exc:
        rec.error("isolation-pid-counter", exc)


# isolation-oom-order: from the probe's own process up through its parents, the first
# that is not the agent's is the sandbox's PID 1 (its parent is never the agent's).
OOM_PROBE = r"""
def field(pid, name):
    for line in open("/proc/%s/status" % pid):
        if line.startswith(name + ":"):
            return line.split()[1]
own = open("/proc/self/oom_score_adj").read().strip()
pid = "self"
while field(pid, "Uid") == "2000":
    pid = open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()[1]
print("OOM", own, open("/proc/%s/oom_score_adj" % pid).read().strip(), field(pid, "Uid"))
"""
OOM_MAX = 1000


def oom_order_check(session: Session, case: Case, seed: int, rec: Recorder) -> None:
    """The agent's commands first in the OOM killer's order, the sandbox's PID 1 after them."""
    try:
        session.reset(case.id, seed=seed)
        out = session.shell(_script("oom.py", OOM_PROBE))
        found = re.search(r"^OOM (-?\d+) (-?\d+) (\d+)$", out.output, re.MULTILINE)
        command, init = (int(found.group(1)), int(found.group(2))) if found else (None, None)
        rec.add(
            "isolation-oom-order",
            command == OOM_MAX and init is not None and init < command,
            observed={"command": command, "sandbox_pid_1": init, "output": out.output[-300:]},
            expected={"command": OOM_MAX, "sandbox_pid_1": f"below {OOM_MAX}"},
        )
    except ServerError as exc:
        rec.error("isolation-oom-order", exc)


def _metadata(target: Target, key: str) -> tuple[Any, int]:
    """`key` of the server's /metadata (None if it is not there), and the HTTP status."""
    status, body = http_get(target.url, "/metadata")
    return (body.get(key) if status == 200 and isinstance(body, dict) else None), status


def isolation_mode(target: Target) -> str:
    """The mode the server reports at /metadata (`isolation`), or what it said instead."""
    mode, status = _metadata(target, "isolation")
    return mode if isinstance(mode, str) else f"unreported (HTTP {status})"


def _raise_descriptor_limit(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        top = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (top, hard))


def connection_flood_check(session: Session, target: Target, case: Case, seed: int, rec: Recorder) -> None:
    url = urlparse(target.url)
    _raise_descriptor_limit(FLOOD_CONNECTIONS + 256)
    held: list[socket.socket] = []
    healthy_after: float | None = None
    try:
        for _ in range(FLOOD_CONNECTIONS):
            sock = socket.socket()
            sock.settimeout(2)
            try:
                sock.connect((url.hostname or "127.0.0.1", url.port or 80))
            except OSError:
                sock.close()
                continue
            held.append(sock)
        started = time.monotonic()
        while time.monotonic() - started < FLOOD_HEALTHY_WITHIN_S:
            if http_get(target.url, "/health", timeout=3)[0] == 200:
                healthy_after = time.monotonic() - started
                break
            time.sleep(0.5)
    finally:
        for sock in held:
            sock.close()
    try:
        works = session.reset(case.id, seed=seed).task_id == case.id
    except ServerError:
        works = False
    rec.add(
        "connection-flood",
        healthy_after is not None and works,
        observed={
            "idle_connections_held": len(held),
            "health_answered_after_s": None if healthy_after is None else round(healthy_after, 1),
            "session_after": works,
        },
        expected={"health_answered_after_s": f"<= {FLOOD_HEALTHY_WITHIN_S:g}", "session_after": True},
    )


def _open(host: str, port: int, count: int) -> list[socket.socket]:
    """``count`` connections, one at a time, pausing after every SLOW_BATCH: a server that
    has not yet accepted a connection it has made (its listen backlog full) is not seen
    closing it."""
    opened = []
    for i in range(count):
        if i and i % SLOW_BATCH == 0:
            time.sleep(0.02)
        sock = socket.socket()
        sock.settimeout(2)
        try:
            sock.connect((host, port))
        except OSError:
            sock.close()
            continue
        sock.setblocking(False)
        opened.append(sock)
    return opened


def _closed_by_server(open_socks: dict[int, socket.socket]) -> None:
    """Drop from ``open_socks`` each socket the server has closed (readable: its end or a reset;
    the server never answers a request whose headers are incomplete)."""
    poller = select.poll()
    for fd in open_socks:
        poller.register(fd, select.POLLIN)
    for fd, _ in poller.poll(0):
        open_socks.pop(fd).close()


def _timed_health(url: str) -> tuple[int, float]:
    started = time.monotonic()
    status = http_get(url, "/health", timeout=SLOW_HEALTH_WITHIN_S + 1)[0]
    return status, round(time.monotonic() - started, 2)


def slow_headers_check(session: Session, target: Target, case: Case, seed: int, rec: Recorder) -> None:
    url = urlparse(target.url)
    _raise_descriptor_limit(SLOW_CONNECTIONS + 256)
    opened = _open(url.hostname or "127.0.0.1", url.port or 80, SLOW_CONNECTIONS)
    open_socks = {sock.fileno(): sock for sock in opened}
    most_open, probes = 0, []
    try:
        started = time.monotonic()
        for second in range(SLOW_ROUNDS):
            for fd, sock in list(open_socks.items()):
                try:
                    sock.send(SLOW_REQUEST[second : second + 1])
                except OSError:
                    open_socks.pop(fd).close()
            probes.append(_timed_health(target.url))
            time.sleep(max(0.0, started + second + 0.5 - time.monotonic()))
            _closed_by_server(open_socks)
            most_open = max(most_open, len(open_socks))
            probes.append(_timed_health(target.url))
            time.sleep(max(0.0, started + second + 1 - time.monotonic()))
        _closed_by_server(open_socks)
    finally:
        for sock in open_socks.values():
            sock.close()
    try:
        works = session.reset(case.id, seed=seed).task_id == case.id
    except ServerError:
        works = False
    slow = [p for p in probes if p[0] != 200 or p[1] > SLOW_HEALTH_WITHIN_S]
    # More than the per-peer limit must have connected, or the limit was not tried.
    rec.add(
        "slow-headers",
        len(opened) > PEER_CONNECTIONS and most_open <= PEER_CONNECTIONS and not open_socks and not slow and works,
        observed={
            "trickling_connections": len(opened),
            "most_open_at_once": most_open,
            f"open_after_{SLOW_ROUNDS}_s": len(open_socks),
            "health_probes": len(probes),
            "health_slow_or_failed": slow[:10],
            "session_after": works,
        },
        expected={
            "trickling_connections": f"> {PEER_CONNECTIONS}",
            "most_open_at_once": f"<= {PEER_CONNECTIONS} (the per-peer limit)",
            f"open_after_{SLOW_ROUNDS}_s": f"0 (headers within {HEADERS_WITHIN_S} s)",
            "health_slow_or_failed": f"none (200 within {SLOW_HEALTH_WITHIN_S:g} s)",
            "session_after": True,
        },
    )


def _malformed_messages() -> list[tuple[str, str | bytes, str | None]]:
    """(name, the raw message, a word its error reply must hold; None: it must succeed)."""
    return [
        ("lone-surrogate", '{"type": "step", "data": {"operation": "shell", "command": "echo \\ud800"}}', "surrogate"),
        ("deep-nesting", "[" * 100_000, "nest"),
        ("long-episode-id", json.dumps({"type": "reset", "data": {"episode_id": "x" * 100_000}}), "episode_id"),
        ("not-json", "{not json", "JSON"),
        ("binary-frame", b"\x00\xff\xfe", "binary"),
        ("not-an-object", "[]", "JSON object"),
        (
            "longest-command",
            json.dumps({"type": "step", "data": {"operation": "shell", "command": ": " + "\U0001f600" * 15_980}}),
            None,
        ),
    ]


CAPACITY_CODE = "CAPACITY_REACHED"
# A closed session is released by the server shortly after the socket closes.
SESSION_RELEASED_WITHIN_S = 10.0


@contextmanager
def _raw_session(ws_url: str, reset: str) -> Iterator[Any]:
    """A raw WebSocket on which ``reset`` was answered (retried while the server still holds
    the session just closed)."""
    deadline = time.monotonic() + SESSION_RELEASED_WITHIN_S
    while True:
        with connect(ws_url, max_size=None, open_timeout=10) as ws:
            ws.send(reset)
            reply = json.loads(ws.recv(timeout=60))
            if reply.get("data", {}).get("code") != CAPACITY_CODE or time.monotonic() > deadline:
                yield ws
                return
        time.sleep(0.2)


def _reopen(session: Session, case: Case, seed: int) -> None:
    deadline = time.monotonic() + SESSION_RELEASED_WITHIN_S
    while True:
        session.open()
        try:
            session.reset(case.id, seed=seed)
            return
        except ServerError as exc:
            session.close()
            if exc.code != CAPACITY_CODE or time.monotonic() > deadline:
                session.open()
                return
            time.sleep(0.2)


def malformed_input_check(session: Session, target: Target, case: Case, seed: int, rec: Recorder) -> None:
    ws_url = target.url.replace("http", "ws", 1).rstrip("/") + "/ws"
    replies: dict[str, Any] = {}
    went_on = graded = False
    session.close()  # one session at a time: this check needs its own raw connection
    try:
        with _raw_session(ws_url, json.dumps({"type": "reset", "data": {"task_id": case.id, "seed": seed}})) as ws:

            def call(payload: str | bytes) -> dict[str, Any]:
                ws.send(payload)
                return json.loads(ws.recv(timeout=60))

            for name, payload, word in _malformed_messages():
                reply = call(payload)
                message = str(reply.get("data", {}).get("message", ""))
                if word is None:  # valid, at the limit: it runs and answers
                    replies[name] = (
                        reply.get("type") == "observation"
                        and reply.get("data", {}).get("observation", {}).get("exit_code") == 0
                    ) or (reply.get("type"), message[:200])
                else:
                    replies[name] = (
                        reply.get("type") == "error" and word.lower() in message.lower() and len(message) < 2_000
                    ) or message[:200]
            step = call(json.dumps({"type": "step", "data": {"operation": "shell", "command": "echo went-on"}}))
            went_on = "went-on" in json.dumps(step)
            finished = call(json.dumps({"type": "step", "data": {"operation": "finish"}}))
            graded = bool(finished.get("data", {}).get("done"))
    except (OSError, WebSocketException, ValueError, TimeoutError) as exc:
        replies["connection"] = f"{type(exc).__name__}: {exc}"
    finally:
        _reopen(session, case, seed + 1)
    every_reply = all(value is True for value in replies.values()) and len(replies) == len(_malformed_messages())
    ok = every_reply and went_on and graded
    rec.add(
        "malformed-input",
        ok,
        observed={"error_replies": replies, "episode_went_on": went_on, "graded": graded},
        expected={"error_replies": "each an error naming the problem", "episode_went_on": True, "graded": True},
    )


def isolation_checks(session: Session, target: Target, case: Case, seeds: Any, rec: Recorder) -> None:
    """Every check of this module, one fresh seed each."""
    mode = isolation_mode(target)
    hopper_check(session, case, next(seeds), rec)
    network_check(session, target, case, next(seeds), rec, mode)
    keyring_check(session, case, next(seeds), rec)
    scratch_check(session, case, next(seeds), rec, mode)
    leftovers_check(session, case, next(seeds), rec)
    nested_check(session, case, next(seeds), rec)
    writable_check(session, case, next(seeds), rec, mode)
    pid_counter_check(session, target, case, next(seeds), rec, mode)
    oom_order_check(session, case, next(seeds), rec)
    connection_flood_check(session, target, case, next(seeds), rec)
    malformed_input_check(session, target, case, next(seeds), rec)
    slow_headers_check(session, target, case, next(seeds), rec)
