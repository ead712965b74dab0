"""The checkout's declared curriculum: release.toml's [curriculum], as a release reads it."""

from __future__ import annotations

from pipeline import config
from pipeline.curriculum import Case


def all_cases() -> list[Case]:
    """Every case of the checkout's release.toml, in request order."""
    return list(config.load().curriculum.cases)
