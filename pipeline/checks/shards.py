"""The shard plan: which suite jobs each of N CI jobs runs (`--shard I/N`).

The plan is a pure function of the suite's job list (keys and estimated costs, in
request order) and N, so every matrix job computes the same plan without talking to
the others, and the merge can recompute it to check what each shard claims. Jobs are
placed longest first on the least loaded shard (ties: the lower shard number), which
puts the minute-long timeout check alone on a shard while the others share the rest.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.errors import ConfigError

_SPEC = re.compile(r"^(?P<index>[1-9][0-9]*)/(?P<count>[1-9][0-9]*)$")


@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count` (1-based), and the keys of the jobs it ran."""

    index: int
    count: int
    jobs: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Shard:
        """`I/N` as given on the command line (1 <= I <= N)."""
        m = _SPEC.match(text.strip())
        if not m or int(m["index"]) > int(m["count"]):
            raise ConfigError("not a shard", expected="I/N with 1 <= I <= N, e.g. 2/4", actual=text)
        return cls(int(m["index"]), int(m["count"]))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "count": self.count, "jobs": list(self.jobs)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Shard:
        return cls(int(d["index"]), int(d["count"]), tuple(str(j) for j in d["jobs"]))


def plan(jobs: Sequence[tuple[str, float]], count: int) -> tuple[tuple[str, ...], ...]:
    """Job keys per shard (shard 1 first), each shard's keys in the given job order.

    `jobs` is (key, estimated seconds) in the suite's order. Every shard gets at least
    one job, so `count` may not exceed the number of jobs.
    """
    keys = [k for k, _ in jobs]
    if len(set(keys)) != len(keys):
        raise ConfigError("suite job keys are not unique", actual=keys)
    if not 1 <= count <= len(jobs):
        raise ConfigError(
            "shard count out of range", expected=f"1 to {len(jobs)} (one job per shard at most)", actual=count
        )
    load = [0.0] * count
    members: list[list[int]] = [[] for _ in range(count)]
    # Longest first; equal costs keep the suite's order, so the plan is deterministic.
    for position in sorted(range(len(jobs)), key=lambda i: (-jobs[i][1], i)):
        # Empty shards first, so that no shard is left without a job.
        target = min(range(count), key=lambda s: (bool(members[s]), load[s], s))
        members[target].append(position)
        load[target] += jobs[position][1]
    return tuple(tuple(keys[i] for i in sorted(m)) for m in members)
