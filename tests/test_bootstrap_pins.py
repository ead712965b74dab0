"""The bootstrap pins (nox and uv, installed with pip before anything else) are stated once,
in pyproject.toml; every command that installs them says the same, and so does the version."""

from __future__ import annotations

import re
from pathlib import Path

from pipeline import __version__
from pipeline._project import BOOTSTRAP, VERSION, bootstrap_install

REPO = Path(__file__).resolve().parents[1]
PIN = re.compile(r"\b(nox|uv)==([0-9][\w.]*)")


def _places() -> list[Path]:
    return sorted(
        {
            REPO / "README.md",
            REPO / "CONTRIBUTING.md",
            REPO / ".ci" / "run",
            REPO / "noxfile.py",
            *(REPO / "docs").rglob("*.md"),
            *(REPO / ".github").rglob("*.yml"),
            *(REPO / "pipeline").rglob("*.py"),
        }
    )


def test_every_install_command_names_the_pyproject_pins():
    wanted = dict(spec.split("==") for spec in BOOTSTRAP)
    found = [
        (path.relative_to(REPO), name, version)
        for path in _places()
        if path.is_file()
        for name, version in PIN.findall(path.read_text())
    ]
    assert found, "no install command names the pins"
    assert [f for f in found if wanted[f[1]] != f[2]] == []


def test_the_readme_setup_installs_them_as_pyproject_says():
    assert bootstrap_install() in (REPO / "README.md").read_text()


def test_a_disagreeing_pin_is_found():
    text = "python3 -m pip install nox==1999.1.1 uv==0.13.9"
    wanted = dict(spec.split("==") for spec in BOOTSTRAP)
    assert [n for n, v in PIN.findall(text) if wanted[n] != v] == ["nox"]


def test_the_version_is_pyprojects():
    assert __version__ == VERSION
