"""Debian's reprotest, an independent harness, builds twice under variations and compares
the outputs bit for bit: the derived build (twice: once with disorderfs file ordering,
once as another user) and the base build once.

Variations that work on this VM: environment, build_path, kernel (setarch), aslr,
num_cpus, time (faketime), home, locales, exec_path, timezone, umask, domain_host,
user_group, fileordering (disorderfs over /dev/fuse). /dev/fuse is root-only (0600), so
disorderfs cannot run as the unprivileged build user: fileordering and user_group run
in separate reprotest invocations. The base build needs root (mmdebstrap --mode=root):
no user_group there; nor the kernel variation (`setarch --uname-2.6`): libc6's preinst
refuses to install under a kernel older than 3.2, so mmdebstrap cannot run at all.

reprotest 0.7.23 calls `sudo -h localhost ...`, which sudo >= 1.9 rejects outside `-l`;
a two-line `sudo` wrapper first on PATH drops those two arguments.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ..base.basefixtures import TEST_STATE
from .conftest import REPO, fresh_clone

pytestmark = [pytest.mark.slow, pytest.mark.root]

TOOLS = ("reprotest", "disorderfs", "sudo", "faketime")
PYTHON311 = Path("/usr/bin/python3.11")
# The build's third-party imports (pipeline.image.build's closure outside the stdlib).
PACKAGES = ("requests", "urllib3", "certifi", "idna", "charset_normalizer")
SUDO_SHIM = """#!/bin/sh
if [ "$1" = "-h" ]; then shift 2; fi
exec /usr/bin/sudo "$@"
"""


@pytest.fixture(scope="session")
def world(base_image) -> Path:
    """A world-readable directory (the unprivileged build user must read it): the source
    tree, the pinned base as an OCI layout, the build's packages and the sudo wrapper.
    Read only (reprotest builds in copies of it); once per xdist worker, so that the
    reprotest runs spread over the workers (tests/conftest.py)."""
    if os.geteuid() != 0:
        pytest.skip("reprotest's user_group and disorderfs variations need root")
    missing = [t for t in TOOLS if shutil.which(t) is None] + \
        ([str(PYTHON311)] if not PYTHON311.exists() else [])
    assert not missing, f"missing {missing}: run `python -m pipeline setup`"
    root = Path(tempfile.mkdtemp(prefix="reprotest-world-"))
    try:
        root.chmod(0o755)
        fresh_clone(REPO, root / "src")
        shutil.copytree(TEST_STATE / "oci", root / "base-oci")
        for name in PACKAGES:
            shutil.copytree(Path(importlib.import_module(name).__file__).parent, root / "site" / name,
                            ignore=shutil.ignore_patterns("__pycache__"))
        (root / "bin").mkdir()
        (root / "bin" / "sudo").write_text(SUDO_SHIM)
        (root / "bin" / "sudo").chmod(0o755)
        subprocess.run(["chmod", "-R", "a+rX", str(root)], check=True)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def reprotest(world: Path, command: str, artifact: str, variations: str,
              timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{world / 'bin'}:{os.environ['PATH']}")
    store = tempfile.mkdtemp(prefix="reprotest-store-")
    try:
        return subprocess.run(
            ["reprotest", "--min-cpus=1", f"--variations={variations}", "--store-dir", store,
             command, artifact],
            cwd=world / "src", env=env, capture_output=True, text=True, timeout=timeout)
    finally:
        shutil.rmtree(store, ignore_errors=True)


def derived_build(world: Path, extra: str = "") -> str:
    return (f"env PYTHONPATH={world / 'site'} PYTHONDONTWRITEBYTECODE=1 {PYTHON311} -m pipeline "
            f"build --no-push --base-layout {world / 'base-oci'} --out dist{extra}")


def _ok(proc: subprocess.CompletedProcess) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Reproduction successful" in out, out[-6000:]


def test_base_build_once_under_every_root_variation(world):
    cache = Path(tempfile.mkdtemp(prefix="reprotest-base-cache-"))
    try:
        wheels = REPO / ".release" / "wheels"
        if wheels.is_dir():
            shutil.copytree(wheels, cache / "wheels")
        command = (f"{sys.executable} -m pipeline base --oci-layout base-out --no-cache "
                   f"--cache-dir {cache}")
        _ok(reprotest(world, command, "base-out/oci/index.json",
                      "+all,-user_group,-domain_host,-kernel", timeout=1200))
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def test_derived_build_with_file_ordering_and_every_variation_but_the_user(world):
    _ok(reprotest(world, derived_build(world), "dist/oci/index.json",
                  "+all,-user_group,-domain_host"))


def test_derived_build_as_another_user_and_host(world):
    _ok(reprotest(world, derived_build(world), "dist/oci/index.json",
                  "+all,-fileordering,user_group.available+=nobody:nogroup,domain_host.use_sudo=1"))


def test_harness_catches_a_build_path_in_the_output(world):
    """The harness has teeth: an output that records where it was built differs."""
    proc = reprotest(world, derived_build(world, " && pwd > dist/oci/where"), "dist/oci/where",
                     "+build_path")
    assert proc.returncode != 0 and "Reproduction successful" not in proc.stdout + proc.stderr
