"""What the tests need beyond a release (README, Set-up): a CPython 3.12 build for the arena
base's stand-in. Without it, the tests that copy it skip and say why, instead of erroring."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e import pyromat_standin


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
