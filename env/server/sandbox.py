"""Each episode in namespaces of its own: what an agent's commands can reach, and how it ends.

An episode's commands run in a `Sandbox`: new user, PID, network, mount and IPC
namespaces whose PID 1 is env/server/nsinit.py. Ending the episode kills that PID 1; the
kernel then kills every process of the PID namespace, however fast they fork, and the
namespaces go with the last of them. So by construction nothing of an episode outlives
its reset:

- processes: all in the episode's PID namespace (a process cannot leave it);
- files: the only writable places are tmpfs filesystems of the episode's mount namespace
  (the workspace and the scratch directories, each with a size and an inode limit);
  every other mount is read-only there;
- the network: a network namespace with only a loopback interface, on which nothing of
  the server listens;
- kernel keyrings: a seccomp filter refuses add_key, request_key and keyctl (a key's
  description stays visible to the same UID in /proc/keys until the kernel collects it,
  whatever the namespace), and PID 1 joins a new session keyring;
- System V IPC and POSIX message queues: the IPC namespace (and a new mqueue mount).

The next episode's sandbox is made ahead of time (`SandboxFactory`), forked by a zygote
(`Zygote`: nsinit.py started once), so a reset only kills the old one, writes the case's
files and takes the new one.
"""

from __future__ import annotations

import functools
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from env.server import nsinit

NSINIT = Path(__file__).with_name("nsinit.py")
# Every namespace the episode gets (nsinit.py's names).
NAMESPACES = ("user", "pid", "net", "mount", "ipc")

# The scratch directories an agent may write besides the workspace: each a tmpfs of the
# episode with its own size and inode limit (path, bytes, inodes, mode). A directory the
# system does not have is not made (the rest of the filesystem is read-only).
MIB = 1 << 20
SCRATCH = (
    ("/tmp", 1024 * MIB, 65_536, 0o1777),
    ("/var/tmp", 256 * MIB, 16_384, 0o1777),
    ("/dev/shm", 256 * MIB, 16_384, 0o1777),
    ("/run/lock", 1 * MIB, 256, 0o1777),
)
# The workspace's inode limit; its size is that of the filesystem the runtime gives the
# workspace directory (the budget's writable workspace), read once per server.
WORKSPACE_INODES = 262_144

# How long the server waits for a sandbox's PID 1 to answer, and for an ended one to go.
HANDSHAKE_S = 10.0
TEARDOWN_S = 10.0
# One control message: a command is at most 16,000 characters (models.MAX_COMMAND_CHARS),
# sent as UTF-8 (at most 64,000 bytes) beside a small environment. nsinit.py reads as much.
PACKET = 131_072


class SandboxError(RuntimeError):
    """An episode's namespaces could not be made, used or ended (an infrastructure fault)."""


class NamespacesRefused(SandboxError):
    """The runtime refuses the namespaces an episode needs (user namespaces, under Docker's
    default seccomp profile): the server then takes the unprivileged mode."""


# The two ways to contain an episode (docs/isolation.md): namespaces of its own, where the
# runtime allows them; else the container's, with the agent's system calls filtered, its
# processes killed by UID and its files renamed away at reset.
NAMESPACES_MODE = "namespaces"
UNPRIVILEGED_MODE = "unprivileged"
ISOLATION_MODES = (NAMESPACES_MODE, UNPRIVILEGED_MODE)


