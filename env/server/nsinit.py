"""PID 1 of one episode's namespaces: it prepares them, starts the agent's commands, reaps.

The server starts ``python -I -S nsinit.py FD`` once (env/server/sandbox.py): a zygote,
which forks one process per sandbox on request, so that a sandbox costs a fork rather
than an interpreter's start. Server and zygote speak over a SOCK_SEQPACKET socket (number
FD), one JSON object per packet: ``{"op": "spawn", "namespaces": "user,pid,..."}`` with
the new sandbox's own socket attached; the zygote forks, answers ``{"pid": N}`` with a
pidfd of the fork attached, and reaps it when it ends. It exits when the server closes
the socket. The fork speaks to the server over the attached socket:

1. it unshares the namespaces (``user,pid,net,mount,ipc``) and says ``{"ready": true}``;
   the server, which alone may, writes the new user namespace's ID maps (root and the
   sandbox UID/GID, each to itself) and sends the setup. This process keeps the full
   capabilities it got in the new user namespace (it does not exec, which would drop them);
2. it forks the PID namespace's PID 1, and only waits for it from then on. PID 1 makes
   every mount it inherited read-only (recursively) and mounts size- and inode-limited
   tmpfs filesystems on the workspace and the scratch directories, a new mqueue
   filesystem, brings the loopback interface up, joins a new session keyring, sets
   no_new_privs and a seccomp filter refusing the keyring system calls for itself and
   everything it starts; then it says ``{"ok": true}`` (or ``{"error": "..."}``);
3. then, per ``{"op": "run", ...}`` with a pipe's write end attached, it forks the
   command (its own session, the resource limits, the OOM killer's first choice, the
   sandbox UID/GID without supplementary groups, ``bash -c``) and answers ``{"pid": N}``;
   when that process ends it says ``{"exit": N, "code": C}``. ``{"op": "kill", "pgid": N}``
   kills a process group. Every other process that ends here (orphans come to PID 1) is
   reaped at once.

When the server closes the socket, or kills PID 1, the episode ends: the kernel
kills every process of the PID namespace, and the namespaces, their tmpfs contents,
keyrings and IPC objects go with them. Nothing of the agent's outlives it.

Standard library only and no imports from the server: it starts with ``python -I -S``.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import platform
import resource
import select
import signal
import socket
import struct
import sys

_libc = ctypes.CDLL(None, use_errno=True)

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID = 0x1, 0x2
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (added after the unification)
SYS_OPEN_TREE, OPEN_TREE_CLONE = 428, 1
SYS_KEYCTL = {"x86_64": 250, "aarch64": 219}
KEYCTL_JOIN_SESSION_KEYRING = 1
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
PR_SET_CHILD_SUBREAPER = 36
PR_CAPBSET_DROP, CAP_LAST_CAP = 24, 63
# System calls refused to every process of the episode, by what they would reach past the
# episode (x86_64 numbers). Each group is switched on by a setup flag.
KEYRING_SYSCALLS = (248, 249, 250)  # add_key, request_key, keyctl: keys are the kernel's
# Namespaces the agent could nest (whose teardown it could inflate past a reset, or hide
# processes in): unshare and setns always; clone only with a namespace flag (below).
NAMESPACE_SYSCALLS = (272, 308)  # unshare, setns
# Kernel interfaces no data workflow needs, each a way around the filter or a shared
# kernel object: io_uring (its own socket and file operations), bpf, perf_event_open,
# userfaultfd, and the mount API.
KERNEL_SYSCALLS = (425, 426, 427, 321, 298, 323, 165, 166, 428, 429, 430, 431, 432, 433, 442)
# System V IPC: its objects pin memory that no process holds (a segment outlives its
# maker), so an episode gets none, in either mode.
SYSV_SYSCALLS = (29, 30, 31, 64, 65, 66, 68, 69, 70, 71, 220)  # shm*, sem*, msg*, semtimedop
# Without namespaces of its own (the unprivileged mode) the agent shares the container's
# network and IPC: it gets no socket at all (socketpair, which reaches nothing, stays) and
# no POSIX message queue. With them, its own loopback and mqueue mount are its own.
SOCKET_SYSCALLS = (41,)  # socket
MQUEUE_SYSCALLS = (240,)  # mq_open
SYS_CLONE, SYS_CLONE3 = 56, 435
# Every CLONE_NEW* flag clone(2) takes (CLONE_NEWTIME only clone3 and unshare do).
CLONE_NEW_FLAGS = 0x7E020000
AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
EPERM, ENOSYS = 1, 38
BPF_LD_W_ABS, BPF_JEQ_K, BPF_JGE_K, BPF_JSET_K, BPF_RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
SECCOMP_DATA_NR, SECCOMP_DATA_ARCH, SECCOMP_DATA_ARG0 = 0, 4, 16
PR_SET_PDEATHSIG = 1
NAMESPACE_FLAGS = {"user": 0x10000000, "pid": 0x20000000, "net": 0x40000000, "mount": 0x00020000, "ipc": 0x08000000}
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
SHELL = "/bin/bash"
PACKET = 131_072  # sandbox.PACKET: this file runs without the env package


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str, target: str, fstype: str, flags: int, data: str | None) -> None:
    _check(
        _libc.mount(
            source.encode(),
            target.encode(),
            fstype.encode(),
            ctypes.c_ulong(flags),
            data.encode() if data is not None else None,
        ),
        f"mount -t {fstype} {target}",
    )


def _read_only_everywhere() -> None:
    attr = _MountAttr(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0, 0, 0)
    _check(
        _libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr)),
        "mount_setattr(/, read-only, recursive)",
    )


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH", fcntl.ioctl(sock, SIOCGIFFLAGS, request)[:18])[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | IFF_UP, b""))


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def _filter_program(setup: dict) -> list[tuple[int, int, int, int]]:
    """The episode's seccomp program (classic BPF): the refused system calls fail with
    EPERM, clone with any CLONE_NEW* flag too, clone3 with ENOSYS (so that glibc falls back
    to clone, whose flags a filter can read), and so does every system call of another ABI
    (i386, x32), whose numbers the filter does not know."""
    refused: list[int] = list(KERNEL_SYSCALLS)
    if setup.get("deny_keyrings"):
        refused += KEYRING_SYSCALLS
    if setup.get("deny_namespaces"):
        refused += NAMESPACE_SYSCALLS
    if setup.get("deny_sysv"):
        refused += SYSV_SYSCALLS
    if setup.get("deny_sockets"):
        refused += SOCKET_SYSCALLS
    if setup.get("deny_mqueue"):
        refused += MQUEUE_SYSCALLS
    refused = sorted(set(refused))
    # Layout, by index: 0-3 the ABI checks; one JEQ per refused call; the clone3 and clone
    # tests; then the returns ALLOW, the clone flag test, ALLOW, ENOSYS, EPERM.
    body = 4 + len(refused) + (2 if setup.get("deny_namespaces") else 0)
    clone_flags, enosys, eperm = body + 1, body + 4, body + 5

    def jump(at: int, to: int) -> int:  # jumps count from the next instruction
        return to - at - 1

    program = [
        (BPF_LD_W_ABS, 0, 0, SECCOMP_DATA_ARCH),
        (BPF_JEQ_K, 0, jump(1, eperm), AUDIT_ARCH_X86_64),
        (BPF_LD_W_ABS, 0, 0, SECCOMP_DATA_NR),
        (BPF_JGE_K, jump(3, eperm), 0, X32_SYSCALL_BIT),
    ]
    for number in refused:
        program.append((BPF_JEQ_K, jump(len(program), eperm), 0, number))
    if setup.get("deny_namespaces"):
        program.append((BPF_JEQ_K, jump(len(program), enosys), 0, SYS_CLONE3))
        program.append((BPF_JEQ_K, jump(len(program), clone_flags), 0, SYS_CLONE))
    program += [
        (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
        (BPF_LD_W_ABS, 0, 0, SECCOMP_DATA_ARG0),  # clone's flags (their low word)
        (BPF_JSET_K, jump(clone_flags + 1, eperm), 0, CLONE_NEW_FLAGS),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | ENOSYS),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | EPERM),
    ]
    assert len(program) == eperm + 1
    return program


def _install_filter(setup: dict) -> None:
    """Stack the episode's seccomp filter on this process and everything it starts."""
    program = _filter_program(setup)
    filters = (_SockFilter * len(program))(*(_SockFilter(*step) for step in program))
    fprog = _SockFprog(len(program), filters)
    _check(
        _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0),
        "prctl(PR_SET_SECCOMP): the episode's system call filter",
    )


