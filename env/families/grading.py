"""The grading rules shared by every family (docs/spec/families.md, "Grading")."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ._common import MAX_PARTIAL

MAX_DEPTH = 20
MAX_NODES = 2048


def well_formed(answer: Any) -> bool:
    """Rule 1: a non-empty object within the depth and size bounds, made of JSON values only.

    Every value is a node (the root object included) and the root sits at depth 1, so
    `{"a": 1}` has two nodes and depth 2. Nodes are counted as they are discovered, so an
    oversized (or self-referencing) structure is refused without walking all of it.
    """
    if not isinstance(answer, dict) or not answer:
        return False
    pending: list[tuple[Any, int]] = [(answer, 1)]
    seen = 1
    while pending:
        value, depth = pending.pop()
        if depth > MAX_DEPTH:
            return False
        if isinstance(value, dict):
            if not all(isinstance(key, str) for key in value):
                return False
            children = list(value.values())
        elif isinstance(value, list):
            children = value
        elif isinstance(value, bool) or value is None:
            return False
        elif isinstance(value, float):
            if not math.isfinite(value):
                return False
            continue
        elif isinstance(value, (int, str)):
            continue
        else:
            return False
        seen += len(children)
        if seen > MAX_NODES:
            return False
        pending.extend((child, depth + 1) for child in children)
    return True


def equal(got: Any, want: Any) -> bool:
    """Rule 3: strict equality; an int equals an integral finite float, a bool is never a number."""
    if isinstance(got, bool) or isinstance(want, bool):
        return type(got) is type(want) and got == want
    if isinstance(got, (int, float)) and isinstance(want, (int, float)):
        finite = all(not isinstance(x, float) or math.isfinite(x) for x in (got, want))
        return finite and got == want
    if isinstance(got, str) and isinstance(want, str):
        return got == want
    if isinstance(got, dict) and isinstance(want, dict):
        return got.keys() == want.keys() and all(equal(got[k], want[k]) for k in want)
    if isinstance(got, list) and isinstance(want, list):
        return len(got) == len(want) and all(equal(g, w) for g, w in zip(got, want))
    return False


def substantive(value: Any) -> bool:
    """Rule 5: a non-empty string, a nonzero number, or a container holding one."""
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, str):
        return value != ""
    if isinstance(value, (int, float)):
        return value != 0
    if isinstance(value, dict):
        return any(substantive(v) for v in value.values())
    if isinstance(value, list):
        return any(substantive(v) for v in value)
    return False


def grade(task: Mapping[str, Any], answer: Any) -> float:
    """Score `answer` against the task's private expected answer; never mutates either."""
    expected = task["expected"]
    if not well_formed(answer):
        return 0.0
    if any(key not in expected for key in answer):
        return 0.0
    correct = [key for key in expected if key in answer and equal(answer[key], expected[key])]
    if len(correct) == len(expected):
        return 1.0
    if not any(substantive(answer[key]) for key in correct):
        return 0.0
    return min(MAX_PARTIAL, len(correct) / len(expected))
