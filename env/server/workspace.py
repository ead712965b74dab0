"""The workspace of an episode: where the agent works and what a reset writes there.

The workspace is a tmpfs of the episode's sandbox (env/server/sandbox.py): each reset
gets an empty one, so nothing of the last episode is there to remove. The server
writes the case's three input files and INSTRUCTIONS.md into its ``repo`` directory,
owned by the sandbox user, through the sandbox's root (`Sandbox.path`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

DEFAULT_ROOT = Path("/workspace")
INSTRUCTIONS_NAME = "INSTRUCTIONS.md"


class WorkspaceError(RuntimeError):
    """The workspace could not be reset (an infrastructure fault, never a reward)."""


def repo_dir(root: Path) -> Path:
    """The agent's working directory (``cwd`` of every command)."""
    return root / "repo"


def home_dir(root: Path) -> Path:
    """The sandbox user's ``HOME``."""
    return root / "home"


def write_case_files(repo: Path, files: Mapping[str, str], instructions: str, uid: int, gid: int) -> None:
    """Write the input files and INSTRUCTIONS.md into the empty ``repo``, owned by ``uid``/``gid``."""
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
