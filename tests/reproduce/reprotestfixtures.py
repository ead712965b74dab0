"""reprotest's set-up, shared by tests/reproduce/test_reprotest.py and the base tests: the
world it builds in (once per xdist worker), its runner, and its two from-scratch base
builds (once per run: two tests read them)."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ..base.basefixtures import TEST_STATE
from ..shared import once, shared_result
from .conftest import REPO, fresh_clone

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
              timeout: float = 600, store: Path | None = None) -> subprocess.CompletedProcess:
    """reprotest's run; its control and experiment artifacts are kept in `store` if given."""
    env = dict(os.environ, PATH=f"{world / 'bin'}:{os.environ['PATH']}")
    where = store or Path(tempfile.mkdtemp(prefix="reprotest-store-"))
    try:
        return subprocess.run(
            ["reprotest", "--min-cpus=1", f"--variations={variations}", "--store-dir", str(where),
             command, artifact],
            cwd=world / "src", env=env, capture_output=True, text=True, timeout=timeout)
    finally:
        if store is None:
            shutil.rmtree(where, ignore_errors=True)


@shared_result
def base_reprotest(tmp_path_factory, world) -> Path:
    """reprotest's two from-scratch base builds (mmdebstrap included), once per run: the
    directory holds `output` (what reprotest printed, its exit status first) and `store`
    (each build's base-out/oci/index.json). Read by test_reprotest.py's base test and by
    tests/base/test_base_image.py's twin-build test, each asserting its own property."""
    def make(root: Path) -> None:
        cache = Path(tempfile.mkdtemp(prefix="reprotest-base-cache-"))
        try:
            wheels = REPO / ".release" / "wheels"
            if wheels.is_dir():
                shutil.copytree(wheels, cache / "wheels")
            command = (f"{sys.executable} -m pipeline base --oci-layout base-out --no-cache "
                       f"--cache-dir {cache}")
            proc = reprotest(world, command, "base-out/oci/index.json",
                             "+all,-user_group,-domain_host,-kernel", timeout=1200, store=root / "store")
            (root / "output").write_text(f"{proc.returncode}\n{proc.stdout}{proc.stderr}")
        finally:
            shutil.rmtree(cache, ignore_errors=True)

    return once(tmp_path_factory, "base-reprotest", make)


def built_indexes(run: Path) -> dict[str, dict]:
    """Each reprotest build's OCI index of the base ({"control": ..., "experiment-1": ...})."""
    found = {p.relative_to(run / "store").parts[0]: json.loads(p.read_text())
             for p in (run / "store").glob("*/source-root/base-out/oci/index.json")}
    assert sorted(found) == ["control", "experiment-1"], sorted(found)
    return found
