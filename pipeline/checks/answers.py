"""Answer variants and the scores docs/spec/families.md "Grading" assigns them.

The suite knows a correct answer (computed in the container by a solver); from it,
this module builds the partial, wrong and malformed answers of docs/spec/verification.md
and the exact reward each must earn. The rules are restated here from the contract, not
imported from the environment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

MAX_PARTIAL = 0.8
# Grading caps answer files at 16,384 bytes; one byte more must score 0.0.
OVERSIZED_BYTES = 16_385
TOO_DEEP = 25


def strict_equal(a: Any, b: Any) -> bool:
    """docs/spec/families.md, "Grading", rule 3: ints equal integral finite floats, bools
    never equal numbers."""
    if type(a) is bool or type(b) is bool:
        return type(a) is type(b) and a == b
    if type(a) in (int, float) and type(b) in (int, float):
        return all(math.isfinite(x) for x in (a, b)) and a == b
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(strict_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(strict_equal(x, y) for x, y in zip(a, b))
    return a == b


def substantive(value: Any) -> bool:
    """A non-empty string, a nonzero number, or a container holding one."""
    if isinstance(value, dict):
        return any(substantive(v) for v in value.values())
    if isinstance(value, list):
        return any(substantive(v) for v in value)
    if type(value) is str:
        return value != ""
    return type(value) in (int, float) and value != 0


def score(correct: dict[str, Any], answer: dict[str, Any]) -> float:
    """The reward of a well-formed `answer` (no bool/null, bounded) against `correct`."""
    if not answer or any(k not in correct for k in answer):
        return 0.0
    right = [k for k in correct if k in answer and strict_equal(answer[k], correct[k])]
    if len(right) == len(correct):
        return 1.0
    if not any(substantive(answer[k]) for k in right):
        return 0.0
    return min(MAX_PARTIAL, len(right) / len(correct))


def wrong(value: Any) -> Any:
    """A plausible value of the same shape that is certainly not strictly equal."""
    if type(value) is int or type(value) is float:
        result: Any = int(value) + 1
    elif isinstance(value, str):
        result = value + "_x" if value else "x"
    elif isinstance(value, list):
        result = list(value[:-1]) + [wrong(value[-1])] if value else ["id_0000"]
    elif isinstance(value, dict):
        if value:
            key = sorted(value)[0]
            result = {**value, key: wrong(value[key])}
        else:
            result = {"id_0000": 1}
    else:
        raise ValueError(f"answer component of unexpected type {type(value).__name__}")
    assert not strict_equal(result, value)
    return result


@dataclass(frozen=True)
class Variant:
    """One answer to submit in a fresh episode and the reward it must earn."""

    check: str
    answer: dict[str, Any]
    expected: float


def graded_variants(correct: dict[str, Any]) -> list[Variant]:
    """partial-<component> for each component, all-but-one, wrong, unknown-key."""
    keys = sorted(correct)
    out = []
    for k in keys:
        answer = {j: correct[j] if j == k else wrong(correct[j]) for j in keys}
        out.append(Variant(f"partial-{k}", answer, score(correct, answer)))
    # Leave out a component whose absence still leaves a substantive correct one, so
    # the check exercises the partial-credit cap rather than the "nothing substantive" rule.
    spoil = next((k for k in reversed(keys) if any(substantive(correct[j]) for j in keys if j != k)), keys[-1])
    answer = {j: wrong(correct[j]) if j == spoil else correct[j] for j in keys}
    out.append(Variant("all-but-one", answer, score(correct, answer)))
    answer = {j: wrong(correct[j]) for j in keys}
    out.append(Variant("wrong", answer, score(correct, answer)))
    out.append(Variant("unknown-key", {**correct, "notes": "checked"}, 0.0))
    return out


def with_component(correct: dict[str, Any], value: Any) -> dict[str, Any]:
    """`correct` with its first component replaced (for malformed-answer checks)."""
    key = sorted(correct)[0]
    return {**correct, key: value}


def nested(depth: int) -> Any:
    """A list nested `depth` levels deep around one integer."""
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value
