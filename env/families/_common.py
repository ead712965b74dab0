"""Machinery shared by every family generator: seeded randomness, canonical files, the task record."""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

GENERATOR_VERSION = "arena-families-1"
MAX_PARTIAL = 0.8

SHARED_RULES = """\
## Shared rules
- Read all three input files before answering; each one matters.
- Write the answer to `answer.json` in the working directory: one JSON object with exactly
  the keys listed above and no extra keys at any level.
- Every number in the answer is integer-valued (no fractions, no decimals that are not whole).
- Lists of IDs are sorted lexicographically (plain string order) unless the rules ask for an
  order or a route.
- `true`, `false` and `null` are never valid anywhere in the answer.

## Grading
Each top-level key is one component, graded by exact equality. All components correct
scores 1.0. Otherwise the score is min(0.8, correct / total), and 0.0 if no correct component
holds any substance (a non-empty string or a nonzero number somewhere inside it). An unknown
top-level key, a `true`/`false`/`null` anywhere, or an answer deeper than 20 levels or larger
than 2,048 values scores 0.0.
"""


def rng_for(family: str, seed: int, difficulty: int) -> random.Random:
    """A private generator whose state depends only on (version, family, seed, difficulty).

    Seeding from a sha256 digest (not from hash()) keeps tasks identical across processes
    whatever PYTHONHASHSEED is, and a private instance leaves the global `random` alone.
    """
    material = "|".join((GENERATOR_VERSION, family, str(seed), str(difficulty)))
    return random.Random(int.from_bytes(hashlib.sha256(material.encode("utf-8")).digest(), "big"))


def dump_file(obj: Any) -> str:
    """Canonical file text: sorted keys, compact separators, a trailing newline."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True) + "\n"


def numbered_ids(rng: random.Random, prefix: str, count: int) -> list[str]:
    """`count` distinct four-digit IDs in random order, so ID order never leaks file order."""
    return [f"{prefix}_{n:04d}" for n in rng.sample(range(1000, 10000), count)]


def rubric(components: list[str]) -> dict[str, Any]:
    """The grading rubric of a task whose expected answer has these top-level keys."""
    share = 1 / len(components)
    return {
        "version": GENERATOR_VERSION,
        "components": {key: share for key in components},
        "partial_credit": (
            "1.0 when every component is exactly correct; otherwise min(0.8, correct/total) "
            "if at least one correct component is substantive (holds a non-empty string or a "
            "nonzero number), else 0.0; malformed answers, booleans or nulls anywhere, and "
            "unknown top-level keys score 0.0"
        ),
        "max_partial": MAX_PARTIAL,
    }


def prompt(title: str, files: dict[str, str], rules: str, answer: str) -> str:
    """Assemble a family prompt: what each file holds, the rules, the answer shape, shared rules."""
    listing = "\n".join(f"- `{name}`: {text}" for name, text in files.items())
    return (
        f"# {title}\n\n## Input files (all three are in the working directory)\n{listing}\n\n"
        f"## Rules\n{rules.strip()}\n\n## Answer shape (`answer.json`)\n{answer.strip()}\n\n"
        f"{SHARED_RULES}"
    )
