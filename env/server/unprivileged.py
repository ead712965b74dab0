"""The unprivileged mode's files: where an episode may write, and how a reset takes it away.

Without namespaces of its own (a runtime that refuses user namespaces, such as Docker's
default seccomp profile), an episode shares the container's filesystem. So:

- nothing is writable by the sandbox UID but the episode's own directories, all under the
  workspace: ``repo`` (the working directory), ``home`` and ``tmp``. At start the server
  takes the write bit for others off the shared scratch directories (`lock_scratch`) and
  points ``/tmp`` and ``/var/tmp`` at the episode's ``tmp`` with a root-owned symbolic
  link where it can (an empty directory, not a mount point);
- a reset, once the episode's processes are gone (killed by UID), renames those three
  directories into ``.retired/`` (root-only) and makes them anew: a few system calls,
  whatever the agent left there. A thread removes the old ones in the background with
  ``rm``; past MAX_REMOVING batches waiting, a reset waits for it.
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
import threading
from pathlib import Path

from env.server.sandbox import SandboxError

# The episode's own directories under the workspace, and their modes.
EPISODE_DIRS = (("repo", 0o755), ("home", 0o700), ("tmp", 0o700))
RETIRED = ".retired"
# Retired batches waiting for removal, at most; and how long after a reset the removal
# starts.
MAX_REMOVING = 8
REMOVE_AFTER_S = 0.5
# Pointed at the episode's tmp where possible; otherwise, like the rest, locked.
LINKED_TO_TMP = ("/tmp", "/var/tmp")
# Shared beyond the scratch directories: a file made in an mqueue filesystem is a queue.
ALSO_LOCKED = ("/dev/mqueue",)


def lock_scratch(scratch: tuple[str, ...], workspace: Path) -> list[str]:
    """Make the shared scratch directories unwritable by the sandbox UID; what was done, one
    line each. SandboxError naming the path if one stays writable by others."""
    done = []
    tmp = workspace / "tmp"
    for path in scratch:
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(info.st_mode):
            if path in LINKED_TO_TMP and os.readlink(path) == str(tmp) and info.st_uid == 0:
                continue  # done by this container's earlier start
            raise SandboxError(
                f"{path} is a symbolic link to {os.readlink(path)}; expected a directory "
                f"or a link to {tmp}: rebuild the image"
            )
        if path in LINKED_TO_TMP:
            try:
                os.rmdir(path)
                os.symlink(tmp, path)
                done.append(f"{path} -> {tmp}")
                continue
            except OSError:
                pass  # not empty, or a mount point: lock it as the others
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o002:
            try:
                os.chmod(path, mode & ~0o1022)
            except OSError as exc:
                raise SandboxError(
                    f"{path} is writable by every user and cannot be locked ({exc.strerror}); "
                    "the episode's files would outlive its reset"
                ) from exc
            done.append(f"{path} mode {mode:o} -> {mode & ~0o1022:o}")
    return done


def lock_home(uid: int, gid: int, workspace: Path) -> list[str]:
    """Take the sandbox user's home directory of the system (its passwd entry's, when it is
    outside the workspace: a base image's user, say) away from it, with everything below:
    owned by root, writable by nobody else. Its files would otherwise outlive every reset.
    What was done, one line each."""
    try:
        home = Path(pwd.getpwuid(uid).pw_dir)
    except KeyError:
        return []
    if not home.is_dir() or home.is_symlink() or home == workspace or workspace in home.parents:
        return []
    changed = 0
    for directory, dirs, files in os.walk(home):
        for path in [directory, *(os.path.join(directory, name) for name in dirs + files)]:
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                if info.st_uid == uid or info.st_gid == gid:
                    os.lchown(path, 0, 0)
                    changed += 1
                continue
            mode = stat.S_IMODE(info.st_mode)
            if info.st_uid == uid or info.st_gid == gid or mode & 0o022:
                os.lchown(path, 0, 0)
                os.chmod(path, mode & ~0o7022)
                changed += 1
    return [f"{home} (the sandbox user's home: {changed} entries now root's)"] if changed else []


class EpisodeFiles:
    """The episode's directories under ``workspace``, renamed away and made anew per reset."""

    def __init__(self, workspace: Path, uid: int, gid: int) -> None:
        self.workspace = workspace
        self.uid = uid
        self.gid = gid
        self._retired = workspace / RETIRED
        self._count = 0
        os.makedirs(self._retired, mode=0o700, exist_ok=True)
        os.chown(self._retired, 0, 0)
        os.chmod(self._retired, 0o700)
        self._pending = threading.Condition()
        # Retired batches not yet removed (an earlier server's leftovers count as one).
        self._waiting = 1 if self._leftovers() else 0
        self._closed = False
        self.retire()
        self._remover = threading.Thread(target=self._remove_loop, name="arena-remover", daemon=True)
        self._remover.start()

    def retire(self) -> None:
        """Rename the episode's directories into `.retired/` and start removing them."""
        batch = self._retired / f"{os.getpid()}-{self._count}"
        self._count += 1
        moved = False
        for name, _ in EPISODE_DIRS:
            source = self.workspace / name
            if os.path.lexists(source):
                if not moved:
                    os.mkdir(batch, 0o700)
                    moved = True
                os.rename(source, batch / name)
        if moved:
            with self._pending:
                self._waiting += 1
                self._pending.notify_all()
                # An agent that leaves a large tree every episode must not pile them up:
                # past MAX_REMOVING batches, a reset waits for the remover.
                self._pending.wait_for(lambda: self._waiting <= MAX_REMOVING)

    def fresh(self) -> None:
        """Make the episode's directories, empty and owned by the sandbox UID."""
        for name, mode in EPISODE_DIRS:
            path = self.workspace / name
            try:
                os.mkdir(path, mode)
            except FileExistsError as exc:
                raise SandboxError(
                    f"{path} exists at the start of an episode; expected it renamed away by the last reset"
                ) from exc
            os.chown(path, self.uid, self.gid)
            os.chmod(path, mode)

    def _remove_loop(self) -> None:
        """Remove what `.retired/` holds whenever a reset put something there (an earlier
        server's leftovers first), with `rm` outside the server's interpreter."""
        while True:
            with self._pending:
                self._pending.wait_for(lambda: self._waiting > 0 or self._closed)
                if self._closed and not self._waiting:
                    return
                if not self._closed and self._waiting < MAX_REMOVING:
                    # Off the reset's path: the next episode starts now, and a burst of
                    # resets leaves one removal for all of them.
                    self._pending.wait(REMOVE_AFTER_S)
                taken = self._waiting
            paths = [str(self._retired / name) for name in self._leftovers()]
            if paths:
                subprocess.run(
                    ["rm", "-rf", "--one-file-system", "--", *paths],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    check=False,
                )
            with self._pending:
                self._waiting -= taken
                self._pending.notify_all()

    def _leftovers(self) -> list[str]:
        return [entry.name for entry in os.scandir(self._retired)]

    def close(self) -> None:
        """Wait for the removals under way."""
        with self._pending:
            self._closed = True
            self._pending.notify_all()
        self._remover.join()
