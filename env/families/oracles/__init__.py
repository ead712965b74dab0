"""Reference solvers: each reads only `task["files"]` and solves the family its own way.

They share no code with the generators, so an error in one shows up as a mismatch in tests.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
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

_SOLVERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "software_change": software_change.solve,
    "industrial_schedule": industrial_schedule.solve,
    "science_calibration": science_calibration.solve,
    "office_reconciliation": office_reconciliation.solve,
    "finance_ledger": finance_ledger.solve,
    "math_route": math_route.solve,
    "security_triage": security_triage.solve,
    "media_timeline": media_timeline.solve,
}


def oracle_answer(task: Mapping[str, Any]) -> dict[str, Any]:
    """The reference answer of `task`, computed from its input files alone."""
    family = task["task_id"]
    if family not in _SOLVERS:
        raise ValueError(f"unknown task family {family!r}; expected one of {', '.join(_SOLVERS)}")
    return _SOLVERS[family]({name: json.loads(text) for name, text in task["files"].items()})
