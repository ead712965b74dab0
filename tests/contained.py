"""Run a host-mode environment server contained, so tests never change the host.

The server gives each episode namespaces of its own (env/server/sandbox.py), which
touch nothing of the host; but at start it may add the sandbox user to /etc/passwd and
make /workspace, and its sandbox UID 2000 may be a host user's. Run on the host
directly, that would change the host. `contained_argv` wraps
a command so it runs as PID 1 of new PID, mount and IPC namespaces (in a user namespace
whose UID/GID 2000 is a host ID of its own: tests/userns_exec.py), pivoted into an
overlay of the host's root whose writes go to a private tmpfs: the server sees only
its own processes and IPC objects, and everything it writes (/etc/passwd, /workspace,
/tmp, /dev/shm, /dev/mqueue) disappears with the namespace. /dev/shm is an overlay of the
host's of its own, as / is (the test run's temporary files may live there: noxfile.py).
/workspace is a fresh tmpfs (as the image's is), whatever the host has at that path. Only
`share` (a test's temporary directory) is the host's own, bound at the same path, for logs
and inputs.

`start_contained` starts such a command; one of this interpreter (a server) is forked from
the worker's forkserver, which has imported the server's stack once, and makes the same
namespaces in the same steps (tests/forked_server.py).

`ContainedProcess.path` maps a path as the server sees it to one the test can open
(through /proc/PID/root of the server), and `.host_id` a UID as the server sees it to
the one the test sees (the owner of the sandbox's files, as `os.stat` gives it here).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import forked_server

USERNS_EXEC = Path(__file__).with_name("userns_exec.py")

# As the host's root, in a mount namespace of its own. $1: a host directory to hold the
# namespace's tmpfs; $2: the shared directory; $3: a Python; then the command that enters
# the rest (none: only the mounts, for tests/forked_server.py).
_SETUP_MOUNTS = r"""
set -eu
scratch=$1 share=$2 python=$3
shift 3
mount -t tmpfs -o mode=0700 arena-contained "$scratch"
mkdir "$scratch/upper" "$scratch/work" "$scratch/root"
r=$scratch/root
mount -t overlay overlay -o "lowerdir=/,upperdir=$scratch/upper,workdir=$scratch/work" "$r"
mount --rbind /dev "$r/dev"
mkdir "$scratch/shm-upper" "$scratch/shm-work"
chmod 1777 "$scratch/shm-upper"
mount -t overlay -o "nosuid,nodev,lowerdir=/dev/shm,upperdir=$scratch/shm-upper,workdir=$scratch/shm-work" \
    contained-shm "$r/dev/shm"
mkdir -p "$r/dev/mqueue"
mkdir -p "$r/workspace"
mount -t tmpfs -o mode=0755 contained-workspace "$r/workspace"
mount --rbind /sys "$r/sys"
mkdir -p "$r$share"
mount --bind "$share" "$r$share"
mount --rbind /proc "$r/proc"
# pivot_root, not chroot: a chrooted process may not make a user namespace, and the server
# makes one for every episode (env/server/sandbox.py). The old root is detached at once.
cd "$r"
pivot_root . .
"$python" -c 'import ctypes, sys; sys.exit(ctypes.CDLL(None).umount2(b".", 2))'
cd /
exec "$@"
"""

# As PID 1 of the new PID namespace, root of the new user namespace, which owns it and the
# IPC namespace. $1: the shared directory; then argv (none: only the mounts, for
# tests/forked_server.py).
_ENTER_MOUNTS = r"""
set -eu
share=$1
shift 1
mount -t mqueue mqueue /dev/mqueue
mount -t proc proc /proc
"""
_ENTER = (
    _ENTER_MOUNTS
    + r"""cd "$share"
exec "$@"
"""
)


def require_containment() -> None:
    """Skip unless this process can make the namespaces (root, util-linux, overlayfs)."""
    if os.geteuid() != 0:
        pytest.skip("the environment server needs root to drop commands to UID 2000")
    missing = [tool for tool in ("unshare", "pivot_root", "mount") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"containing the server needs {', '.join(missing)} (util-linux, coreutils)")


def contained_argv(scratch: Path, share: Path, argv: list[str]) -> list[str]:
    """``argv`` run as PID 1 of private PID/mount/IPC namespaces over an overlay of /."""
    scratch.mkdir(parents=True, exist_ok=True)
    enter = [
        sys.executable,
        str(USERNS_EXEC),
        "--",
        "unshare",
        "--mount",
        "--pid",
        "--ipc",
        "--fork",
        "--kill-child",
        "--propagation",
        "private",
        "/bin/sh",
        "-c",
        _ENTER,
        "contained",
        str(share),
        *argv,
    ]
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "/bin/sh",
        "-c",
        _SETUP_MOUNTS,
        "contained",
        str(scratch),
        str(share),
        sys.executable,
        *enter,
    ]


def start_contained(
    scratch: Path, share: Path, argv: list[str], *, cwd: Path, env: dict[str, str], log: Path
) -> subprocess.Popen | forked_server.Forked:
    """Start ``argv`` contained (as `contained_argv` runs it), its output to ``log``. A
    command of this interpreter is forked from the worker's forkserver, which has imported
    the server's stack already (tests/forked_server.py); any other command is run."""
    if forked_server.forkable(argv):
        return forked_server.start(
            scratch, share, argv, cwd=cwd, env=env, log=log, setup_mounts=_SETUP_MOUNTS, enter_script=_ENTER_MOUNTS
        )
    with open(log, "ab") as out:
        return subprocess.Popen(
            contained_argv(scratch, share, argv), cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT
        )


@dataclass
class ContainedProcess:
    """The `unshare` process (what the test started) and a view of the server's namespace."""

    process: subprocess.Popen | forked_server.Forked

    def init_pid(self, timeout_s: float = 10.0) -> int:
        """The host PID of the namespace's PID 1 (the server after its exec)."""
        deadline = time.monotonic() + timeout_s
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        while True:
            try:
                pids = children.read_text().split()
            except FileNotFoundError:
                pids = []
            if pids:
                return int(pids[0])
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the contained server's namespace has no process")
            time.sleep(0.02)

    def host_id(self, inside: int) -> int:
        """The host's UID for the namespace's UID ``inside`` (its uid_map)."""
        for line in Path(f"/proc/{self.process.pid}/uid_map").read_text().splitlines():
            first, host, count = map(int, line.split())
            if first <= inside < first + count:
                return host + inside - first
        raise LookupError(f"UID {inside} is not mapped in the contained server's namespace")

    def path(self, inside: str | os.PathLike) -> Path:
        """``inside`` (absolute, as the server sees it) as a path the test can open."""
        return Path(f"/proc/{self.init_pid()}/root") / os.fspath(inside).lstrip("/")

    def pid_alive(self, pid: int) -> bool:
        """Whether PID ``pid`` of the namespace exists and is not a zombie."""
        try:
            stat = self.path(f"/proc/{pid}/stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            return False
        return stat.rsplit(")", 1)[1].split()[0] != "Z"

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM the server (PID 1 of the namespace) for a clean shutdown, then end it all."""
        if self.process.poll() is None:
            try:
                os.kill(self.init_pid(timeout_s=1.0), 15)
                self.process.wait(timeout=timeout_s)
            except (RuntimeError, ProcessLookupError, subprocess.TimeoutExpired):
                # Killing unshare makes it SIGKILL its child (--kill-child), the namespace's
                # init; the kernel then kills everything left in the namespace.
                self.process.kill()
                self.process.wait()
