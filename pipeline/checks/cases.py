"""The 32-case curriculum of docs/spec/families.md, restated so the suite does not import
env/."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipeline.checks.solvers import FAMILIES

# Blocks of eight (one case per family), in request order.
BLOCKS = ((1, 101), (1, 307), (2, 101), (2, 307))
_CASE = re.compile(r"^(?P<family>[a-z_]+)-d(?P<difficulty>[123])-s(?P<seed>\d+)$")


@dataclass(frozen=True)
class Case:
    family: str
    difficulty: int
    seed: int

    @property
    def id(self) -> str:
        return f"{self.family}-d{self.difficulty}-s{self.seed}"

    @classmethod
    def parse(cls, case_id: str) -> Case:
        m = _CASE.match(case_id)
        if not m or m["family"] not in FAMILIES:
            raise ValueError(f"not a curriculum case id: {case_id!r}")
        return cls(m["family"], int(m["difficulty"]), int(m["seed"]))


def blocks() -> list[list[Case]]:
    """The four blocks of eight cases, each in family order."""
    return [[Case(f, d, s) for f in FAMILIES] for d, s in BLOCKS]


def all_cases() -> list[Case]:
    """All 32 cases in request order."""
    return [c for block in blocks() for c in block]