def _drop_bounding_set() -> None:
    """Empty the capability bounding set: nothing the episode execs can regain a capability
    (a nested user namespace's root, were one allowed, would start from none)."""
    for cap in range(CAP_LAST_CAP + 1):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # EINVAL: no such cap
            err = ctypes.get_errno()
            raise OSError(err, f"prctl(PR_CAPBSET_DROP, {cap}): {os.strerror(err)}")


def _new_session_keyring() -> None:
    # The server's session keyring would otherwise be shared by every episode's commands.
    number = SYS_KEYCTL.get(platform.machine())
    if number is None:
        raise OSError(f"no keyctl system call number known for {platform.machine()}")
    if _libc.syscall(number, KEYCTL_JOIN_SESSION_KEYRING, None) < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"keyctl(JOIN_SESSION_KEYRING): {os.strerror(err)}")


def _named(what: str, action, *args) -> None:
    """Run ``action``; an OSError says which step of the setup failed."""
    try:
        action(*args)
    except OSError as exc:
        raise OSError(exc.errno, f"{what}: {exc.strerror or exc}") from exc


def _write(path: str, text: str) -> None:
    with open(path, "w") as out:
        out.write(text)


def _make_owned_dir(path: str, mode: int, uid: int, gid: int) -> None:
    os.mkdir(path, mode)
    os.chown(path, uid, gid)
    os.chmod(path, mode)


