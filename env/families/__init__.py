"""First-party procedural task families: the module API of docs/spec/families.md.

The server uses only `TASK_IDS`, `DOMAINS`, `make_task`, `grade` and `oracle_answer`, so a
vendored single-file module exposing the same names can replace this package unchanged.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from . import (
    finance_ledger,
    industrial_schedule,
    math_route,
    media_timeline,
    office_reconciliation,
    science_calibration,
    security_triage,
    software_change,
)
from ._common import GENERATOR_VERSION, dump_file, rng_for, rubric
from .grading import grade
from .oracles import oracle_answer

__all__ = ["DOMAINS", "GENERATOR_VERSION", "TASK_IDS", "grade", "make_task", "oracle_answer"]

_FAMILIES: dict[str, ModuleType] = {
    module.FAMILY: module
    for module in (
        software_change,
        industrial_schedule,
        science_calibration,
        office_reconciliation,
        finance_ledger,
        math_route,
        security_triage,
        media_timeline,
    )
}

TASK_IDS: list[str] = list(_FAMILIES)
DOMAINS: dict[str, str] = {family: module.DOMAIN for family, module in _FAMILIES.items()}
DIFFICULTIES = (1, 2, 3)


def make_task(task_id: str, seed: int, difficulty: int = 2) -> dict[str, Any]:
    """Generate one task of family `task_id`; identical arguments give a byte-identical task.

    Raises ValueError for an unknown family, a seed that is not exactly an `int` (a bool is
    refused) or a difficulty outside {1, 2, 3}.
    """
    if not isinstance(task_id, str) or task_id not in _FAMILIES:
        raise ValueError(f"unknown task family {task_id!r}; expected one of {', '.join(TASK_IDS)}")
    if type(seed) is not int:
        raise ValueError(f"seed must be an int, got {type(seed).__name__} {seed!r}")
    if type(difficulty) is not int or difficulty not in DIFFICULTIES:
        raise ValueError(f"difficulty must be 1, 2 or 3, got {difficulty!r}")
    module = _FAMILIES[task_id]
    inputs, expected = module.generate(rng_for(task_id, seed, difficulty), difficulty)
    return {
        "task_id": task_id,
        "domain": module.DOMAIN,
        "prompt": module.PROMPT,
        "files": {name: dump_file(content) for name, content in inputs.items()},
        "expected": expected,
        "rubric": rubric(list(expected)),
        "seed": seed,
        "difficulty": difficulty,
        "generator_version": GENERATOR_VERSION,
    }