@dataclass(frozen=True)
class SandboxSpec:
    """What every sandbox of a server gets: identity, limits, workspace and scratch mounts."""

    uid: int
    gid: int
    workspace: Path
    workspace_bytes: int
    limits: tuple[tuple[str, int], ...]
    oom_score_adj: int
    # PID 1's: below every command's, above the server's (0), so that the OOM killer ends
    # the agent's commands first and the episode stays gradable.
    init_oom_score_adj: int = 500
    workspace_inodes: int = WORKSPACE_INODES
    scratch: tuple[tuple[str, int, int, int], ...] = SCRATCH
    namespaces: tuple[str, ...] = NAMESPACES
    read_only: bool = True
    session_keyring: bool = True
    deny_keyrings: bool = True
    deny_namespaces: bool = True
    deny_sysv: bool = True
    deny_sockets: bool = False
    deny_mqueue: bool = False
    drop_bounding_set: bool = True
    # A /proc of the episode's PID namespace over the container's, where the kernel allows it.
    own_proc: bool = True
    # The unprivileged mode's defences (no namespaces to end the episode with): kill the
    # episode's processes by their UID, and rename its directories away, at reset.
    kill_by_uid: bool = False
    lock_scratch: bool = False

    @property
    def mode(self) -> str:
        """The isolation mode: with namespaces of its own, or unprivileged."""
        return NAMESPACES_MODE if self.namespaces else UNPRIVILEGED_MODE

    def setup(self) -> dict:
        """The setup message nsinit.py reads."""
        return {
            "uid": self.uid,
            "gid": self.gid,
            "namespaces": bool(self.namespaces),
            "workspace": {"path": str(self.workspace), "size": self.workspace_bytes, "inodes": self.workspace_inodes},
            "scratch": [list(entry) for entry in self.scratch],
            "limits": [list(limit) for limit in self.limits],
            "oom_score_adj": self.oom_score_adj,
            "init_oom_score_adj": self.init_oom_score_adj,
            "read_only": self.read_only,
            "mqueue": "ipc" in self.namespaces,
            "network": "net" in self.namespaces,
            "session_keyring": self.session_keyring,
            "deny_keyrings": self.deny_keyrings,
            "deny_namespaces": self.deny_namespaces,
            "deny_sysv": self.deny_sysv,
            "deny_sockets": self.deny_sockets,
            "deny_mqueue": self.deny_mqueue,
            "drop_bounding_set": self.drop_bounding_set,
            "own_proc": self.own_proc and "pid" in self.namespaces and "mount" in self.namespaces,
        }


def unprivileged(spec: SandboxSpec) -> SandboxSpec:
    """``spec`` without namespaces: the container's, every unprivileged defence on."""
    return replace(
        spec,
        namespaces=(),
        read_only=False,
        session_keyring=False,
        deny_sockets=True,
        deny_mqueue=True,
        kill_by_uid=True,
        lock_scratch=True,
    )


# Of the container's memory limit, the most the episode's tmpfs filesystems may hold
# together: the rest is for the agent's processes and the server, so no file can make the
# OOM killer reach past the agent's commands.
TMPFS_SHARE = 0.75
MIN_TMPFS = 1 * MIB
MEMORY_LIMIT_FILES = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


@functools.cache
def memory_limit() -> int:
    """The container's memory limit in bytes (its cgroup's, v2 or v1), or the machine's
    memory where the cgroup sets none (read once)."""
    with open("/proc/meminfo") as meminfo:
        total = next(int(line.split()[1]) * 1024 for line in meminfo if line.startswith("MemTotal:"))
    for name in MEMORY_LIMIT_FILES:
        try:
            text = Path(name).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            return min(int(text), total)
    return total


# Past this share of the limit in use at a reset, the reset waits for the ended episodes'
# teardown to give their memory back.
MEMORY_WAIT_SHARE = 0.5
# The cgroup's memory.stat (v2, then v1) and the keys that count what processes and tmpfs
# files hold: the page cache, which the kernel reclaims when it must, does not count.
MEMORY_STAT_FILES = (
    ("/sys/fs/cgroup/memory.stat", ("anon", "shmem")),
    ("/sys/fs/cgroup/memory/memory.stat", ("total_rss", "total_shmem")),
)


def memory_in_use() -> int:
    """Bytes the container's processes and tmpfs files hold now (0 where it cannot be read)."""
    for name, keys in MEMORY_STAT_FILES:
        try:
            with open(name) as stat:
                fields = dict(line.split() for line in stat if line.count(" ") == 1)
        except OSError:
            continue
        return sum(int(fields.get(key, 0)) for key in keys)
    return 0


