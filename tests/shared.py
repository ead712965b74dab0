"""Expensive results made once per test run and read by every test that needs them.

The suite runs in several pytest-xdist workers (pyproject.toml's addopts), each a
pytest session of its own: a session-scoped fixture would be made once per worker.
`once(tmp_path_factory, name, make)` makes a directory once per *run* instead: the
first worker to ask calls `make(directory)` under a file lock while the others wait
for it, then everyone reads the same directory. A failed `make` is recorded, so the
other workers fail at once with its message instead of repeating it.

The directory lives in the run's own temporary root (the controller's basetemp, which
every worker's basetemp sits in), so two runs on one machine never share one, and
pytest removes it like any other temporary directory. Tests must treat it as
read-only: one that changes what it holds works on a copy (`copy_tree`).

Results that should outlive the run (the base build, keyed by its lock) use
`locked(path)` on a cache directory in the checkout instead. Either kind of fixture is
declared with `@shared_result` (a session fixture the scheduler knows to wait for).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest
from filelock import FileLock, Timeout


def shared_result(func):
    """A session fixture whose value is made once and waited for by every worker that needs
    it (`once`, or a `locked` cache). tests/conftest.py starts the first test that needs
    it early and the tests that wait for it later."""
    func.shared_result = True
    return pytest.fixture(scope="session")(func)


def run_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temporary directory this whole run (every xdist worker) shares."""
    base = tmp_path_factory.getbasetemp()
    # xdist gives each worker `<the controller's basetemp>/<worker id>`.
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold the inter-process lock `<path>.lock` (other workers, other runs of this checkout)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        yield


def once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]) -> Path:
    """`<run root>/shared/<name>`, made by `make` the first time any worker asks for it."""
    root = run_root(tmp_path_factory) / "shared"
    target, done, failed = root / name, root / f"{name}.done", root / f"{name}.failed"
    with locked(target):
        if failed.exists():
            pytest.fail(
                f"{name} (made once for every worker) failed in another worker:\n{failed.read_text()}", pytrace=False
            )
        if not done.exists():
            shutil.rmtree(target, ignore_errors=True)  # what a make that was stopped left
            target.mkdir(parents=True)
            try:
                make(target)
            except Exception as exc:
                failed.write_text(f"{type(exc).__name__}: {exc}"[-8000:])
                raise
            done.touch()
    return target


@contextmanager
def slot(tmp_path_factory: pytest.TempPathFactory | None, name: str, count: int) -> Iterator[None]:
    """Hold one of `count` slots called `name` for this run (`tmp_path_factory`'s), or with
    None for every run of this suite on the machine (two clones' runs at once): at most
    `count` holders at once, whatever the worker (for work that must not all start at once
    on two cores)."""
    root = MACHINE_SLOTS if tmp_path_factory is None else run_root(tmp_path_factory) / "slots"
    root.mkdir(exist_ok=True)
    while True:
        for index in range(count):
            lock = FileLock(str(root / f"{name}.{index}.lock"))
            try:
                lock.acquire(timeout=0)
            except Timeout:
                continue
            try:
                yield
            finally:
                lock.release()
            return
        time.sleep(0.5)


# A release or a `verify` starts containers that must answer /health within release.toml's
# health_timeout_s; more of them starting at once than this on two cores leave them too
# little CPU, whichever run (clone) of the suite they belong to. A release's suite is mostly
# waiting (the 60 s timeout check; about 12 s of CPU in all), so four overlap.
SUITES_AT_ONCE = 4
MACHINE_SLOTS = Path(tempfile.gettempdir()) / "openenv-arena-test-slots"


# Tests running at once on the machine, whatever the run: the workers of one run (pyproject's
# `-n 6`). A second run on the machine (another clone) then shares them instead of doubling
# the load: the time limits tests rely on (a container healthy within 120 s, a reset
# answered within the client's timeout) were made for one run's load on two cores.
TESTS_AT_ONCE = 6


def per_test_slot() -> AbstractContextManager[None]:
    """`with per_test_slot():` around each test, set-up to teardown (tests/conftest.py)."""
    return slot(None, "test", TESTS_AT_ONCE)


def suite_slot() -> AbstractContextManager[None]:
    """`with suite_slot()` around a release or a whole check suite run in containers: at
    most SUITES_AT_ONCE on the machine."""
    return slot(None, "suite", SUITES_AT_ONCE)


def copy_tree(source: Path, dest: Path) -> Path:
    """A private copy of a shared directory (symlinks kept as links, modes and times kept)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-a", "--reflink=auto", str(source), str(dest)], check=True)
    return dest
