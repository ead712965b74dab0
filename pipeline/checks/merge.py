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

from pipeline.checks.results import CheckResult, SuiteResult
from pipeline.checks.shards import Shard
from pipeline.checks.suite import job_costs, shard_jobs
from pipeline.curriculum import Case
from pipeline.errors import VerificationError


def _group(check_id: str) -> str:
    """The job group of a check id or job key: `image` or a case id."""
    return check_id.split("/", 1)[0]


def _complete(parts: Sequence[SuiteResult]) -> list[tuple[Shard, SuiteResult]]:
    """(shard, record) sorted by shard, refused unless the shards are exactly 1..N of one N."""
    if not parts:
        raise VerificationError("nothing to merge", expected="the record of every shard", actual="none")
    pairs = [(p.shard, p) for p in parts if p.shard is not None]
    if len(pairs) != len(parts):
        raise VerificationError("a record to merge is not a shard record", hint="write shards with --shard I/N")
    counts = sorted({s.count for s, _ in pairs})
    if len(counts) != 1:
        raise VerificationError("the records come from different shard counts", expected="one N", actual=counts)
    count = counts[0]
    indices = sorted(s.index for s, _ in pairs)
    if indices != list(range(1, count + 1)):
        missing = sorted(set(range(1, count + 1)) - set(indices))
        repeated = sorted({i for i in indices if indices.count(i) > 1})
        raise VerificationError(
            f"the shards of a {count}-way run are not all here exactly once",
            expected=f"shards 1..{count}",
            actual=f"missing {missing}, repeated {repeated}",
            hint="pass every shard's checks.json once (a failed shard job must be re-run)",
        )
    return sorted(pairs, key=lambda pair: pair[0].index)


def _same(values: list, what: str) -> None:
    distinct = []
    for v in values:
        if v not in distinct:
            distinct.append(v)
    if len(distinct) > 1:
        raise VerificationError(f"the shards disagree on {what}", expected="one value", actual=distinct)


def _external_groups(part: SuiteResult) -> set[str]:
    """The external tasks whose repair checks this record carries (`<task_id>/<check>`)."""
    return {e["task_id"] for e in part.external}


def _owned(shard: Shard, part: SuiteResult, cases: Sequence[Case]) -> None:
    """The shard ran exactly its planned jobs and reports only checks of those jobs (and,
    for the shard that verified the external tasks, their repair checks)."""
    planned = shard_jobs(shard, cases)
    if shard.jobs != planned:
        raise VerificationError(
            f"shard {shard} did not run the jobs the plan gives it", expected=list(planned), actual=list(shard.jobs)
        )
    groups = {_group(k) for k in planned}
    stray = [c.id for c in part.checks if _group(c.id) not in groups | _external_groups(part)]
    if stray:
        raise VerificationError(
            f"shard {shard} reports checks of jobs it does not own", expected=sorted(groups), actual=stray[:10]
        )
    empty = sorted(groups - {_group(c.id) for c in part.checks})
    if empty:
        raise VerificationError(
            f"shard {shard} reports no check for some of its jobs", expected="at least one check per job", actual=empty
        )


def _of_runtime(check_id: str, suffix: str | None) -> bool:
    """Whether a check id is of the runtime whose ids end in `suffix` (None: any runtime)."""
    if suffix is None:
        return True
    return check_id.endswith(suffix) if suffix else "@" not in check_id


def _ordered(pairs: list[tuple[Shard, SuiteResult]], cases: Sequence[Case]) -> tuple[CheckResult, ...]:
    """Every check in the unsharded order: runtime by runtime (each shard ran its jobs under every
    engine, one after the other), the plan's job order, each job's checks as recorded."""
    owner = {key: (shard, part) for shard, part in pairs for key in shard.jobs}
    out: list[CheckResult] = []
    # The check-id suffix of each runtime, in the order the engines ran ("" the first's; a run
    # without runtimes, `checks --url`, is one pass over every check).
    suffixes: list[str | None] = [str(r.get("suffix", "")) for r in pairs[0][1].runtimes] or [None]
    for suffix in suffixes:
        done: set[tuple[int, str]] = set()
        for key, _ in job_costs(cases):
            shard, part = owner[key]
            slot = (shard.index, _group(key))
            # A shard holding both image jobs recorded them in order under one group.
            if slot not in done:
                done.add(slot)
                out += [c for c in part.checks if _group(c.id) == slot[1] and _of_runtime(c.id, suffix)]
    # As in an unsharded run, the external tasks' repair checks come after the suite's.
    out += [c for _, part in pairs for c in part.checks if _group(c.id) in _external_groups(part)]
    ids = [c.id for c in out]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise VerificationError(
            "a check is reported more than once", expected="each check id once", actual=repeated[:10]
        )
    return tuple(out)


def _runtimes(records: Sequence[SuiteResult], checks: tuple[CheckResult, ...]) -> tuple[dict, ...]:
    """The runtimes of the merged record: every shard ran under the same engines, in the same
    order, with the same security; the isolation mode is the one shard's that ran the image
    checks, and each runtime's counts and containers are the merged ones."""

    def same(r: dict) -> tuple:
        return (r.get("name"), r.get("suffix"), r.get("engine", {}).get("version"), r.get("container_security"))

    _same([[same(r) for r in p.runtimes] for p in records], "the runtimes they ran under")
    if not records[0].runtimes:
        return ()
    externals = {g for p in records for g in _external_groups(p)}
    out = []
    for position, first in enumerate(records[0].runtimes):
        modes = [p.runtimes[position].get("isolation") for p in records if p.runtimes[position].get("isolation")]
        _same(modes, f"the isolation mode under {first.get('name')}")
        mine = SuiteResult(
            image="",
            targets=(),
            seconds=0.0,
            checks=tuple(
                c for c in checks if _group(c.id) not in externals and _of_runtime(c.id, str(first.get("suffix", "")))
            ),
        )
        out.append(
            {
                **first,
                "isolation": modes[0] if modes else None,
                "containers": sum(p.runtimes[position].get("containers", 0) for p in records),
                "summary": mine.counts(),
            }
        )
    return tuple(out)


def merge(parts: Sequence[SuiteResult], cases: Sequence[Case]) -> SuiteResult:
    """One record, equal to an unsharded run's apart from targets and timings; `cases` are the
    run's cases (release.toml's [curriculum]), from which the shard plan is recomputed."""
    pairs = _complete(parts)
    for shard, part in pairs:
        _owned(shard, part, cases)
    records = [part for _, part in pairs]
    _same([p.image for p in records], "the image they verified")
    _same([p.layers for p in records if p.layers], "the layers of the pulled image")
    _same([p.config for p in records if p.config], "the config blob of the pulled image")
    schemas = [p.schema for p in records if p.schema]
    _same(schemas, "the served schema")
    externals = [(shard.index, part.external) for shard, part in pairs if part.external]
    if len(externals) > 1:
        raise VerificationError(
            "more than one shard verified the external tasks",
            expected="one shard (shard 1)",
            actual=[index for index, _ in externals],
        )
    checks = _ordered(pairs, cases)
    return replace(
        records[0],
        targets=tuple(t for p in records for t in p.targets),
        checks=checks,
        runtimes=_runtimes(records, checks),
        seconds=max(p.seconds for p in records),
        schema=schemas[0] if schemas else {},
        external=externals[0][1] if externals else (),
        layers=next((p.layers for p in records if p.layers), ()),
        config=next((p.config for p in records if p.config), None),
        shard=None,
    )
