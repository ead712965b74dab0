"""Servers the pipeline starts itself and stops by PID: the local registry's docker-registry
and nginx (pipeline.registry.local) and the private Docker engine's containerd and dockerd
(pipeline.runtime.dockerd).

Each is started detached from our session with its output in a log file, waited for until it
answers, found again by the PID its directory's `state.json` records, and stopped by that PID
(SIGTERM, then SIGKILL). A PID is only taken to be the server while its kernel `comm` is the
server's name, so a reused PID is never signalled. Starting and stopping are serialised
between processes by an exclusive lock on `<directory>/.lock`.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from pipeline.errors import ToolError

log = logging.getLogger("pipeline.daemon")


@contextlib.contextmanager
def locked(root: Path) -> Iterator[None]:
    """Serialise start/stop between processes sharing the server directory `root`."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def spawn(argv: list[str], log_path: Path, *, env: Mapping[str, str] | None = None) -> int:
    """Start a long-running server detached from our session, its output appended to
    `log_path`; its PID."""
    log.info("$ %s", shlex.join(argv))
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, env=env
        )
    # The server outlives this Popen object (the CLI exits while it runs) and is stopped by
    # its PID (terminate), so Popen must not track it.
    proc.returncode = 0
    return proc.pid


def alive(pid: int, name: str) -> bool:
    """Whether `pid` runs the program `name` (its kernel comm), so a reused PID is ignored."""
    if pid <= 0:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # comm, not cmdline: nginx rewrites its argv area (process title) while starting.
    comm, rest = stat.split("(", 1)[1].rsplit(")", 1)
    # A zombie (our own unreaped child) has exited.
    return comm == name[:15] and rest.split()[0] != "Z"


def reap(pid: int) -> None:
    """Collect `pid`'s exit status if it is our exited child (a zombie otherwise)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def terminate(pid: int, name: str, *, timeout_s: float) -> None:
    """Stop `pid` if it still runs `name`: SIGTERM, then SIGKILL after `timeout_s`."""
    if not alive(pid, name):
        reap(pid)
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        reap(pid)
        if not alive(pid, name):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.1)
    reap(pid)


def tail(path: Path, lines: int = 5) -> str:
    """The last `lines` lines of a server's log, on one line."""
    if not path.exists():
        return "(no log)"
    return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:]) or "(empty log)"


def answers(sock: Path) -> bool:
    """Whether something accepts connections on the unix socket `sock`."""
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(str(sock))
        except OSError:
            return False
    return True


def wait_ready(
    pid: int,
    name: str,
    log_path: Path,
    ready: Callable[[], str | None],
    *,
    timeout_s: float,
    expected: str,
    interval_s: float = 0.1,
) -> None:
    """Until `ready()` returns None (else it says what it saw: "no answer", "HTTP 503"); a
    ToolError naming the log when `name` exits first or is not ready within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        if not alive(pid, name):
            reap(pid)
            raise ToolError(
                f"{name} exited while starting",
                expected=expected,
                actual="exited",
                hint=f"log {log_path}: {tail(log_path)}",
            )
        seen = ready()
        if seen is None:
            return
        last = seen
        time.sleep(interval_s)
    raise ToolError(
        f"{name} was not ready within {timeout_s:.0f} s",
        expected=expected,
        actual=last,
        hint=f"log {log_path}: {tail(log_path)}",
    )
