"""Join the N shard records of one sharded suite run into the record an unsharded run writes.

Each shard's claims are checked, not trusted: the set of shards is complete (1..N, once
each, one N), they verified one image, each ran exactly the jobs the plan gives it
(recomputed here), each check belongs to one of its shard's jobs, no check is reported
twice, and facts every shard observed (the pulled layers) agree. The checks are then
put in the unsharded order; targets are joined and the wall time is the longest shard's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..errors import VerificationError
from .results import CheckResult, SuiteResult
from .shards import Shard
from .suite import job_costs, shard_jobs


def _group(check_id: str) -> str:
    """The job group of a check id or job key: `image` or a case id."""
    return check_id.split("/", 1)[0]


def _complete(parts: Sequence[SuiteResult]) -> list[SuiteResult]:
    """The shards sorted by index, refused unless they are exactly 1..N of one N."""
    if not parts:
        raise VerificationError("nothing to merge", expected="the record of every shard", actual="none")
    shards = [p.shard for p in parts]
    if any(s is None for s in shards):
        raise VerificationError("a record to merge is not a shard record", hint="write shards with --shard I/N")
    counts = sorted({s.count for s in shards})  # type: ignore[union-attr]
    if len(counts) != 1:
        raise VerificationError("the records come from different shard counts", expected="one N", actual=counts)
    count = counts[0]
    indices = sorted(s.index for s in shards)  # type: ignore[union-attr]
    if indices != list(range(1, count + 1)):
        missing = sorted(set(range(1, count + 1)) - set(indices))
        repeated = sorted({i for i in indices if indices.count(i) > 1})
        raise VerificationError(f"the shards of a {count}-way run are not all here exactly once",
                                expected=f"shards 1..{count}", actual=f"missing {missing}, repeated {repeated}",
                                hint="pass every shard's checks.json once (a failed shard job must be re-run)")
    return sorted(parts, key=lambda p: p.shard.index)  # type: ignore[union-attr]


def _same(values: list, what: str) -> None:
    distinct = []
    for v in values:
        if v not in distinct:
            distinct.append(v)
    if len(distinct) > 1:
        raise VerificationError(f"the shards disagree on {what}", expected="one value", actual=distinct)


def _owned(part: SuiteResult, shard: Shard) -> None:
    """The shard ran exactly its planned jobs and reports only checks of those jobs."""
    planned = shard_jobs(shard)
    if shard.jobs != planned:
        raise VerificationError(f"shard {shard} did not run the jobs the plan gives it",
                                expected=list(planned), actual=list(shard.jobs))
    groups = {_group(k) for k in planned}
    stray = [c.id for c in part.checks if _group(c.id) not in groups]
    if stray:
        raise VerificationError(f"shard {shard} reports checks of jobs it does not own",
                                expected=sorted(groups), actual=stray[:10])
    empty = sorted(groups - {_group(c.id) for c in part.checks})
    if empty:
        raise VerificationError(f"shard {shard} reports no check for some of its jobs",
                                expected="at least one check per job", actual=empty)


def _ordered(parts: list[SuiteResult]) -> tuple[CheckResult, ...]:
    """Every check in the unsharded order: the plan's job order, each job's checks as recorded."""
    owner = {key: p for p in parts for key in p.shard.jobs}  # type: ignore[union-attr]
    done: set[tuple[int, str]] = set()
    out: list[CheckResult] = []
    for key, _ in job_costs():
        part = owner[key]
        slot = (part.shard.index, _group(key))  # type: ignore[union-attr]
        # A shard holding both image jobs recorded them in order under one group.
        if slot not in done:
            done.add(slot)
            out += [c for c in part.checks if _group(c.id) == slot[1]]
    ids = [c.id for c in out]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise VerificationError("a check is reported more than once", expected="each check id once",
                                actual=repeated[:10])
    return tuple(out)


def merge(parts: Sequence[SuiteResult]) -> SuiteResult:
    """One record, equal to an unsharded run's apart from targets and timings."""
    parts = _complete(parts)
    for part in parts:
        _owned(part, part.shard)  # type: ignore[arg-type]
    _same([p.image for p in parts], "the image they verified")
    _same([p.layers for p in parts if p.layers], "the layers of the pulled image")
    schemas = [p.schema for p in parts if p.schema]
    _same(schemas, "the served schema")
    externals = [p.external for p in parts if p.external]
    if len(externals) > 1:
        raise VerificationError("more than one shard verified the external tasks", expected="one shard (shard 1)",
                                actual=[p.shard.index for p in parts if p.external])  # type: ignore[union-attr]
    first = parts[0]
    return replace(first, targets=tuple(t for p in parts for t in p.targets), checks=_ordered(parts),
                   seconds=max(p.seconds for p in parts), schema=schemas[0] if schemas else {},
                   external=externals[0] if externals else (),
                   layers=next((p.layers for p in parts if p.layers), ()), shard=None)
