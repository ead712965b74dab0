"""Which run owns what it left on disk, whether that run is gone, and the test pause hook.

A release marks what it starts or stages (the local registry's state, a staging
directory, a check container's label) with its owner: its PID and the PID's start time
(field 22 of /proc/<pid>/stat, in clock ticks since boot), so a reused PID is never taken
for the run that died. The next release removes or stops what an owner that is gone left
behind, and says so.

`pause_at(point)` is the one place that reads `RELEASE_TEST_PAUSE_AT` (a point, or several
separated by commas): when it names `point`, the process says so on stderr and waits, so
tests can SIGKILL a release at each stage boundary and inside the install of its records.
SIGUSR1 lets it go on to the next point: what a kill leaves on disk is what is there while it
waits, so one release can be looked at in several such states before it is killed in the last.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pipeline.progress import say

PAUSE_ENV = "RELEASE_TEST_PAUSE_AT"


def _start_time(pid: int) -> int | None:
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    rest = stat.rsplit(")", 1)[1].split()
    # rest[0] is field 3 (state); field 22 (starttime) is rest[19].
    return None if rest[0] in ("Z", "X") else int(rest[19])


@dataclass(frozen=True)
class Owner:
    """A process, named so that a reused PID does not pass for it."""

    pid: int
    start: int

    def to_json(self) -> dict:
        return {"pid": self.pid, "start": self.start}

    @classmethod
    def from_json(cls, raw: object) -> Owner | None:
        try:
            return cls(int(raw["pid"]), int(raw["start"]))  # type: ignore[index]
        except (TypeError, KeyError, ValueError):
            return None

    def label(self) -> str:
        return f"{self.pid}-{self.start}"

    @classmethod
    def from_label(cls, label: str) -> Owner | None:
        pid, _, start = label.partition("-")
        return cls(int(pid), int(start)) if pid.isdigit() and start.isdigit() else None

    @property
    def alive(self) -> bool:
        return _start_time(self.pid) == self.start


def current() -> Owner:
    """This process."""
    pid = os.getpid()
    start = _start_time(pid)
    assert start is not None
    return Owner(pid, start)


def pause_at(point: str) -> None:
    """Wait here for SIGKILL, or SIGUSR1 to go on, when RELEASE_TEST_PAUSE_AT names `point`
    (tests only)."""
    if point not in os.environ.get(PAUSE_ENV, "").split(","):
        return
    resumed = []
    previous = signal.signal(signal.SIGUSR1, lambda *_: resumed.append(True))
    try:
        say(f"paused at {point} ({PAUSE_ENV}): waiting for SIGKILL, or SIGUSR1 to go on")
        # A short sleep, not signal.pause(): the signal may reach another thread, and the
        # main thread runs the handler only once it wakes.
        while not resumed:
            time.sleep(0.05)
    finally:
        signal.signal(signal.SIGUSR1, previous)


# What a process names by its PID while it writes, and removes when it is done: a layer
# being compressed (`.layer-<pid>.tmp`), a layout's file (`.<name>.<pid>.tmp`), a download
# (`.<name>.<pid>-<thread>.part`).
_PID_TEMP = re.compile(r"^\.(?:layer-(\d+)\.tmp|.+\.(\d+)\.tmp|.+\.(\d+)-\d+\.part)$")


def pid_alive(pid: int) -> bool:
    return _start_time(pid) is not None


def dead_temp_files(roots: Iterable[Path], *, skip: Iterable[Path] = ()) -> list[Path]:
    """The PID-named temporary files under `roots` whose process is gone (links and the
    `skip` trees not followed)."""
    skipped = {Path(p) for p in skip}
    found = []
    for root in roots:
        if not Path(root).is_dir() or Path(root).is_symlink():
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if Path(dirpath, d) not in skipped and not Path(dirpath, d).is_symlink()]
            for name in filenames:
                m = _PID_TEMP.match(name)
                if m and not pid_alive(int(next(g for g in m.groups() if g))):
                    found.append(Path(dirpath, name))
    return sorted(found)


def remove_dead_temp_files(roots: Iterable[Path], *, skip: Iterable[Path] = ()) -> str | None:
    """Remove `dead_temp_files`; the line that says so, or None."""
    found = dead_temp_files(roots, skip=skip)
    for path in found:
        path.unlink(missing_ok=True)
    if not found:
        return None
    return (
        f"removed {len(found)} temporary file(s) of processes that are gone: "
        f"{', '.join(str(p) for p in found[:3])}{' ...' if len(found) > 3 else ''}"
    )
