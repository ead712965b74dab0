"""Delete trees the sandbox made, whatever their shape, without recursion and in bounded time.

A recursive walk (shutil.rmtree) dies on a tree 3,000 levels deep, and any path-based
walk fails past PATH_MAX. Here every directory to delete is first renamed into a
root-only staging directory ("trash") next to it, on the same filesystem; emptying a
staged directory renames its subdirectories into the trash too and unlinks the rest.
Each directory is visited once, with two file descriptors open, whatever the depth.
Symlinks are unlinked, never followed; FIFOs, sockets and hard links are just names;
names are handled as bytes (newlines, invalid UTF-8); directories made unreadable by
their owner are opened as root or chmod-ed first. Nothing is crossed onto another
filesystem. Past the deadline the work stops and PurgeError says what is left; the
trash stays, root-only, and is finished by the next purge of the same directory.
"""

from __future__ import annotations

import os
import secrets
import stat
import time
from collections import deque
from collections.abc import Iterable
from pathlib import Path

TRASH_PREFIX = b".arena-reset-"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class PurgeError(RuntimeError):
    """Some entries could not be removed (deadline passed, or a filesystem refused)."""


def is_trash(name: bytes, info: os.stat_result | None) -> bool:
    """Whether an entry is a staging directory left by an unfinished purge (root-owned)."""
    return (info is not None and name.startswith(TRASH_PREFIX) and stat.S_ISDIR(info.st_mode)
            and info.st_uid == 0)


def purge(directory: Path, names: Iterable[bytes], *, deadline: float) -> int:
    """Remove the entries ``names`` of ``directory`` (any type, any depth); return how many
    directory entries were removed. Raise PurgeError naming what is left past ``deadline``."""
    parent = os.open(directory, _DIR_FLAGS)
    try:
        job = _Purge(parent, deadline)
        try:
            for name in names:
                if is_trash(name, _lstat(parent, name)):
                    job.adopt(name)
                else:
                    job.remove_or_stage(parent, name)
            job.empty_trash()
        finally:
            job.close()
        if job.failures:
            raise PurgeError(f"{directory}: could not remove {len(job.failures)} entries, e.g. "
                             f"{job.failures[:3]}; what is left stays in a root-only "
                             f"{TRASH_PREFIX.decode()}* directory, removed by the next reset")
        return job.removed
    finally:
        os.close(parent)


def _lstat(dir_fd: int, name: bytes) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


class _Purge:
    """One purge of one directory: its lazily made trash and the directories staged there."""

    def __init__(self, parent: int, deadline: float) -> None:
        self.parent, self.deadline = parent, deadline
        self.device = os.fstat(parent).st_dev
        self.trash: int | None = None
        self.trash_name = b""
        self.staged: deque[tuple[int, bytes]] = deque()
        self.counter = 0
        self.removed = 0
        self.failures: list[str] = []

    def _trash_fd(self) -> int:
        # Made only when a directory has to be staged: some filesystems (mqueue) hold
        # no directories, and plain files need no staging.
        if self.trash is None:
            self.trash_name = TRASH_PREFIX + secrets.token_hex(8).encode()
            os.mkdir(self.trash_name, 0o700, dir_fd=self.parent)
            self.trash = os.open(self.trash_name, _DIR_FLAGS, dir_fd=self.parent)
        return self.trash

    def adopt(self, name: bytes) -> None:
        """Finish an earlier purge's trash: it is a staged directory like any other."""
        self.staged.append((self.parent, name))

    def remove_or_stage(self, dir_fd: int, name: bytes) -> None:
        """Unlink a non-directory, or move a directory into the trash."""
        info = _lstat(dir_fd, name)
        if info is None:
            return
        try:
            if not stat.S_ISDIR(info.st_mode):
                os.unlink(name, dir_fd=dir_fd)
                self.removed += 1
                return
            if info.st_dev != self.device:
                self.failures.append(f"{name!r} is a mount point")
                return
            trash = self._trash_fd()
            self.counter += 1
            staged_name = b"%d" % self.counter
            os.rename(name, staged_name, src_dir_fd=dir_fd, dst_dir_fd=trash)
            self.staged.append((trash, staged_name))
        except FileNotFoundError:
            pass
        except OSError as exc:
            self.failures.append(f"{name!r}: {exc.strerror}")

    def empty_trash(self) -> None:
        while self.staged:
            if time.monotonic() > self.deadline:
                self.failures.append(f"deadline passed with {len(self.staged)} directories still to empty")
                return
            holder, name = self.staged.popleft()
            try:
                fd = _open_dir(holder, name)
            except OSError as exc:
                self.failures.append(f"staged {name!r}: {exc.strerror}")
                continue
            try:
                with os.scandir(fd) as entries:
                    children = [os.fsencode(e.name) for e in entries]
                for child in children:
                    self.remove_or_stage(fd, child)
            finally:
                os.close(fd)
            self._remove_dir(holder, name)

    def _remove_dir(self, holder: int, name: bytes) -> None:
        try:
            os.rmdir(name, dir_fd=holder)
            self.removed += 1
        except OSError as exc:
            self.failures.append(f"staged {name!r}: {exc.strerror}")

    def close(self) -> None:
        if self.trash is not None:
            os.close(self.trash)
            self.trash = None
            if not self.failures:
                os.rmdir(self.trash_name, dir_fd=self.parent)


def _open_dir(trash: int, name: bytes) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=trash)
    except PermissionError:
        # Made unreadable (chmod 000) by its owner and we lack CAP_DAC_OVERRIDE: it sits in
        # the root-only trash now, so nobody can swap it for a link before the chmod.
        os.chmod(name, 0o700, dir_fd=trash)
        return os.open(name, _DIR_FLAGS, dir_fd=trash)
