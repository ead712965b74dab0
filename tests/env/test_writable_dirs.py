"""The scan for the directories the sandbox user can write (cleaned at every reset), on a
tree made here: what it finds, what it cannot reach, what it skips."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from env.server.workspace import SHARED_TEMP_DIRS, sandbox_writable_dirs

UID = GID = 2000

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="makes files owned by UID 2000 (needs root)")


def _dir(path: Path, mode: int, uid: int = 0, gid: int = 0) -> Path:
    path.mkdir(parents=True)
    os.chown(path, uid, gid)
    os.chmod(path, mode)
    return path


def test_finds_every_writable_directory_it_can_reach_and_nothing_else(tmp_path, capsys):
    root = _dir(tmp_path / "root", 0o755)
    found_here = {
        _dir(root / "open", 0o1777),                                    # world-writable, sticky
        _dir(root / "a" / "b" / "deep-open", 0o777),                    # below readable directories
        _dir(root / "group", 0o770, gid=GID),                           # writable by its group
        _dir(root / "open" / "inside-open", 0o777),                     # below a writable one
    }
    os.chmod(root / "a", 0o711)                                         # enterable, not listable
    os.chmod(root / "a" / "b", 0o711)
    _dir(root / "closed", 0o700)
    _dir(root / "closed" / "hidden-open", 0o777)                        # unreachable: parent root-only
    _dir(root / "readonly", 0o755)
    _dir(root / "other-group", 0o770, gid=GID + 1)                      # another group's
    _dir(root / "owned", 0o700, uid=UID, gid=GID)                       # the sandbox's own files
    _dir(root / "owned" / "x", 0o777, uid=UID, gid=GID)                 # ...go with their parent
    _dir(root / "excluded", 0o755)
    _dir(root / "excluded" / "open", 0o777)
    (root / "link-to-open").symlink_to(root / "open")                   # never followed
    (root / "file").write_text("not a directory")
    os.chmod(root / "file", 0o777)

    found = sandbox_writable_dirs(UID, GID, exclude=(root / "excluded",), start=root)

    assert found[:len(SHARED_TEMP_DIRS)] == SHARED_TEMP_DIRS
    assert set(found[len(SHARED_TEMP_DIRS):]) == found_here
    assert all(isinstance(p, Path) for p in found)
    assert "stopped after" not in capsys.readouterr().out


def test_a_huge_tree_stops_at_the_cap_and_says_so(tmp_path, capsys):
    root = _dir(tmp_path / "root", 0o755)
    for i in range(5):
        _dir(root / f"d{i}" / "open", 0o777)
    found = sandbox_writable_dirs(UID, GID, start=root, max_dirs=3)
    assert len(found) - len(SHARED_TEMP_DIRS) < 5
    assert "stopped after 3 directories" in capsys.readouterr().out
