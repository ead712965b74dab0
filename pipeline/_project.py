"""Facts of the project stated once, in pyproject.toml: its version and the bootstrap pins
(the nox and uv the README's set-up installs with pip)."""

from __future__ import annotations

import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
_DATA = tomllib.loads(PYPROJECT.read_text())

VERSION: str = _DATA["project"]["version"]
BOOTSTRAP: tuple[str, ...] = tuple(_DATA["tool"]["openenv-arena"]["bootstrap"])


def bootstrap_install() -> str:
    """The command that installs the bootstrap tools, as the README's set-up runs it."""
    return f"python3 -m pip install {' '.join(BOOTSTRAP)}"


def pin(name: str) -> str:
    """``name==version`` of one bootstrap tool."""
    return next(spec for spec in BOOTSTRAP if spec.split("==")[0] == name)