def _own_oom_score_adj(read_only_soon: bool) -> int:
    """This process's oom_score_adj, open for writing. Before every mount turns read-only,
    through a detached copy of /proc (open_tree): a descriptor open for writing on /proc
    itself would keep it writable (mount_setattr refuses, EBUSY), and the copy is reachable
    only through this descriptor, which no command inherits."""
    if not read_only_soon:
        return os.open("/proc/self/oom_score_adj", os.O_WRONLY | os.O_CLOEXEC)
    tree = _libc.syscall(SYS_OPEN_TREE, AT_FDCWD, b"/proc", OPEN_TREE_CLONE | AT_RECURSIVE | os.O_CLOEXEC)
    if tree < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"open_tree(/proc): {os.strerror(err)}")
    try:
        return os.open("self/oom_score_adj", os.O_WRONLY | os.O_CLOEXEC, dir_fd=tree)
    finally:
        os.close(tree)


def _episode_proc() -> str:
    """Mount a /proc of this PID namespace over the container's, showing only the
    episode's processes: its PIDs then start afresh each episode, and no counter of the
    container (PIDs, fork totals) is read through it. The kernel allows it only where the
    container's /proc hides nothing (docs/isolation.md); else the container's stays.
    Which /proc the episode has: "episode" or "container"."""
    flags = MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY
    if _libc.mount(b"proc", b"/proc", b"proc", ctypes.c_ulong(flags), b"subset=pid") == 0:
        return "episode"
    err = ctypes.get_errno()
    if err in (errno.EPERM, errno.EINVAL):  # masked paths; a kernel without subset=pid
        return "container"
    raise OSError(err, f"mount -t proc /proc: {os.strerror(err)}")


