"""reprotest's set-up, shared by tests/reproduce/test_reprotest.py and the base tests: the
world it builds in (once per xdist worker), its runner, and its from-scratch base build
against the run's own (once per run: two tests read it)."""

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
ARTIFACT = "base-out/oci/index.json"
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
              timeout: float = 600, control: Path | None = None) -> subprocess.CompletedProcess:
    """reprotest's run: a control build and an experiment build under `variations`, or with
    `control` (a directory holding `source-root/<artifact>`) that as the control and the
    experiment build only."""
    env = dict(os.environ, PATH=f"{world / 'bin'}:{os.environ['PATH']}")
    reuse = ["--control-build", str(control)] if control else []
    return subprocess.run(
        ["reprotest", "--min-cpus=1", f"--variations={variations}", *reuse, command, artifact],
        cwd=world / "src", env=env, capture_output=True, text=True, timeout=timeout)


@shared_result
def base_reprotest(tmp_path_factory, world) -> Path:
    """reprotest's from-scratch base build (mmdebstrap included) under its variations, once
    per run, against the run's own base build (`base_image`, which `world` needs) as the
    control (`--control-build`: one mmdebstrap fewer than building the control again). The
    directory holds `output` (what reprotest printed, its exit status first), `control`
    (the artifact reprotest compared against, the run's base layout's index.json) and
    `experiment-index.json` (the experiment build's own, copied out by its command).
    Read by test_reprotest.py's base test and tests/base/test_base_image.py's twin-build
    test, each asserting its own property."""
    def make(root: Path) -> None:
        control = root / "control" / "source-root" / ARTIFACT
        control.parent.mkdir(parents=True)
        shutil.copyfile(TEST_STATE / "oci" / "index.json", control)
        cache = Path(tempfile.mkdtemp(prefix="reprotest-base-cache-"))
        try:
            wheels = REPO / ".release" / "wheels"
            if wheels.is_dir():
                shutil.copytree(wheels, cache / "wheels")
            command = (f"{sys.executable} -m pipeline base --oci-layout base-out --no-cache "
                       f"--cache-dir {cache} && cp {ARTIFACT} {root / 'experiment-index.json'}")
            proc = reprotest(world, command, ARTIFACT, "+all,-user_group,-domain_host,-kernel",
                             timeout=1200, control=root / "control")
            (root / "output").write_text(f"{proc.returncode}\n{proc.stdout}{proc.stderr}")
        finally:
            shutil.rmtree(cache, ignore_errors=True)

    return once(tmp_path_factory, "base-reprotest", make)


def built_indexes(run: Path) -> dict[str, dict]:
    """The OCI index of the base of each build reprotest compared: {"control": the run's
    base build's, "experiment": reprotest's}."""
    experiment = run / "experiment-index.json"
    assert experiment.is_file(), f"reprotest's base build wrote no {ARTIFACT}: {(run / 'output').read_text()[-4000:]}"
    return {"control": json.loads((run / "control" / "source-root" / ARTIFACT).read_text()),
            "experiment": json.loads(experiment.read_text())}
