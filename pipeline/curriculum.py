"""The curriculum: release.toml's `[curriculum]`, its cases in request order, and the file
the image serves them from.

What the task modules accept limits the choice. Both modules a release may serve implement
the API of docs/spec/families.md, "Module API": the first-party families in `env/families`
(the `local` profile) and the upstream task generator vendored under `vendor/` (the
`[[sources]]` file a profile's `tasks = "vendor:<source>"` names, RuvNet/metaharness's
`integrations/openenv-arena/arena_env/tasks.py`). Both serve the eight families of
`TASK_IDS` and refuse, in `make_task`, a difficulty outside {1, 2, 3}; the case IDs name
seeds as non-negative integers. Anything else is refused here, listing what is valid, before
a release builds anything.

The cases come in blocks: with `blocks = "difficulty-seed"`, one block per (difficulty,
seed) pair, difficulties outermost, each block holding one case per family in the declared
order. External tasks follow a block (`after_block`, counted from 1; pipeline.config checks
it names one).

The image carries the cases as `env/curriculum.json` (`CURRICULUM_PATH`), written by the
build from this declaration; env/catalog.py serves exactly those. The check suite, the
request, tasks.jsonl and the dataset card follow the same declaration.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

from pipeline._io import canonical_json
from pipeline.errors import ConfigError

# docs/spec/families.md's TASK_IDS, in its order (the default order within a block).
TASK_FAMILIES: tuple[str, ...] = (
    "software_change",
    "industrial_schedule",
    "science_calibration",
    "office_reconciliation",
    "finance_ledger",
    "math_route",
    "security_triage",
    "media_timeline",
)
# What `make_task` accepts, in the vendored upstream generator and in env/families alike.
DIFFICULTIES: tuple[int, ...] = (1, 2, 3)
BLOCK_ORDERS: tuple[str, ...] = ("difficulty-seed",)
# Where the image holds the cases, relative to the checkout and to the app dir.
CURRICULUM_PATH = "env/curriculum.json"
LIMITED_BY = (
    "the task modules a release serves, the upstream task generator vendored under vendor/ "
    "(RuvNet/metaharness, arena_env/tasks.py) and the first-party families in env/families, "
    "both implement docs/spec/families.md's make_task"
)
_ONE = {"families": "family", "difficulties": "difficulty", "seeds": "seed"}
_CASE = re.compile(r"^(?P<family>[a-z_]+)-d(?P<difficulty>\d+)-s(?P<seed>\d+)$")


@dataclass(frozen=True)
class Case:
    """One curriculum case; its inputs depend on these three fields only."""

    family: str
    difficulty: int
    seed: int

    @property
    def id(self) -> str:
        return f"{self.family}-d{self.difficulty}-s{self.seed}"

    @classmethod
    def parse(cls, case_id: str) -> Case:
        """The case a case ID names (`<family>-d<difficulty>-s<seed>`); ValueError if none."""
        m = _CASE.match(case_id)
        if not m or m["family"] not in TASK_FAMILIES or int(m["difficulty"]) not in DIFFICULTIES:
            raise ValueError(f"not a curriculum case id: {case_id!r}")
        return cls(m["family"], int(m["difficulty"]), int(m["seed"]))


@dataclass(frozen=True)
class Curriculum:
    """`[curriculum]`: families (their order is the order within a block), difficulties,
    seeds, and how blocks are formed."""

    families: tuple[str, ...]
    difficulties: tuple[int, ...]
    seeds: tuple[int, ...]
    blocks_order: str = "difficulty-seed"

    def blocks(self) -> tuple[tuple[Case, ...], ...]:
        """The blocks in request order, each one case per family."""
        return tuple(tuple(Case(f, d, s) for f in self.families) for d in self.difficulties for s in self.seeds)

    @property
    def cases(self) -> tuple[Case, ...]:
        """Every case in request order."""
        return tuple(c for block in self.blocks() for c in block)

    def file_bytes(self) -> bytes:
        """The image's `env/curriculum.json`: the cases in request order (env/catalog.py)."""
        return (
            canonical_json(
                {"cases": [{"family": c.family, "difficulty": c.difficulty, "seed": c.seed} for c in self.cases]}
            )
            + b"\n"
        )


def _refuse(key: str, value: object, valid: list[str], why: str, close_to: str | None = None) -> ConfigError:
    close = difflib.get_close_matches(close_to, valid, n=1, cutoff=0.6) if close_to else []
    hint = (f"did you mean {close[0]!r}? " if close else "") + why
    return ConfigError(
        f"curriculum.{key} holds {value!r}, which no task module serves",
        expected="one of " + ", ".join(valid),
        actual=value,
        hint=hint,
    )


def _repeated(key: str, values: list[Any]) -> None:
    seen = [v for i, v in enumerate(values) if v in values[:i]]
    if seen:
        raise ConfigError(
            f"curriculum.{key} repeats {seen[0]!r}, which would repeat its cases",
            expected=f"each {_ONE[key]} once",
            actual=values,
            hint="a case (family, difficulty, seed) is served and listed once; remove the repeat",
        )


def parse(table: dict[str, Any]) -> Curriculum:
    """`[curriculum]`, its types already checked by the model (pipeline.config); ConfigError
    listing what is valid for an unknown family, an unsupported difficulty, a negative seed,
    an unknown block order or a repeated case. Its message names the key, not the file: the
    model's loader puts the file it read in front."""
    for key in ("families", "difficulties", "seeds"):
        if not table[key]:
            raise ConfigError(
                f"curriculum.{key} is empty",
                expected=f"at least one {_ONE[key]}",
                actual=table[key],
                hint="a curriculum needs a family, a difficulty and a seed",
            )
    for family in table["families"]:
        if family not in TASK_FAMILIES:
            raise _refuse(
                "families",
                family,
                list(TASK_FAMILIES),
                f"{LIMITED_BY}; they serve these eight families (TASK_IDS) and no other",
                close_to=family,
            )
    for difficulty in table["difficulties"]:
        if difficulty not in DIFFICULTIES:
            raise _refuse(
                "difficulties",
                difficulty,
                [str(d) for d in DIFFICULTIES],
                f"{LIMITED_BY}, which refuses any difficulty but 1, 2 and 3",
            )
    for seed in table["seeds"]:
        if seed < 0:
            raise ConfigError(
                f"curriculum.seeds holds {seed}, a negative seed",
                expected="integers >= 0",
                actual=seed,
                hint="a case ID names its seed as `-s<digits>`; choose a non-negative seed",
            )
    order = table["blocks"]
    if order not in BLOCK_ORDERS:
        raise ConfigError(
            f"curriculum.blocks is {order!r}, which names no block order",
            expected="one of " + ", ".join(repr(o) for o in BLOCK_ORDERS),
            actual=order,
            hint='"difficulty-seed": one block per (difficulty, seed) pair, one case per family',
        )
    for key in ("families", "difficulties", "seeds"):
        _repeated(key, list(table[key]))
    return Curriculum(tuple(table["families"]), tuple(table["difficulties"]), tuple(table["seeds"]), order)