def prepare(setup: dict) -> dict:
    """Make this mount namespace the sandbox's filesystem view (with namespaces of its own),
    then lock this process, and so everything it starts, down. What the server is told
    beside "ok": which /proc the episode sees."""
    proc = "container"
    # The OOM killer's order: the agent's commands first (oom_score_adj 1000, set per
    # command), then this PID 1 (half that: its own memory is small, so any command
    # outranks it), the server last. Raising the value needs no privilege.
    _named("oom_score_adj", _write, "/proc/self/oom_score_adj", str(setup["init_oom_score_adj"]))
    # Held open: /proc is read-only once the mounts are, and each command is forked with
    # its own value raised here for the fork (it inherits it), then lowered back (allowed:
    # no lower than where it started).
    setup["oom_fd"] = _own_oom_score_adj(setup["namespaces"] and setup["read_only"])
    if setup["namespaces"]:
        if setup["read_only"]:
            _read_only_everywhere()
        for path, size, inodes, mode in setup["scratch"]:
            if os.path.isdir(path):
                _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},nr_inodes={inodes},mode={mode:o}")
        workspace = setup["workspace"]
        # Under a scratch directory (a host-mode workspace in /tmp), its fresh tmpfs lacks the path.
        _named("the workspace's mount point", os.makedirs, workspace["path"], 0o755, True)
        _mount(
            "tmpfs",
            workspace["path"],
            "tmpfs",
            MS_NOSUID | MS_NODEV,
            f"size={workspace['size']},nr_inodes={workspace['inodes']},mode=755",
        )
        uid, gid = setup["uid"], setup["gid"]
        for name, mode in (("repo", 0o755), ("home", 0o700)):
            _named(
                f"the workspace's {name} directory",
                _make_owned_dir,
                os.path.join(workspace["path"], name),
                mode,
                uid,
                gid,
            )
        if setup["mqueue"] and os.path.isdir("/dev/mqueue"):
            _mount("mqueue", "/dev/mqueue", "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
        if setup["network"]:
            _named("bringing the loopback interface up", _loopback_up)
        if setup["own_proc"]:
            proc = _episode_proc()
        if setup["session_keyring"]:
            _new_session_keyring()
    else:
        # The container's own namespaces: the server made the workspace's directories, and
        # kills the episode's processes by their UID (the zygote's "killuid").
        _check(_libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl(PR_SET_CHILD_SUBREAPER)")
    if setup["drop_bounding_set"]:
        _drop_bounding_set()
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    _install_filter(setup)
    return {"proc": proc}


def _start(run: dict, out: int, setup: dict) -> int:
    os.write(setup["oom_fd"], str(setup["oom_score_adj"]).encode())
    try:
        pid = os.fork()
    except OSError:
        os.write(setup["oom_fd"], str(setup["init_oom_score_adj"]).encode())
        raise
    if pid:
        os.write(setup["oom_fd"], str(setup["init_oom_score_adj"]).encode())
        return pid
    try:
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        for number in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD):
            signal.signal(number, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        for name, value in setup["limits"]:
            resource.setrlimit(getattr(resource, f"RLIMIT_{name.upper()}"), (value, value))
        os.setgroups([])
        os.setresgid(setup["gid"], setup["gid"], setup["gid"])
        os.setresuid(setup["uid"], setup["uid"], setup["uid"])
        os.umask(0o022)
        os.chdir(run["cwd"])
        os.execve(SHELL, [SHELL, "-c", run["command"]], run["env"])
    except BaseException as exc:
        try:
            os.write(2, f"arena sandbox: the command could not start: {exc}\n".encode())
        finally:
            os._exit(127)
    return 0  # not reached


def _send(ctl: socket.socket, message: dict) -> None:
    ctl.send(json.dumps(message).encode())


def serve(ctl: socket.socket, setup: dict) -> None:
    """Start and reap commands until the server goes away."""
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    leaders: set[int] = set()
    watched: list[socket.socket | int] = [ctl, wake_r]
    while True:
        ready, _, _ = select.select(watched, [], [])
        if wake_r in ready:
            drain(wake_r)
        _reap(ctl, leaders)
        if ctl not in ready:
            continue
        data, fds, _, _ = socket.recv_fds(ctl, PACKET, 1)
        if not data:
            return
        try:
            _handle(ctl, data, fds, setup, leaders)
        except Exception as exc:
            _send(ctl, {"error": f"{type(exc).__name__}: {exc}"[:1000]})
        finally:
            for fd in fds:
                os.close(fd)


def _handle(ctl: socket.socket, data: bytes, fds: list[int], setup: dict, leaders: set[int]) -> None:
    request = json.loads(data)
    if request["op"] == "run":
        if len(fds) != 1:
            raise ValueError(f"a run request carries one descriptor (the output pipe), not {len(fds)}")
        pid = _start(request, fds[0], setup)
        leaders.add(pid)
        _send(ctl, {"pid": pid})
    elif request["op"] == "kill":
        try:
            os.killpg(int(request["pgid"]), signal.SIGKILL)
        except ProcessLookupError:
            pass
    else:
        raise ValueError(f"unknown request {request['op']!r}")


def _reap(ctl: socket.socket, leaders: set[int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid in leaders:
            leaders.discard(pid)
            _send(ctl, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def drain(fd: int) -> None:
    """Read a non-blocking descriptor (a wake-up pipe) until it is empty."""
    while True:
        try:
            if not os.read(fd, 512):
                return
        except BlockingIOError:
            return


def kill_uid(uid: int) -> None:
    """Send SIGKILL to every process of ``uid`` (in this PID namespace), from a child that
    takes that UID: kill(-1) reaches exactly the processes it may signal, which are that
    UID's (it spares only itself and PID 1). One pass cannot be outrun: the kernel signals
    under the lock a fork needs to add its child, and refuses to complete a fork whose
    parent has a fatal signal pending. The dying processes' orphans come to the server
    (PID 1 of the episode's sandbox, their subreaper, died first), which reaps them while
    it waits until /proc lists none (`processes_of`)."""
    _reap_all()  # the server asks only when /proc lists some of them (Zygote.kill_uid)
    killer = os.fork()
    if killer == 0:
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        finally:
            os._exit(0)
    os.waitpid(killer, 0)
    _reap_all()


def processes_of(uid: int) -> list[int]:
    """The PIDs whose real UID is ``uid`` (zombies included), from /proc/PID/status: the
    owner of /proc/PID is root for a process that made itself not dumpable."""
    found = []
    wanted = f"Uid:\t{uid}\t".encode()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/status", "rb") as status:
                    if wanted in status.read(2048):
                        found.append(int(entry.name))
            except (FileNotFoundError, ProcessLookupError):
                pass
    return found


def _reap_all() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def zygote(ctl: socket.socket) -> int:
    """Fork a sandbox's first process per spawn request, kill a UID's processes per killuid
    request, and reap its children, until the server goes."""
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    watched: list[socket.socket | int] = [ctl, wake_r]
    while True:
        ready, _, _ = select.select(watched, [], [])
        if wake_r in ready:
            drain(wake_r)
        _reap(ctl, set())  # no command leaders here: every child is reaped, nothing is said
        if ctl not in ready:
            continue
        data, fds, _, _ = socket.recv_fds(ctl, PACKET, 1)
        if not data:
            return 0
        try:
            request = json.loads(data)
            if request.get("op") == "killuid" and not fds:
                kill_uid(int(request["uid"]))
                _send(ctl, {"killed": True})
                continue
            if request.get("op") != "spawn" or len(fds) != 1:
                raise ValueError(f"expected a spawn request with one socket, got {request!r} with {len(fds)}")
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    ctl.close()
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    os.close(wake_r)
                    os.close(wake_w)
                    code = sandbox(socket.socket(fileno=fds[0]), request["namespaces"])
                except BaseException as exc:
                    print(f"arena sandbox: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                finally:
                    os._exit(code)
            pidfd = os.pidfd_open(pid)
            try:
                socket.send_fds(ctl, [json.dumps({"pid": pid}).encode()], [pidfd])
            finally:
                os.close(pidfd)
        except Exception as exc:
            _send(ctl, {"error": f"{type(exc).__name__}: {exc}"[:1000]})
        finally:
            for fd in fds:
                os.close(fd)


def sandbox(ctl: socket.socket, namespaces: str) -> int:
    """One sandbox's first process: unshare, then fork its PID 1 and wait for it."""
    flags = sum(NAMESPACE_FLAGS[name] for name in namespaces.split(",") if name)
    if flags and _libc.unshare(flags) != 0:
        err = ctypes.get_errno()
        _send(ctl, {"error": f"unshare({namespaces}): {os.strerror(err)}"})
        return 1
    _send(ctl, {"ready": True})
    data = ctl.recv(PACKET)
    if not data:
        return 0
    setup = json.loads(data)
    # The PID namespace is for the children of this process: the first is its PID 1.
    # This process only waits for it (and dies with the server, which holds its socket).
    init = os.fork()
    if init:
        ctl.close()
        _, status = os.waitpid(init, 0)
        return os.waitstatus_to_exitcode(status)
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    try:
        facts = prepare(setup)
    except OSError as exc:
        _send(ctl, {"error": str(exc)})
        return 1
    _send(ctl, {"ok": True, **facts})
    serve(ctl, setup)
    return 0


if __name__ == "__main__":
    sys.exit(zygote(socket.socket(fileno=int(sys.argv[1]))))
