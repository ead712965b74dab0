"""reprotest's set-up, shared by tests/reproduce/test_reprotest.py and the base tests: the
world it builds in (once per xdist worker), its runner, and its from-scratch base build
against the run's own (once per run: two tests read it)."""

from __future__ import annotations

import importlib
import json
import os
import shlex
import shutil
import signal
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
# What `python -m pipeline build` imports beyond the standard library (config.py's model:
# pydantic and what it needs), copied for Debian's CPython 3.11 (the same ABI).
PACKAGES = (
    "requests",
    "urllib3",
    "certifi",
    "idna",
    "charset_normalizer",
    "packaging",
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "typing_inspection",
    "typing_extensions",
)
SUDO_SHIM = """#!/bin/sh
if [ "$1" = "-h" ]; then shift 2; fi
exec /usr/bin/sudo "$@"
"""


@pytest.fixture(scope="session")
def build_world() -> Path:
    """A world-readable directory (the unprivileged build user must read it): the source
    tree, the build's packages and the sudo wrapper. Read only (reprotest builds in copies
    of it); once per xdist worker, so that the reprotest runs spread over the workers
    (tests/conftest.py). Needs no base image: reprotest's base build starts from it while
    the run's own base is still being built."""
    if os.geteuid() != 0:
        pytest.skip("reprotest's user_group and disorderfs variations need root")
    missing = [t for t in TOOLS if shutil.which(t) is None] + ([str(PYTHON311)] if not PYTHON311.exists() else [])
    assert not missing, f"missing {missing}: run `python -m pipeline setup`"
    root = Path(tempfile.mkdtemp(prefix="reprotest-world-"))
    try:
        root.chmod(0o755)
        fresh_clone(REPO, root / "src")
        for name in PACKAGES:
            source = Path(importlib.import_module(name).__file__)
            if source.name == "__init__.py":
                shutil.copytree(source.parent, root / "site" / name, ignore=shutil.ignore_patterns("__pycache__"))
            else:  # a module of one file
                (root / "site").mkdir(exist_ok=True)
                shutil.copy2(source, root / "site" / source.name)
        (root / "bin").mkdir()
        (root / "bin" / "sudo").write_text(SUDO_SHIM)
        (root / "bin" / "sudo").chmod(0o755)
        subprocess.run(["chmod", "-R", "a+rX", str(root)], check=True)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def world(build_world, base_image) -> Path:
    """`build_world` with the pinned base as an OCI layout (`base-oci`) beside the source:
    what the derived builds build on."""
    target = build_world / "base-oci"
    if not target.exists():
        shutil.copytree(TEST_STATE / "oci", target)
        subprocess.run(["chmod", "-R", "a+rX", str(target)], check=True)
    return build_world


def _reprotest_argv(command: str, artifact: str, variations: str, control: Path | None) -> list[str]:
    reuse = ["--control-build", str(control)] if control else []
    return ["reprotest", "--min-cpus=1", f"--variations={variations}", *reuse, command, artifact]


def _reprotest_env(world: Path) -> dict[str, str]:
    return dict(os.environ, PATH=f"{world / 'bin'}:{os.environ['PATH']}")


def reprotest(
    world: Path, command: str, artifact: str, variations: str, timeout: float = 600, control: Path | None = None
) -> subprocess.CompletedProcess:
    """reprotest's run: a control build and an experiment build under `variations`, or with
    `control` (a directory holding `source-root/<artifact>`) that as the control and the
    experiment build only."""
    return subprocess.run(
        _reprotest_argv(command, artifact, variations, control),
        cwd=world / "src",
        env=_reprotest_env(world),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# How long reprotest's base build waits, once built, for the run's base (its control) to be
# there: the run's base build, in a fresh clone, started at about the same time.
CONTROL_WAIT_S = 1800


@shared_result
def base_reprotest(tmp_path_factory, build_world, request) -> Path:
    """reprotest's from-scratch base build (mmdebstrap included) under its variations, once
    per run, against the run's own base build (`base_image`) as the control
    (`--control-build`: one mmdebstrap fewer than building the control again). The
    experiment starts at once, beside the run's base build rather than after it: the
    control is reprotest's to read only when the experiment is done, and the experiment's
    command ends by waiting until the control is in place (that wait is not part of what
    is compared). The directory holds `output` (what reprotest printed, its exit status
    first), `control` (the artifact reprotest compared against, the run's base layout's
    index.json) and `experiment-index.json` (the experiment build's own, copied out by its
    command). Read by test_reprotest.py's base test and tests/base/test_base_image.py's
    twin-build test, each asserting its own property."""

    def make(root: Path) -> None:
        control_dir, ready = root / "control", root / "control-ready"
        cache = Path(tempfile.mkdtemp(prefix="reprotest-base-cache-"))
        try:
            wheels = REPO / ".release" / "wheels"
            if wheels.is_dir():  # complete files only: the cache writes each wheel atomically
                shutil.copytree(wheels, cache / "wheels", ignore=shutil.ignore_patterns(".*.tmp"))
            wait = (
                f"i=0; until [ -e {shlex.quote(str(ready))} ]; do i=$((i+1)); "
                f"[ $i -le {CONTROL_WAIT_S} ] || exit 1; sleep 1; done"
            )
            command = (
                f"{sys.executable} -m pipeline base --oci-layout base-out --no-cache "
                f"--cache-dir {cache} && cp {ARTIFACT} {root / 'experiment-index.json'} && {wait}"
            )
            # Its output to a file: nothing reads a pipe while the run's base is waited for.
            with open(root / "reprotest.log", "w+") as log:
                proc = subprocess.Popen(
                    _reprotest_argv(command, ARTIFACT, "+all,-user_group,-domain_host,-kernel", control_dir),
                    cwd=build_world / "src",
                    env=_reprotest_env(build_world),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                try:
                    request.getfixturevalue("base_image")  # the run's base build: the control
                    control = control_dir / "source-root" / ARTIFACT
                    control.parent.mkdir(parents=True)
                    shutil.copyfile(TEST_STATE / "oci" / "index.json", control)
                    ready.touch()
                    proc.wait(timeout=1200 + CONTROL_WAIT_S)
                finally:
                    if proc.poll() is None:  # the run's base failed: Ctrl-C lets reprotest unmount
                        os.killpg(proc.pid, signal.SIGINT)
                        try:
                            proc.wait(timeout=60)
                        except subprocess.TimeoutExpired:
                            os.killpg(proc.pid, signal.SIGKILL)
                            proc.wait()
                log.seek(0)
                (root / "output").write_text(f"{proc.returncode}\n{log.read()}")
        finally:
            shutil.rmtree(cache, ignore_errors=True)

    return once(tmp_path_factory, "base-reprotest", make)


def built_indexes(run: Path) -> dict[str, dict]:
    """The OCI index of the base of each build reprotest compared: {"control": the run's
    base build's, "experiment": reprotest's}."""
    experiment = run / "experiment-index.json"
    assert experiment.is_file(), f"reprotest's base build wrote no {ARTIFACT}: {(run / 'output').read_text()[-4000:]}"
    return {
        "control": json.loads((run / "control" / "source-root" / ARTIFACT).read_text()),
        "experiment": json.loads(experiment.read_text()),
    }