def fit_to_memory(spec: SandboxSpec, limit: int) -> SandboxSpec:
    """``spec`` with its tmpfs sizes cut until together they hold at most TMPFS_SHARE of
    ``limit``: the scratch mounts first, in proportion (the workspace's size is the
    platform's budget, which the check suite holds it to), then the workspace too. A
    workspace larger than the memory limit is a disk's (a runtime that gave /workspace no
    size of its own): it gets what the scratch mounts leave."""
    budget = int(limit * TMPFS_SHARE)
    scratch_total = sum(size for _, size, _, _ in spec.scratch)
    if spec.workspace_bytes > limit:  # a disk's size, not a budget: the workspace takes what is left
        spec = replace(spec, workspace_bytes=max(budget - scratch_total, budget // 2))
    if spec.workspace_bytes + scratch_total <= budget:
        return spec
    if spec.workspace_bytes <= budget // 2:
        keep, room, total = 1.0, budget - spec.workspace_bytes, scratch_total
    else:  # everything in proportion
        keep = budget / (spec.workspace_bytes + scratch_total)
        room, total = int(scratch_total * keep), scratch_total

    def scaled(size: int) -> int:
        return max(MIN_TMPFS, min(size, size * room // max(total, 1)) // 4096 * 4096)

    scratch = tuple((path, scaled(size), inodes, mode) for path, size, inodes, mode in spec.scratch)
    return replace(spec, workspace_bytes=int(spec.workspace_bytes * keep) // 4096 * 4096, scratch=scratch)


def workspace_size(path: Path) -> int:
    """The size of the filesystem holding ``path`` (what the runtime gives the workspace)."""
    info = os.statvfs(path)
    return info.f_blocks * info.f_frsize


@dataclass
class Command:
    """One command running in a sandbox, as much of `subprocess.Popen` as the shell needs."""

    sandbox: Sandbox
    pid: int
    returncode: int | None = None

    def poll(self) -> int | None:
        """The exit code if the command has ended (without waiting)."""
        if self.returncode is None:
            self._receive(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the end; subprocess.TimeoutExpired past ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"command {self.pid}", timeout or 0.0)
            self._receive(left if left is not None else 1.0)
        return self.returncode

    def kill_group(self) -> None:
        """SIGKILL the command's process group (its own session)."""
        self.sandbox.send({"op": "kill", "pgid": self.pid})

    def _receive(self, timeout: float) -> None:
        message = self.sandbox.receive(timeout)
        if message is not None and message.get("exit") == self.pid:
            self.returncode = int(message["code"])


def reap_strays(keep: set[int]) -> int:
    """Reap every exited child of this process but ``keep``: the orphans of an episode
    killed without namespaces, which come here once its PID 1 (their subreaper) is gone (in
    a container the server may be PID 1, which every orphan reaches). A zombie never reaped
    holds a PID for good, and one of the sandbox UID would keep a kill by UID from ever
    finding none left. Returns how many it reaped."""
    reaped = 0
    for task in os.scandir(f"/proc/{os.getpid()}/task"):
        try:
            with open(os.path.join(task.path, "children")) as listed:
                children = [int(pid) for pid in listed.read().split()]
        except OSError:
            continue
        for child in children:
            if child in keep:
                continue
            try:
                with open(f"/proc/{child}/stat") as stat:
                    state = stat.read().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state == "Z":
                try:
                    if os.waitpid(child, os.WNOHANG)[0]:
                        reaped += 1
                except ChildProcessError:
                    pass
    return reaped


class Zygote:
    """nsinit.py started once: it forks each sandbox's first process, so a sandbox costs a
    fork (about a millisecond) rather than an interpreter's start (tens of milliseconds).

    It holds nothing of any episode: it forks before the namespaces are made, and its
    forks close its socket first. It ends when the server closes that socket."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._control: socket.socket | None = None

    def spawn(self, sandbox_end: socket.socket, namespaces: tuple[str, ...]) -> tuple[int, int]:
        """Fork a sandbox's first process holding ``sandbox_end``: (its PID, a pidfd of it).
        A zygote that has died (the OOM killer, say) is started again, once."""
        request = json.dumps({"op": "spawn", "namespaces": ",".join(namespaces)}).encode()
        with self._lock:
            try:
                return self._ask(request, sandbox_end)
            except OSError as exc:
                self._stop()
                try:
                    return self._ask(request, sandbox_end)
                except OSError as again:
                    self._stop()
                    raise SandboxError(
                        f"{NSINIT} (the zygote) failed twice ({exc}; then {again}): is "
                        "the server out of processes or memory?"
                    ) from again

    def kill_uid(self, uid: int) -> None:
        """Kill every process of ``uid`` and wait until none is left (SandboxError if some
        still are after TEARDOWN_S): the unprivileged mode's end of an episode."""
        if not nsinit.processes_of(uid):
            return  # the usual end of an episode: its commands have all exited
        with self._lock:
            for attempt in (1, 2):  # a zygote that died (killed, say) is started again, once
                if self._process is None or self._process.poll() is not None:
                    self._start()
                assert self._control is not None and self._process is not None
                try:
                    self._control.send(json.dumps({"op": "killuid", "uid": uid}).encode())
                    self._control.settimeout(HANDSHAKE_S)
                    data = self._control.recv(PACKET)
                    if not data:
                        raise ConnectionResetError("the zygote exited")
                    break
                except OSError as exc:
                    self._stop()
                    if attempt == 2:
                        raise SandboxError(
                            f"{NSINIT} (the zygote) did not kill UID {uid}'s processes, twice: {exc}"
                        ) from exc
            assert self._process is not None  # the loop leaves only with a zygote that answered
            zygote = self._process.pid
        # Their orphans come to this process (the sandbox's PID 1, their subreaper, was
        # killed first) and are reaped here.
        give_up = time.monotonic() + TEARDOWN_S
        while nsinit.processes_of(uid):
            reap_strays({zygote})
            if time.monotonic() > give_up:
                raise SandboxError(f"UID {uid}'s processes were not all gone {TEARDOWN_S:g} s after they were killed")
            time.sleep(0.0005)

    def _ask(self, request: bytes, sandbox_end: socket.socket) -> tuple[int, int]:
        if self._process is None or self._process.poll() is not None:
            self._start()
        assert self._control is not None
        socket.send_fds(self._control, [request], [sandbox_end.fileno()])
        self._control.settimeout(HANDSHAKE_S)
        data, fds, _, _ = socket.recv_fds(self._control, PACKET, 1)
        if not data:
            raise ConnectionResetError("the zygote exited")
        reply = json.loads(data)
        if "pid" in reply and len(fds) == 1:
            return int(reply["pid"]), fds[0]
        for fd in fds:
            os.close(fd)
        raise SandboxError(f"{NSINIT} could not fork a sandbox: {reply.get('error', reply)}")

    def _start(self) -> None:
        self._stop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-S", str(NSINIT), str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                env={},
                cwd="/",
            )
        except OSError as exc:
            ours.close()
            raise SandboxError(f"could not start {NSINIT}: {exc}") from exc
        finally:
            theirs.close()
        self._control = ours

    def _stop(self) -> None:
        if self._control is not None:
            self._control.close()  # the zygote reads the end and exits
            self._control = None
        if self._process is not None:
            try:
                self._process.wait(timeout=TEARDOWN_S)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None

    def close(self) -> None:
        """End the zygote (the sandboxes it forked live on until they are ended)."""
        with self._lock:
            self._stop()


@dataclass
class Sandbox:
    """One episode's namespaces, held by their PID 1 (nsinit.py)."""

    spec: SandboxSpec
    first_pid: int  # the process that made the namespaces; it ends after their PID 1
    first_pidfd: int
    control: socket.socket
    init_pid: int | None = None
    pidfd: int | None = None
    # The /proc the episode sees: its PID namespace's ("episode") or the container's.
    proc: str = "container"
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def start(cls, spec: SandboxSpec, zygote: Zygote) -> Sandbox:
        """Start the namespaces' first process; `open` finishes the setup."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        try:
            first_pid, first_pidfd = zygote.spawn(theirs, spec.namespaces)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        return cls(spec=spec, first_pid=first_pid, first_pidfd=first_pidfd, control=ours)

    def open(self) -> None:
        """Map the IDs, have PID 1 mount the sandbox's filesystems; SandboxError if it cannot."""
        ready = self.receive(HANDSHAKE_S)
        if ready is None or not ready.get("ready"):
            why = ready.get("error") if ready else f"no answer within {HANDSHAKE_S:g} s"
            raise NamespacesRefused(f"the episode's namespaces could not be made ({why})")
        if "user" in self.spec.namespaces:
            for name, first in (("uid_map", self.spec.uid), ("gid_map", self.spec.gid)):
                Path(f"/proc/{self.first_pid}/{name}").write_text(f"0 0 1\n{first} {first} 1\n")
        self.send(self.spec.setup())
        self.control.settimeout(HANDSHAKE_S)
        try:
            data, ancillary, _, _ = self.control.recvmsg(PACKET, socket.CMSG_SPACE(12))
        except OSError as exc:
            raise SandboxError(f"the episode's PID 1 did not answer within {HANDSHAKE_S:g} s") from exc
        reply = json.loads(data) if data else {"error": "PID 1 exited"}
        if not reply.get("ok"):
            raise SandboxError(f"the episode's namespaces could not be set up: {reply.get('error')}")
        self.proc = "episode" if reply.get("proc") == "episode" else "container"
        self.init_pid = _sender_pid(ancillary)
        self.pidfd = os.pidfd_open(self.init_pid)

    @property
    def root(self) -> Path:
        """The sandbox's filesystem as the server can open it (its PID 1's root)."""
        if self.init_pid is None:
            raise SandboxError("the sandbox is not open")
        if not self.spec.namespaces:
            return Path("/")  # the container's own filesystem
        return Path(f"/proc/{self.init_pid}/root")

    def path(self, inside: Path) -> Path:
        """``inside`` (absolute, as commands see it) as a path the server can open."""
        return self.root / os.fspath(inside).lstrip("/")

    def run(self, command: str, *, cwd: Path, env: Mapping[str, str]) -> tuple[Command, int]:
        """Start ``command``; (its handle, the read end of its combined stdout and stderr)."""
        env = dict(env)
        if not self.spec.namespaces:  # /tmp is the container's: the episode's own is here
            env["TMPDIR"] = str(self.spec.workspace / "tmp")
        read_end, write_end = os.pipe2(os.O_CLOEXEC)
        try:
            try:
                self.send({"op": "run", "command": command, "cwd": str(cwd), "env": env}, fds=[write_end])
            finally:
                os.close(write_end)
            while True:
                reply = self.receive(HANDSHAKE_S)
                if reply is None:
                    raise SandboxError(f"the sandbox did not start the command within {HANDSHAKE_S:g} s")
                if "error" in reply:
                    raise SandboxError(f"the sandbox could not start the command: {reply['error']}")
                if "pid" in reply:
                    return Command(self, int(reply["pid"])), read_end
        except BaseException:
            os.close(read_end)
            raise

    def send(self, message: dict, fds: list[int] | None = None) -> None:
        """One message to PID 1 (SandboxError if it is gone)."""
        data = json.dumps(message, ensure_ascii=False).encode()
        if len(data) > PACKET:
            raise SandboxError(
                f"a message to the sandbox has {len(data)} bytes; at most {PACKET} "
                "(a command is at most 16,000 characters)"
            )
        try:
            with self._lock:
                socket.send_fds(self.control, [data], fds or [])
        except OSError as exc:
            raise SandboxError(f"the episode's sandbox is gone: {exc}") from exc

    def receive(self, timeout: float) -> dict | None:
        """The next message from PID 1, or None if none came within ``timeout`` seconds."""
        self.control.settimeout(timeout if timeout > 0 else 0.0)
        try:
            data = self.control.recv(PACKET)
        except (TimeoutError, BlockingIOError):
            return None
        except OSError as exc:
            raise SandboxError(f"the episode's sandbox is gone: {exc}") from exc
        if not data:
            raise SandboxError("the episode's sandbox ended (its PID 1 exited)")
        return json.loads(data)

    def alive(self) -> bool:
        """Whether PID 1 still runs: its pidfd turns readable the moment it exits (nsinit's
        first process exits only after that, so its exit alone would be seen late)."""
        if self.pidfd is None or self.first_pidfd < 0:
            return False
        poller = select.poll()
        poller.register(self.pidfd, select.POLLIN)
        poller.register(self.first_pidfd, select.POLLIN)
        return not poller.poll(0)

    def destroy(self) -> None:
        """Kill PID 1 (and so every process of the episode) and wait until all are gone."""
        self.kill()
        self.reap()

    def kill(self) -> None:
        """Kill PID 1: the kernel then kills every process of the episode's PID namespace,
        however fast it forks. None of them can reach the next episode's sandbox (other
        namespaces, another tmpfs), so waiting for them to be gone (`reap`) may come later."""
        if self.control.fileno() < 0:
            return  # killed already
        if self.pidfd is not None:
            try:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.close(self.pidfd)
            self.pidfd = None
        else:  # PID 1, if there is one yet, dies with the first process (PR_SET_PDEATHSIG)
            try:
                signal.pidfd_send_signal(self.first_pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.control.close()

    def reap(self) -> None:
        """Wait until every process of the killed sandbox is gone (SandboxError after TEARDOWN_S)."""
        if self.first_pidfd < 0:
            return  # reaped already
        # nsinit's first process returns once PID 1 has exited, which it does only after
        # the kernel has killed and reaped every other process of its PID namespace; its
        # pidfd turns readable then (the zygote reaps it).
        poller = select.poll()
        poller.register(self.first_pidfd, select.POLLIN)
        self.finish_reap(bool(poller.poll(TEARDOWN_S * 1000)))

    def finish_reap(self, gone: bool) -> None:
        """After waiting on `first_pidfd`: reap it if it came to this process, close it, and
        raise SandboxError if it was not ``gone`` (it is killed then)."""
        if not gone:
            try:
                signal.pidfd_send_signal(self.first_pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
        else:
            try:  # ours to reap only if its zygote died and it came to the server (PID 1)
                os.waitid(os.P_PIDFD, self.first_pidfd, os.WEXITED | os.WNOHANG)
            except ChildProcessError:
                pass  # the zygote's child: the zygote reaps it
        os.close(self.first_pidfd)
        self.first_pidfd = -1
        if not gone:
            raise SandboxError(f"the last episode's processes were not gone {TEARDOWN_S:g} s after they were killed")


def _sender_pid(ancillary: list[tuple[int, int, bytes]]) -> int:
    # SO_PASSCRED: the kernel gives the sender's PID as this process sees it.
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            pid, _, _ = struct.unpack("iII", data[:12])
            return pid
    raise SandboxError("the sandbox's PID 1 sent no credentials")


# Ended sandboxes not yet reaped, at most: a reset past this waits for one of them to go,
# so an agent resetting in a loop cannot pile up dying namespaces.
MAX_RETIRING = 2


class SandboxFactory:
    """Makes the sandboxes of one server, the next one always ready ahead of time, and
    reaps the ended ones in the background: two threads of its own, started once (a
    thread started per reset costs more than the rest of the reset on a busy machine); the
    reaper waits on every ended sandbox at once."""

    def __init__(self, spec: SandboxSpec) -> None:
        self.spec = spec
        self.lockdown: list[str] = []
        # The /proc the last episode handed out sees: "episode" or "container".
        self.proc = "container"
        self._files = None
        if spec.lock_scratch:
            from env.server import unprivileged

            self.lockdown = unprivileged.lock_scratch(
                (*(path for path, *_ in spec.scratch), *unprivileged.ALSO_LOCKED), spec.workspace
            )
            self.lockdown += unprivileged.lock_home(spec.uid, spec.gid, spec.workspace)
        if not spec.namespaces:
            from env.server.unprivileged import EpisodeFiles

            self._files = EpisodeFiles(spec.workspace, spec.uid, spec.gid)
        self._zygote = Zygote()
        # Without namespaces: the episode handed out and not yet ended, and the lock that
        # makes ending it and handing out the next one a single step.
        self._swap = threading.Lock()
        self._current: Sandbox | None = None
        # What the two threads share, under one condition.
        self._state = threading.Condition()
        self._closed = False
        self._preparing = False  # the preparer is asked for, or making, the next sandbox
        self._ready: Sandbox | None = None
        self._failure: BaseException | None = None
        self._dying: list[Sandbox] = []  # killed, waiting for the reaper
        self._unreaped = 0  # killed and not yet reaped (queued or being reaped)
        self._teardown_failure: SandboxError | None = None
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)  # wakes the reaper
        self._threads = [
            threading.Thread(target=loop, name=name, daemon=True)
            for loop, name in ((self._prepare_loop, "arena-next-sandbox"), (self._reap_loop, "arena-reaper"))
        ]
        for thread in self._threads:
            thread.start()

    def retire(self, sandbox: Sandbox) -> None:
        """End an episode's sandbox: kill it now (every process of the episode with it), and
        reap it in the background. A teardown that failed is raised by the next `take`.
        Past MAX_RETIRING sandboxes not yet reaped, it waits for one of them to go.

        Without namespaces (`kill_by_uid`), the episode's processes are killed by their UID
        and gone before this returns, and its directories are renamed away."""
        with self._swap:
            sandbox.kill()
            if self._current is sandbox:
                self._end_current()
        with self._state:
            self._dying.append(sandbox)
            self._unreaped += 1
            os.write(self._wake_w, b"x")
            self._state.wait_for(lambda: self._unreaped <= MAX_RETIRING)

    def _reap_loop(self) -> None:
        """Wait on every killed sandbox's first process at once (a slow teardown holds up no
        other), and reap each as it goes, or give it up after TEARDOWN_S."""
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        watching: dict[int, tuple[Sandbox, float]] = {}
        while True:
            with self._state:
                dying, self._dying = self._dying, []
                if self._closed and not dying and not watching:
                    return
            for sandbox in dying:
                if sandbox.first_pidfd < 0:  # reaped already
                    with self._state:
                        self._unreaped -= 1
                        self._state.notify_all()
                    continue
                watching[sandbox.first_pidfd] = (sandbox, time.monotonic() + TEARDOWN_S)
                poller.register(sandbox.first_pidfd, select.POLLIN)
            first_deadline = min((deadline for _, deadline in watching.values()), default=None)
            wait_ms = None if first_deadline is None else max(0, int((first_deadline - time.monotonic()) * 1000))
            ready = {fd for fd, _ in poller.poll(wait_ms)}
            if self._wake_r in ready:
                nsinit.drain(self._wake_r)
            now = time.monotonic()
            for fd, (sandbox, deadline) in list(watching.items()):
                if fd in ready or deadline <= now:
                    del watching[fd]
                    poller.unregister(fd)
                    try:
                        sandbox.finish_reap(fd in ready)
                    except SandboxError as exc:
                        print(f"arena: {exc}", file=sys.stderr, flush=True)
                        self._teardown_failure = exc
                    with self._state:
                        self._unreaped -= 1
                        self._state.notify_all()

    def wait_retired(self) -> None:
        """Wait until every ended sandbox is reaped."""
        with self._state:
            self._state.wait_for(lambda: self._unreaped == 0)

    def _prepare(self) -> tuple[Sandbox | None, BaseException | None]:
        try:
            sandbox = Sandbox.start(self.spec, self._zygote)
            try:
                sandbox.open()
            except BaseException:
                sandbox.destroy()
                raise
            return sandbox, None
        except BaseException as exc:  # reported by the `take` that needed it
            return None, exc

    def _prepare_loop(self) -> None:
        while True:
            with self._state:
                self._state.wait_for(lambda: self._preparing or self._closed)
                if self._closed:
                    self._preparing = False
                    self._state.notify_all()
                    return
            made, failure = self._prepare()
            with self._state:
                self._ready, self._failure, self._preparing = made, failure, False
                self._state.notify_all()

    def prepare(self) -> None:
        """Have the next sandbox made in the background (unless it is, or is being, made)."""
        with self._state:
            if not self._preparing and self._ready is None and not self._closed:
                self._failure = None
                self._preparing = True
                self._state.notify_all()

    def take(self) -> Sandbox:
        """The sandbox made ahead of time (made now if there is none); then start the next.

        Where the ended episodes still hold much of the container's memory (their teardown
        frees it in the background), it waits for that first, so that the new episode can
        use its whole budget at once."""
        if memory_in_use() > memory_limit() * MEMORY_WAIT_SHARE:
            self.wait_retired()
        failed, self._teardown_failure = self._teardown_failure, None
        if failed is not None:
            raise failed
        self.prepare()
        with self._state:
            self._state.wait_for(lambda: not self._preparing)
            sandbox, self._ready = self._ready, None
            failure, self._failure = self._failure, None
        if sandbox is not None and not sandbox.alive():
            # Its PID 1 was killed while it waited (the OOM killer under another episode's
            # memory, say): end what is left and make a fresh one.
            failure = SandboxError("the sandbox made ahead of time had ended before its episode")
            sandbox.destroy()
            sandbox = None
        if sandbox is None:
            # Made ahead of time, it may have failed for a passing reason (the server out
            # of descriptors under a connection flood, say): one more try, now.
            sandbox, again = self._prepare()
            if sandbox is None:
                failure = again or failure
                if isinstance(failure, SandboxError):
                    raise failure
                raise SandboxError(f"the episode's sandbox could not be made: {failure}") from failure
        self.prepare()
        self.proc = sandbox.proc
        if not self.spec.namespaces:
            with self._swap:
                # One episode at a time shares the UID and the workspace: one whose session
                # has not ended it yet (its close may come after the next reset) ends now.
                if self._current is not None:
                    self._current.kill()
                    self._end_current()
                try:
                    if self._files is not None:
                        self._files.fresh()
                except BaseException:
                    sandbox.kill()
                    raise
                self._current = sandbox
        return sandbox

    def _end_current(self) -> None:
        """Without namespaces: kill the current episode's processes by UID (gone when this
        returns) and rename its directories away. Called with `_swap` held."""
        self._current = None
        if self.spec.kill_by_uid:
            self._zygote.kill_uid(self.spec.uid)
        if self._files is not None:
            self._files.retire()

    def check(self) -> None:
        """Make one sandbox and end it: SandboxError (NamespacesRefused) if this server's
        episodes cannot be contained as its spec says."""
        self.retire(self.take())
        self.wait_retired()

    def close(self) -> None:
        """End the sandbox made ahead of time, and wait for the ended ones."""
        with self._state:
            self._state.wait_for(lambda: not self._preparing)
            self._closed = True
            self._state.notify_all()
            os.write(self._wake_w, b"x")
            sandbox, self._ready = self._ready, None
        if sandbox is not None:
            sandbox.destroy()
        for thread in self._threads:
            thread.join()
        os.close(self._wake_r)
        os.close(self._wake_w)
        self._zygote.close()
        if self._files is not None:
            self._files.close()


def start_sandboxes(spec: SandboxSpec, requested: str = "auto") -> SandboxFactory:
    """The sandboxes of a server in the strongest mode the runtime allows (``requested``:
    `auto`, or one mode by name), checked by making one; the mode is logged.

    SandboxError if no mode can contain an episode here, naming what each one lacks."""
    if requested not in ("auto", *ISOLATION_MODES):
        raise SandboxError(f"unknown isolation mode {requested!r}; expected auto, {' or '.join(ISOLATION_MODES)}")
    refused: list[str] = []
    candidates = [spec, unprivileged(spec)]
    for candidate in candidates:
        if requested not in ("auto", candidate.mode):
            continue
        factory = None
        try:
            factory = SandboxFactory(candidate)
            factory.check()
        except SandboxError as exc:
            if factory is not None:
                factory.close()
            # Only a runtime that refuses the namespaces themselves moves the server to the
            # next mode; a namespaces mode that fails later is a fault to report.
            if requested == "auto" and candidate.namespaces and not isinstance(exc, NamespacesRefused):
                raise
            refused.append(f"{candidate.mode}: {exc}")
            continue
        why = f" (namespaces refused: {refused[0].split(': ', 1)[1]})" if refused else ""
        print(f"arena: isolation: {candidate.mode}{why}; /proc: the {factory.proc}'s", file=sys.stderr, flush=True)
        for line in factory.lockdown:
            print(f"arena: locked {line}", file=sys.stderr, flush=True)
        return factory
    raise SandboxError(
        "no isolation mode can contain an episode here; "
        + "; ".join(refused)
        + ". The namespaces mode needs user, PID, network, mount and IPC namespaces; the "
        "unprivileged mode needs root with CAP_SETUID, CAP_SETGID and CAP_SETPCAP, and "
        "seccomp filters (prctl PR_SET_SECCOMP)"
    )
