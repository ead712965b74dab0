"""The checkout's declared curriculum: release.toml's [curriculum], as a release reads it."""

from __future__ import annotations

import os
from pathlib import Path

from pipeline import config
from pipeline._io import write_atomic
from pipeline.curriculum import CURRICULUM_PATH, Case


def all_cases() -> list[Case]:
    """Every case of the checkout's release.toml, in request order."""
    return list(config.load().curriculum.cases)


def serve_the_declared_curriculum() -> Path:
    """A server run from this checkout serves release.toml's [curriculum], as the image does:
    the release writes the image's env/curriculum.json, and env/catalog.py reads the file
    ARENA_CURRICULUM names when there is none beside it. Call it before anything imports env
    (the test suite's conftest and the benchmarks do)."""
    path = config.REPO_ROOT / ".release" / "tests" / Path(CURRICULUM_PATH).name
    data = config.load().curriculum.file_bytes()
    if not path.is_file() or path.read_bytes() != data:
        write_atomic(path, data)
    os.environ["ARENA_CURRICULUM"] = str(path)
    return path
