"""What the sessions and tests need of the machine (README, Set-up): uv beside nox, without
which a session stops at once naming the fix; and, for the tests, a CPython 3.12 build for the
arena base's stand-in, without which the tests that copy it skip and say why."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.e2e import pyromat_standin

REPO = Path(__file__).resolve().parent.parent


def test_without_cpython_312_the_standin_tests_skip_naming_the_variable(tmp_path, monkeypatch):
    monkeypatch.setattr(pyromat_standin, "PYTHON312_HOME", tmp_path / "no-python")
    with pytest.raises(pytest.skip.Exception) as skipped:
        pyromat_standin.require_python312()
    reason = str(skipped.value)
    assert "RELEASE_PYTHON312_HOME" in reason and str(tmp_path / "no-python") in reason
    assert "bin/python3.12" in reason


def test_a_complete_build_is_accepted(tmp_path, monkeypatch):
    """Teeth for the one above: a home with the files the copy needs does not skip."""
    for name in pyromat_standin.PYTHON312_NEEDS:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    monkeypatch.setattr(pyromat_standin, "PYTHON312_HOME", Path(tmp_path))
    pyromat_standin.require_python312()


@pytest.mark.skipif(shutil.which("nox") is None, reason="needs nox on PATH (README, Set-up)")
def test_a_session_without_uv_stops_at_once_naming_the_fix(tmp_path):
    """Without uv no virtualenv is made (a venv-made one failed late and, reused, kept failing
    once uv was there): the session stops at its first line, naming what to install."""
    envdir = tmp_path / "envs"
    done = subprocess.run(
        ["nox", "-f", str(REPO / "noxfile.py"), "--envdir", str(envdir), "-s", "lint"],
        env={**os.environ, "UV": str(tmp_path / "no-uv")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "Session lint aborted: uv is not installed" in out and "pip install uv==" in out
    assert not any(envdir.glob("*/bin/python")), "a virtualenv was made without uv"
