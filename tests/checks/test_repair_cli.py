"""`nox -s repair-checks` from a fresh clone against stand-ins in a plain loopback registry.

The done-when of the repair checks: the command a reader runs, on a fresh checkout,
against the good stand-in repair image (plain HTTP registry on 127.0.0.1, standing in
for ghcr.io) passes all twelve of the seed's checks and the extras, prints the table
and writes checks.json's record format; against a broken stand-in it fails, naming the
check, with a non-zero exit.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from pipeline.checks import repair
from pipeline.checks.results import load
from pipeline.config import REPO_ROOT

from ..base.basefixtures import base_image  # noqa: F401
from .repair_standin import REFERENCE_SCRIPT, build_standins

pytestmark = [pytest.mark.root, pytest.mark.container, pytest.mark.slow]
TASK = "format-code-task-000666"


def _nox(clone, *args: str) -> subprocess.CompletedProcess:
    nox = shutil.which("nox")
    if nox is None:
        pytest.skip("nox is not installed (python3 -m pip install nox)")
    # A reader's shell: not this virtualenv's, and without CI's PYTHONDONTWRITEBYTECODE
    # (with it, each of the session's processes compiled its imports from source again:
    # the fresh clone's virtualenv holds no bytecode; 20 s of CPU in this test).
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE")}
    return subprocess.run(
        [nox, "-s", "repair-checks", "--", *args], cwd=clone, env=env, capture_output=True, text=True, timeout=1200
    )


def test_repair_checks_from_a_fresh_clone_against_a_loopback_registry(local_registry, base_image, tmp_path):
    standins = build_standins(local_registry, base_image, tmp_path / "work", task_id=TASK, faults=("grader-root",))
    assert standins[""].reference.startswith("127.0.0.1:")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", f"file://{REPO_ROOT}", str(clone)], check=True)
    good = _nox(
        clone,
        standins[""].reference,
        "--task",
        TASK,
        "--reference",
        str(REFERENCE_SCRIPT),
        "--out",
        str(tmp_path / "good.json"),
    )
    assert good.returncode == 0, good.stdout[-3000:] + good.stderr[-3000:]
    written = json.loads((tmp_path / "good.json").read_text())
    checks = written["checks"]
    assert [c["id"] for c in checks] == [f"{TASK}/{name}" for name in repair.REPAIR_CHECKS]
    assert all(c["passed"] for c in checks)
    assert written["external"][0]["status"] == "verified"
    assert written["external"][0]["writable_layer_peak_bytes"] > 0
    assert load(tmp_path / "good.json").ok
    table = [line.split() for line in good.stdout.splitlines()]
    assert [row[:2] for row in table if row and row[0] in repair.SEED_CHECKS] == [
        [name, "ok"] for name in repair.SEED_CHECKS
    ]

    broken = _nox(
        clone,
        standins["grader-root"].reference,
        "--task",
        TASK,
        "--reference",
        str(REFERENCE_SCRIPT),
        "--out",
        str(tmp_path / "broken.json"),
    )
    assert broken.returncode != 0
    failed = [c["id"] for c in json.loads((tmp_path / "broken.json").read_text())["checks"] if not c["passed"]]
    assert failed == [f"{TASK}/verifier_git_hooks_are_unprivileged"]
    assert "verifier_git_hooks_are_unprivileged" in broken.stderr + broken.stdout
