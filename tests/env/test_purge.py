"""Deleting what the sandbox left, whatever its shape: non-recursive, bounded, and honest.

These drive env.server.purge directly on trees made in the test's own temporary
directory (the server-level versions are in test_server_reset_attacks.py).
"""

from __future__ import annotations

import os
import random
import socket
import stat
import time
from pathlib import Path

import pytest

from env.server.purge import TRASH_PREFIX, PurgeError, purge

FAR = 60.0


def _names(directory: Path) -> list[bytes]:
    return sorted(os.listdir(os.fsencode(directory)))


def _deep(base: Path, levels: int) -> None:
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(levels):
        os.mkdir("d", dir_fd=fd)
        fd_next = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = fd_next
    os.close(fd)


def _purge_all(directory: Path, deadline_s: float = FAR) -> int:
    return purge(directory, _names(directory), deadline=time.monotonic() + deadline_s)


def test_ten_thousand_levels_deep(tmp_path):
    (tmp_path / "tree").mkdir()
    _deep(tmp_path / "tree", 10_000)
    assert _purge_all(tmp_path) == 10_001
    assert _names(tmp_path) == []


@pytest.mark.slow
def test_one_hundred_thousand_files(tmp_path):
    wide = tmp_path / "wide"
    wide.mkdir()
    fd = os.open(wide, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(100_000):
            os.close(os.open(str(i), os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
    finally:
        os.close(fd)
    assert _purge_all(tmp_path) == 100_001
    assert _names(tmp_path) == []


def test_links_loops_special_files_and_odd_names(tmp_path):
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "keep").write_text("must survive")
    box = tmp_path / "box"
    box.mkdir()
    (box / "file").write_text("x")
    os.link(box / "file", box / "hard")
    os.symlink("loop-b", box / "loop-a")
    os.symlink("loop-a", box / "loop-b")
    os.symlink(".", box / "self")
    os.symlink(outside, box / "outside-dir")
    os.symlink(outside / "keep", box / "outside-file")
    os.mkfifo(box / "fifo")
    # Bound through the directory's descriptor: a socket path has at most 107 bytes,
    # and a temporary directory can be deeper than that.
    fd = os.open(box, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(f"/proc/self/fd/{fd}/sock")
    finally:
        os.close(fd)
    assert stat.S_ISSOCK(os.lstat(box / "sock").st_mode)
    os.mkdir(os.fsencode(box) + b"/bad\xff\nname")
    (Path(os.fsdecode(os.fsencode(box) + b"/bad\xff\nname")) / "inner\n").write_text("y")
    _purge_all(tmp_path)
    assert _names(tmp_path) == []
    assert (outside / "keep").read_text() == "must survive"


def test_unreadable_directories(tmp_path):
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    (deep / "x").write_text("x")
    for path in (deep, deep.parent, deep.parent.parent):
        os.chmod(path, 0)
    _purge_all(tmp_path)
    assert _names(tmp_path) == []


def test_past_the_deadline_it_says_what_is_left_and_the_next_purge_finishes(tmp_path):
    (tmp_path / "tree").mkdir()
    _deep(tmp_path / "tree", 50)
    with pytest.raises(PurgeError, match="deadline passed") as caught:
        _purge_all(tmp_path, deadline_s=-1)
    assert "next reset" in str(caught.value)
    [trash] = _names(tmp_path)
    assert trash.startswith(TRASH_PREFIX)
    info = os.lstat(tmp_path / os.fsdecode(trash))
    assert stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.geteuid()
    _purge_all(tmp_path)
    assert _names(tmp_path) == []


def test_random_trees_across_many_purges(tmp_path):
    seed = int(os.environ.get("ARENA_PURGE_SEED", random.SystemRandom().randrange(2**32)))
    rng = random.Random(seed)
    for round_ in range(10):
        _random_tree(rng, tmp_path, budget=150)
        _purge_all(tmp_path)
        assert _names(tmp_path) == [], f"seed {seed}, round {round_}"


def _random_tree(rng: random.Random, root: Path, budget: int) -> None:
    """Random dirs, files, links, FIFOs, odd names and modes under ``root``."""
    dirs = [os.fsencode(root)]
    for i in range(budget):
        parent = rng.choice(dirs)
        name = parent + b"/" + rng.choice([b"n%d" % i, b"\xff%d\n" % i, b" %d " % i])
        kind = rng.choice(["dir", "dir", "file", "hard", "sym", "fifo", "deep", "chmod"])
        if kind == "dir":
            os.mkdir(name)
            dirs.append(name)
        elif kind == "file":
            with open(name, "wb") as out:
                out.write(b"x" * rng.randrange(100))
        elif kind == "hard":
            with open(name, "wb"):
                pass
            os.link(name, name + b"-link")
        elif kind == "sym":
            os.symlink(rng.choice([b"/", b"..", name, rng.choice(dirs)]), name)
        elif kind == "fifo":
            os.mkfifo(name)
        elif kind == "deep":
            os.mkdir(name)
            _deep(Path(os.fsdecode(name)), rng.randrange(1, 40))
        else:
            os.mkdir(name)
            os.chmod(name, rng.choice([0, 0o100, 0o400]))
