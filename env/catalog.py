"""The 32-case curriculum of docs/spec/families.md: fixed (family, difficulty, seed) cases
and their IDs.

The catalog depends only on the family order fixed by the spec, not on a task module, so the
first-party families and a vendored module with the same API serve the same cases.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

FAMILY_ORDER: tuple[str, ...] = (
    "software_change",
    "industrial_schedule",
    "science_calibration",
    "office_reconciliation",
    "finance_ledger",
    "math_route",
    "security_triage",
    "media_timeline",
)
# Request order: four blocks of eight, one case per family in FAMILY_ORDER.
BLOCKS: tuple[tuple[int, int], ...] = ((1, 101), (1, 307), (2, 101), (2, 307))


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


CASES: tuple[Case, ...] = tuple(Case(f, d, s) for d, s in BLOCKS for f in FAMILY_ORDER)
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
