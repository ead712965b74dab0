"""Reset isolation: end every sandbox process and rebuild /workspace from the case's inputs.

Nothing an earlier episode did survives a reset: its processes are killed, the whole
workspace is discarded, the files it left in any directory it could write to are
removed (those directories are found by scanning the filesystem, see
`sandbox_writable_dirs`) and its System V IPC objects are removed. Deletion is
non-recursive and bounded in time (env/server/purge.py); a reset that cannot clean
raises WorkspaceError saying what is left.
"""

from __future__ import annotations

import os
import signal
import stat
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path

from env.server.purge import PurgeError, is_trash, purge

DEFAULT_ROOT = Path("/workspace")
INSTRUCTIONS_NAME = "INSTRUCTIONS.md"
# Always cleaned, even if a scan missed them: the usual shared temporary directories
# (/dev/mqueue holds the POSIX message queues, /dev/shm POSIX shared memory).
SHARED_TEMP_DIRS = (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"), Path("/dev/mqueue"))
# Pseudo filesystems the scan does not enter: nothing there is a place to leave files.
_SCAN_SKIP = (Path("/proc"), Path("/sys"))
# The scan of the filesystem for writable directories runs once per server; on a host
# with a huge tree it stops after this many directories and says so.
SCAN_MAX_DIRS = 500_000
# How long one reset may spend deleting before it reports what is left.
PURGE_BUDGET_S = 30.0

# A fork bomb may spawn new processes while we kill; rescan until a scan finds none.
_KILL_ROUNDS = 200
_ZOMBIE_WAIT_S = 2.0


class WorkspaceError(RuntimeError):
    """The workspace could not be reset (an infrastructure fault, never a reward)."""


def repo_dir(root: Path) -> Path:
    """The agent's working directory (``cwd`` of every command)."""
    return root / "repo"


def home_dir(root: Path) -> Path:
    """The sandbox user's ``HOME``."""
    return root / "home"


def sandbox_pids(uid: int, *, zombies: bool = False) -> list[int]:
    """PIDs of processes whose real, effective or saved UID is ``uid``: the live ones, or
    with ``zombies`` the exited ones nobody has waited for yet."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as status:
                text = status.read()
        except OSError:
            continue  # exited while we scanned
        uids = _field(text, b"Uid:")
        if str(uid).encode() in uids[:3] and (_field(text, b"State:")[:1] == [b"Z"]) == zombies:
            pids.append(int(name))
    return pids


def _field(status: bytes, key: bytes) -> list[bytes]:
    start = status.find(key)
    if start < 0:
        return []
    end = status.find(b"\n", start)
    return status[start + len(key): end if end >= 0 else None].split()


def kill_sandbox_processes(uid: int) -> int:
    """SIGKILL every process of ``uid`` until none is left; return how many were signalled."""
    signalled = 0
    for _ in range(_KILL_ROUNDS):
        pids = sandbox_pids(uid)
        if not pids:
            _wait_for_zombies(uid)
            return signalled
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                signalled += 1
            except ProcessLookupError:
                pass
        _reap_orphans()
        time.sleep(0.001)
    raise WorkspaceError(
        f"processes of UID {uid} still alive after {_KILL_ROUNDS} kill rounds: {sandbox_pids(uid)[:20]}"
    )


def _wait_for_zombies(uid: int) -> None:
    # Killed processes count against the sandbox's process limit until they are waited
    # for; a parent that dies after its children hands them to init (or to us, as PID 1)
    # a moment later. Wait (bounded) until none is left, so the next episode's first
    # fork cannot fail on the previous episode's corpses.
    deadline = time.monotonic() + _ZOMBIE_WAIT_S
    while True:
        _reap_orphans()
        if not sandbox_pids(uid, zombies=True) or time.monotonic() > deadline:
            return
        time.sleep(0.005)


def _reap_orphans() -> None:
    # When the server is PID 1 (a container without an init), killed background
    # processes are re-parented to it and stay zombies, still counting against the
    # sandbox's process limit, until it waits for them.
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def sandbox_writable_dirs(uid: int, gid: int, *, exclude: tuple[Path, ...] = (),
                          start: Path = Path("/"), max_dirs: int = SCAN_MAX_DIRS) -> tuple[Path, ...]:
    """Every directory ``uid``/``gid`` (without supplementary groups) can create entries in
    but does not own, reachable by it, plus SHARED_TEMP_DIRS; ``exclude`` trees are skipped.

    Breadth-first and iterative (no depth limit); only directories the sandbox can
    enter are entered, so root-only trees (container storage, the server's code) are
    not walked. Directories the sandbox owns are its own files and go with their parent.
    """
    # Paths as strings while walking (a Path per entry took two thirds of the scan's time).
    skip = {os.fspath(p) for p in (*_SCAN_SKIP, *exclude)}
    found: list[Path] = []
    pending = deque([os.fspath(start)])
    seen = 0
    while pending and seen < max_dirs:
        directory = pending.popleft()
        seen += 1
        try:
            with os.scandir(directory) as listing:
                entries = list(listing)
        except OSError:
            continue
        for entry in entries:
            try:
                if not entry.is_dir(follow_symlinks=False) or entry.path in skip:
                    continue
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if info.st_uid == uid:
                continue
            if _sandbox_may(info, gid, write=True):
                found.append(Path(entry.path))
            if _sandbox_may(info, gid, write=False):
                pending.append(entry.path)
    if pending:
        print(f"arena: the scan for directories UID {uid} can write stopped after {max_dirs} "
              f"directories; deeper ones are not cleaned at reset", flush=True)
    return tuple(dict.fromkeys([*SHARED_TEMP_DIRS, *found]))


def _sandbox_may(info: os.stat_result, gid: int, *, write: bool) -> bool:
    bits = (stat.S_IWOTH | stat.S_IXOTH) if write else stat.S_IXOTH
    group_bits = (stat.S_IWGRP | stat.S_IXGRP) if write else stat.S_IXGRP
    if info.st_gid == gid:
        return info.st_mode & group_bits == group_bits
    return info.st_mode & bits == bits


def remove_sandbox_files(uid: int, dirs: tuple[Path, ...] = SHARED_TEMP_DIRS, *,
                         deadline: float | None = None) -> int:
    """Remove the entries owned by ``uid`` (and unfinished purges' trash) from ``dirs``;
    return how many were removed. WorkspaceError if some could not be, past ``deadline``."""
    deadline = deadline if deadline is not None else time.monotonic() + PURGE_BUDGET_S
    removed = 0
    problems = []
    for directory in dirs:
        try:
            with os.scandir(directory) as entries:
                names = [os.fsencode(e.name) for e in entries if _left_by(e, uid)]
        except OSError:
            continue
        if not names:
            continue
        try:
            removed += purge(directory, names, deadline=deadline)
        except (PurgeError, OSError) as exc:
            problems.append(str(exc))
    if problems:
        raise WorkspaceError("reset could not remove the last episode's files: " + "; ".join(problems))
    return removed


def _left_by(entry: os.DirEntry, uid: int) -> bool:
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError:
        return False
    return info.st_uid == uid or is_trash(os.fsencode(entry.name), info)


def rebuild_workspace(
    root: Path, files: Mapping[str, str], instructions: str, uid: int, gid: int
) -> Path:
    """Empty ``root`` and refill it with the input files and INSTRUCTIONS.md; return the repo dir.

    ``root`` itself stays root-owned so the agent cannot replace ``repo`` with a link;
    ``repo`` and ``home`` and every file written are owned by ``uid``/``gid``.
    """
    if root.is_symlink() or (root.exists() and not root.is_dir()):
        raise WorkspaceError(f"workspace root {root} is not a directory")
    # The root may be a mount point (a volume for the workspace), so it is emptied, not removed.
    root.mkdir(mode=0o755, parents=True, exist_ok=True)
    with os.scandir(root) as entries:
        names = [os.fsencode(e.name) for e in entries]
    if names:
        try:
            purge(root, names, deadline=time.monotonic() + PURGE_BUDGET_S)
        except (PurgeError, OSError) as exc:
            raise WorkspaceError(f"reset could not empty the workspace: {exc}") from exc
    os.chown(root, 0, 0)
    os.chmod(root, 0o755)
    repo = repo_dir(root)
    for directory, mode in ((repo, 0o755), (home_dir(root), 0o700)):
        directory.mkdir(mode=mode)
        os.chown(directory, uid, gid)
        os.chmod(directory, mode)
    contents = dict(files)
    if INSTRUCTIONS_NAME in contents or len(contents) != 3:
        raise WorkspaceError(
            f"a case must have exactly three input files besides {INSTRUCTIONS_NAME}, got {sorted(contents)}"
        )
    contents[INSTRUCTIONS_NAME] = instructions
    for name, text in contents.items():
        if os.path.basename(name) != name or name in ("", ".", ".."):
            raise WorkspaceError(f"input file name {name!r} is not a plain file name")
        _write_owned(repo / name, text, uid, gid)
    return repo


def _write_owned(path: Path, text: str, uid: int, gid: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.fchown(fd, uid, gid)
        os.fchmod(fd, 0o644)
        data = text.encode("utf-8")
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
    finally:
        os.close(fd)
