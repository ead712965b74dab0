"""Run one agent command in the episode's sandbox as UID/GID 2000, bounded in time, output and resources."""

from __future__ import annotations

import grp
import os
import pwd
import selectors
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from env.server.sandbox import Command, Sandbox

SANDBOX_UID = 2000
SANDBOX_GID = 2000
SANDBOX_NAME = "arena"
SHELL = "/bin/bash"
DEFAULT_TIMEOUT_S = 60.0
OUTPUT_TAIL_BYTES = 12_000
TIMEOUT_EXIT_CODE = 124  # what coreutils `timeout` reports, so agents recognise it

# Fixed values, not inherited: nothing of the server's environment reaches the agent.
SCRUBBED_PATH = "/usr/local/bin:/usr/bin:/bin"
SCRUBBED_LANG = "C.UTF-8"

# When the container's memory limit is reached, the kernel's OOM killer picks the
# sandbox's processes first, never the server.
OOM_SCORE_ADJ = 1000

# Soft = hard limits, set by the sandbox's PID 1 before it drops to UID 2000
# (env/server/nsinit.py). The process count stops fork bombs (counted per UID in the
# episode's user namespace); the file size stops runaway writes (SIGXFSZ); the address
# space keeps one process from eating the host. Each is far above what
# `python3 script.py` needs.
RESOURCE_LIMITS: tuple[tuple[str, int], ...] = (
    ("nproc", 256),
    ("fsize", 256 * 1024 * 1024),
    ("nofile", 1024),
    ("as", 4 * 1024 * 1024 * 1024),
    ("core", 0),
)

_READ_CHUNK = 65_536
# After the command exits, background children may keep the pipe open; output that
# is already buffered is still collected, but we do not wait for them to close it.
_DRAIN_AFTER_EXIT_S = 0.05
# How long a killed command's end may take to be reported.
KILL_WAIT_S = 10.0


@dataclass(frozen=True)
class ShellResult:
    """The outcome of one command: its output tail, exit code and what was cut or killed."""

    output: str
    exit_code: int
    timed_out: bool
    truncated: bool
    total_bytes: int


def sandbox_environment(home: Path) -> dict[str, str]:
    """The complete environment a command sees."""
    return {"PATH": SCRUBBED_PATH, "HOME": str(home), "LANG": SCRUBBED_LANG}


def ensure_sandbox_identity(
    uid: int = SANDBOX_UID, gid: int = SANDBOX_GID, home: Path = Path("/workspace/home")
) -> None:
    """Create the sandbox group and user if the system has no entry for them.

    The UID drop itself works with bare numbers; the names make `id`, `ls -l` and
    `whoami` readable for the agent. Without groupadd/useradd the numbers are used as is.
    """
    try:
        grp.getgrgid(gid)
    except KeyError:
        if shutil.which("groupadd"):
            subprocess.run(["groupadd", "-g", str(gid), SANDBOX_NAME], check=True, capture_output=True)
    try:
        pwd.getpwuid(uid)
    except KeyError:
        if shutil.which("useradd"):
            subprocess.run(
                ["useradd", "-u", str(uid), "-g", str(gid), "-M", "-d", str(home), "-s", SHELL, SANDBOX_NAME],
                check=True,
                capture_output=True,
            )


def check_sandbox_tools() -> None:
    """Raise FileNotFoundError naming what is missing if the UID drop or limits cannot be applied."""
    missing = [tool for tool in (SHELL,) if not os.access(tool, os.X_OK)]
    if missing:
        raise FileNotFoundError(f"the sandbox needs {', '.join(missing)} (Debian package bash)")


def run_command(
    sandbox: Sandbox,
    command: str,
    *,
    cwd: Path,
    home: Path,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> ShellResult:
    """Run ``command`` with bash as the sandbox user in ``cwd`` and return its combined output tail.

    The command gets its own session and process group; on timeout the whole group is
    killed. Only the last ``OUTPUT_TAIL_BYTES`` bytes of stdout+stderr are kept.
    """
    proc, fd = sandbox.run(command, cwd=cwd, env=sandbox_environment(home))
    try:
        return _collect(proc, fd, timeout_s)
    finally:
        os.close(fd)


def _collect(proc: Command, fd: int, timeout_s: float) -> ShellResult:
    tail = bytearray()
    total = 0
    timed_out = False
    deadline = time.monotonic() + timeout_s
    exited_at: float | None = None
    os.set_blocking(fd, False)
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        # The command's end is a message from the sandbox: it wakes the loop as output does.
        sel.register(proc.sandbox.control, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is None and now >= deadline:
                timed_out = True
                proc.kill_group()
                proc.wait(timeout=KILL_WAIT_S)
                exited_at = now
            if exited_at is not None and now - exited_at > _DRAIN_AFTER_EXIT_S:
                break
            wait_s = _DRAIN_AFTER_EXIT_S if exited_at is not None else min(0.02, deadline - now)
            if not any(key.fd == fd for key, _ in sel.select(timeout=max(wait_s, 0.0))):
                continue
            chunk = _read_available(fd)
            if chunk is None:
                break
            total += len(chunk)
            tail += chunk
            if len(tail) > 2 * OUTPUT_TAIL_BYTES:
                del tail[: len(tail) - OUTPUT_TAIL_BYTES]
    if not timed_out:
        # The pipe can reach end of file before exit (the command closed its output).
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            timed_out = True
            proc.kill_group()
    returncode = proc.wait(timeout=KILL_WAIT_S)
    truncated = total > OUTPUT_TAIL_BYTES
    text = bytes(tail[-OUTPUT_TAIL_BYTES:]).decode("utf-8", errors="replace")
    notes = []
    if truncated:
        notes.append(f"[output truncated: showing the last {OUTPUT_TAIL_BYTES} of {total} bytes]\n")
    if timed_out:
        notes.append(f"\n[timed out after {timeout_s:g} s: the command's process group was killed]\n")
        exit_code = TIMEOUT_EXIT_CODE
    else:
        exit_code = returncode if returncode >= 0 else 128 - returncode
    if truncated:
        text = notes.pop(0) + text
    text += "".join(notes)
    return ShellResult(output=text, exit_code=exit_code, timed_out=timed_out, truncated=truncated, total_bytes=total)


def _read_available(fd: int) -> bytes | None:
    """Read what the pipe holds now; None at end of file."""
    data = bytearray()
    while True:
        try:
            chunk = os.read(fd, _READ_CHUNK)
        except BlockingIOError:
            return bytes(data)
        if not chunk:
            return bytes(data) if data else None
        data += chunk
