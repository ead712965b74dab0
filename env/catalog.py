"""The curriculum the server serves: its (family, difficulty, seed) cases and their IDs.

The cases are release.toml's `[curriculum]`, in request order. The release writes them into
the image as `curriculum.json` beside this module; a server run from a checkout, which has no
such file (tests, host mode), is given one by `ARENA_CURRICULUM`. The catalog depends only on that file, not on a
task module, so the first-party families and a vendored module with the same API serve the
same cases.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

CURRICULUM_VARIABLE = "ARENA_CURRICULUM"
CURRICULUM_FILE = Path(__file__).with_name("curriculum.json")


class TaskModule(Protocol):
    """The part of the docs/spec/families.md module API the catalog needs."""

    TASK_IDS: list[str]

    def make_task(self, task_id: str, seed: int, difficulty: int = 2) -> dict[str, Any]: ...


def case_id(family: str, difficulty: int, seed: int) -> str:
    """The ID of a case: `<family>-d<difficulty>-s<seed>`."""
    return f"{family}-d{difficulty}-s{seed}"


@dataclass(frozen=True)
class Case:
    """One curriculum case; its inputs depend on these three fields only."""

    family: str
    difficulty: int
    seed: int

    @property
    def id(self) -> str:
        return case_id(self.family, self.difficulty, self.seed)


def load_cases(path: str | os.PathLike[str]) -> tuple[Case, ...]:
    """The cases of a curriculum file, `{"cases": [{"family", "difficulty", "seed"}, ...]}`;
    ValueError saying what is wrong with it."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(
            f"no curriculum file at {path}; the image holds the one the release wrote from "
            f"release.toml's [curriculum]; a checkout's server needs {CURRICULUM_VARIABLE} naming one"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"curriculum file {path} is not readable JSON: {exc}") from None
    entries = data.get("cases") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"curriculum file {path}: expected a non-empty list under 'cases', got {entries!r:.200}")
    cases = []
    for entry in entries:
        family, difficulty, seed = (
            (entry.get("family"), entry.get("difficulty"), entry.get("seed"))
            if isinstance(entry, dict) and len(entry) == 3
            else (None, None, None)
        )
        if not isinstance(family, str) or type(difficulty) is not int or type(seed) is not int:
            raise ValueError(
                f"curriculum file {path}: expected cases of exactly family (string), "
                f"difficulty and seed (integers), got {entry!r:.200}"
            )
        cases.append(Case(family, difficulty, seed))
    ids = [c.id for c in cases]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise ValueError(f"curriculum file {path} repeats case(s) {', '.join(repeated)}; each case is served once")
    return tuple(cases)


def curriculum_path() -> Path:
    """The image's file beside this module; where there is none (a checkout), ARENA_CURRICULUM's."""
    if CURRICULUM_FILE.is_file() or not os.environ.get(CURRICULUM_VARIABLE):
        return CURRICULUM_FILE
    return Path(os.environ[CURRICULUM_VARIABLE])


CASES: tuple[Case, ...] = load_cases(curriculum_path())
CASE_IDS: tuple[str, ...] = tuple(case.id for case in CASES)
_BY_ID = {case.id: case for case in CASES}


def parse_case_id(text: str) -> Case:
    """The case named by `text`; ValueError listing every valid ID when it names none."""
    case = _BY_ID.get(text) if isinstance(text, str) else None
    if case is None:
        raise ValueError(f"unknown case {text!r}; valid case IDs: {', '.join(CASE_IDS)}")
    return case


def make_case(module: TaskModule, case: Case) -> dict[str, Any]:
    """Generate `case` with a task module (first-party or vendored) that has the families API."""
    if case.family not in module.TASK_IDS:
        raise ValueError(
            f"task module lacks family {case.family!r}; it offers {', '.join(module.TASK_IDS)}; "
            "use a module implementing every family of docs/spec/families.md"
        )
    return module.make_task(case.family, case.seed, case.difficulty)
