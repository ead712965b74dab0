"""Fixtures and helpers for the runtime lock and the base image (tests/base, tests/runtime).

`base_image` builds the local base once (the mmdebstrap rootfs is cached in
`.release/base/rootfs` across runs, the layout in `.release/test-base`; with nothing
cached it starts from the committed locks/base.json, as a release on a new machine does), pushes it to
the session's real local registry and yields its BaseRecord. The build holds a file
lock: the first xdist worker builds, the others wait and then only push the cached
layout to their own registry. `lock_venv` is a fresh
venv of Debian's python3.11 with exactly locks/runtime.txt installed by pip with
--require-hashes, made once per run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from pipeline import basestage
from pipeline.config import REPO_ROOT
from pipeline.image import base
from pipeline.registry.client import RegistryClient
from pipeline.sources import lock

from ..shared import locked, once, shared_result

HERE = Path(__file__).resolve().parent
TEST_STATE = REPO_ROOT / ".release" / "test-base"
PYTHON311 = Path("/usr/bin/python3.11")
# When `base_image` started from the committed locks/base.json (no earlier run's base
# cached): that lock's text and the lock as the build left it, what a release on a new
# machine would leave in the checkout.
REBUILT_LOCK = "rebuilt-from-committed-lock.json"


def wheel_dir(tmp: Path) -> Path:
    """A --find-links directory holding exactly the locked (hash-checked) wheels."""
    out = tmp / "wheels"
    out.mkdir()
    # The checkout's wheel cache is shared by the xdist workers (and the base build):
    # one fetch at a time, so that no two write the same wheel at once.
    with locked(lock.WHEEL_CACHE):
        wheels = lock.fetch(lock.load_lock())
    for wheel in wheels:
        (out / wheel.name).symlink_to(wheel)
    return out


def make_venv(path: Path) -> Path:
    if not PYTHON311.exists():
        pytest.skip("needs Debian's /usr/bin/python3.11 (the image's interpreter)")
    subprocess.run([PYTHON311, "-m", "venv", "--without-pip", path], check=True)
    return path / "bin" / "python"


def pip_install(venv_python: Path, lock_file: Path, find_links: Path):
    """`pip install --no-deps --require-hashes -r lock_file` into venv_python's venv."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv_python),
            "install",
            "--quiet",
            "--no-deps",
            "--require-hashes",
            "--no-index",
            "--find-links",
            str(find_links),
            "-r",
            str(lock_file),
        ],
        capture_output=True,
        text=True,
    )


@shared_result
def lock_venv(tmp_path_factory) -> Path:
    """Made once per run for every worker that needs it (pip's install and its bytecode
    compile: 10 s of CPU each time); the tests only run its interpreter."""
    if not PYTHON311.exists():
        pytest.skip("needs Debian's /usr/bin/python3.11 (the image's interpreter)")

    def make(root: Path) -> None:
        python = make_venv(root / "venv")
        result = pip_install(python, lock.LOCK, wheel_dir(root))
        assert result.returncode == 0, result.stderr

    return once(tmp_path_factory, "lock-venv", make) / "venv" / "bin" / "python"


def registry_client(state) -> RegistryClient:
    return state.client()


@shared_result
def base_image(local_registry, tmp_path_factory) -> base.BaseRecord:
    record_path = tmp_path_factory.mktemp("base-record") / "base.json"
    cached = TEST_STATE / "base.json"
    rebuilt_lock = TEST_STATE / REBUILT_LOCK
    with locked(TEST_STATE), locked(lock.WHEEL_CACHE):
        if cached.exists():
            record_path.write_bytes(cached.read_bytes())
            try:
                base.load_record(record_path)
            except base.ConfigError:
                record_path.unlink()  # written by an older format: rebuilt below
        committed = base.BASE_LOCK.read_text() if not record_path.exists() else None
        if committed is not None:
            # As a release on a new machine starts: the committed lock, nothing built.
            record_path.write_text(committed)
        # The rootfs in the run's temporary directory (a tmpfs in the tests session), not the
        # checkout's cache: the layout above is what later runs reuse, and dpkg's fsyncs and
        # file churn made mmdebstrap several times slower on CI's ext4 while every test that
        # needs the base waited for it.
        with tempfile.TemporaryDirectory(prefix="base-rootfs-") as rootfs:
            record = basestage.ensure(
                registry_client(local_registry),
                basestage.BaseInputs(record_path=record_path, state_dir=TEST_STATE, rootfs_cache=Path(rootfs)),
            ).record
        cached.write_bytes(record_path.read_bytes())
        if committed is not None:
            rebuilt_lock.write_text(json.dumps({"committed": committed, "after": record_path.read_text()}))
    return record
