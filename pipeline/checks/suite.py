"""Run the whole check suite against one or more servers of the same image.

Each target (a container, or a local server) gets one worker thread holding one
OpenEnv session; jobs (the slow timeout check first, then the image checks, then the
declared cases) are taken from a shared queue, so several containers work in parallel and
the 60 s timeout check overlaps the rest. With a shard (`I/N`), only the jobs the shard
plan gives shard I run; `merge.merge` joins the N results into the unsharded record.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.checks import case_checks, image_checks
from pipeline.checks.client import ServerError, Session
from pipeline.checks.results import CheckResult, SuiteResult
from pipeline.checks.shards import Shard, plan
from pipeline.checks.target import Target
from pipeline.curriculum import Case
from pipeline.progress import say

# Reconnect attempts after a dropped session: the server frees a closed session
# asynchronously, so an immediate reconnect can briefly meet the capacity limit.
RECONNECT_TRIES = 10
RECONNECT_PAUSE_S = 0.5
# Estimated seconds of one job, for the shard plan only (a wrong guess unbalances the
# shards, it never changes a result): the timeout check waits out the shell timeout;
# the image checks and one case take a few seconds against a container.
JOB_COST_S = {"timeout": float(image_checks.SHELL_TIMEOUT_S + image_checks.TIMEOUT_SLACK_S), "image": 5.0, "case": 2.0}


@dataclass(frozen=True)
class _Job:
    kind: str
    case: Case
    index: int

    @property
    def key(self) -> str:
        """Stable name in the shard plan: `image`, `image/timeout` or the case id."""
        return {"image": "image", "timeout": "image/timeout"}.get(self.kind, self.case.id)


def _jobs(cases: Sequence[Case], image_case: Case, with_timeout: bool) -> list[_Job]:
    jobs = [_Job("timeout", image_case, 1)] if with_timeout else []
    jobs.append(_Job("image", image_case, 0))
    jobs += [_Job("case", c, 2 + i) for i, c in enumerate(cases)]
    return jobs


def _in_order(jobs: Sequence[_Job]) -> list[_Job]:
    """The order results are recorded in (image checks, timeout check, then the cases)."""
    return sorted(jobs, key=lambda j: j.index)


def job_costs(cases: Sequence[Case], *, with_timeout: bool = True) -> list[tuple[str, float]]:
    """(job key, estimated seconds) of the suite's jobs in recorded order: the plan's input."""
    cases = list(cases)
    return [(j.key, JOB_COST_S[j.kind]) for j in _in_order(_jobs(cases, cases[0], with_timeout))]


def shard_jobs(shard: Shard, cases: Sequence[Case], *, with_timeout: bool = True) -> tuple[str, ...]:
    """The job keys the plan gives `shard`."""
    return plan(job_costs(cases, with_timeout=with_timeout), shard.count)[shard.index - 1]


JOIN_POLL_S = 0.25


def _drain(work: queue.Queue[_Job]) -> None:
    while True:
        try:
            work.get_nowait()
        except queue.Empty:
            return


class _Worker(threading.Thread):
    def __init__(self, n: int, target: Target, jobs: queue.Queue[_Job], sink: _Sink) -> None:
        super().__init__(name=f"checks-{n}", daemon=True)
        self.target, self.jobs, self.sink = target, jobs, sink
        # Disjoint seed ranges per worker keep every reset seed in the run distinct.
        self.seeds = case_checks.seed_stream(1_000 + n * 1_000_000)
        self.session: Session | None = None

    def _connect(self) -> Session:
        last: Exception | None = None
        for _ in range(RECONNECT_TRIES):
            session = Session(self.target.url)
            try:
                session.open()
                return session
            except (ServerError, ConnectionError, OSError, RuntimeError) as exc:
                last = exc
                time.sleep(RECONNECT_PAUSE_S)
        raise ServerError(f"cannot open a session on {self.target.url}: {last}")

    def _drop(self) -> None:
        if self.session is not None:
            try:
                self.session.close()
            except (ServerError, ConnectionError, OSError, RuntimeError):
                pass
            self.session = None

    def run(self) -> None:
        while True:
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                break
            started = time.monotonic()
            try:
                if self.session is None:
                    self.session = self._connect()
                results, served = self._run(job)
            except ServerError as exc:
                results, served = (
                    [
                        CheckResult(
                            f"{self._prefix(job)}/session",
                            False,
                            time.monotonic() - started,
                            observed=f"server error: {exc}",
                            expected="a working session",
                        )
                    ],
                    {},
                )
            except Exception as exc:
                results, served = (
                    [
                        CheckResult(
                            f"{self._prefix(job)}/suite-error",
                            False,
                            time.monotonic() - started,
                            observed=f"{type(exc).__name__}: {exc}",
                            expected="the job runs to its end",
                        )
                    ],
                    {},
                )
            if any("server error" in str(r.observed) for r in results if not r.passed):
                # The session may be broken; start the next job on a fresh one.
                self._drop()
            self.sink.put(job, results, served)
        self._drop()

    @staticmethod
    def _prefix(job: _Job) -> str:
        return job.case.id if job.kind == "case" else "image"

    def _run(self, job: _Job) -> tuple[list[CheckResult], dict[str, Any]]:
        assert self.session is not None
        if job.kind == "timeout":
            return image_checks.timeout_check(self.session, job.case, next(self.seeds)), {}
        if job.kind == "image":
            return image_checks.run_image_checks(self.session, self.target, job.case, self.seeds)
        return case_checks.run_case(self.session, job.case, self.seeds, self.target), {}


class _Sink:
    """Collects job results and prints progress lines."""

    def __init__(self, total: int, quiet: bool) -> None:
        self.total, self.quiet = total, quiet
        self.lock = threading.Lock()
        self.by_job: dict[int, list[CheckResult]] = {}
        self.schema: dict[str, Any] = {}
        self.started = time.monotonic()

    def put(self, job: _Job, results: list[CheckResult], served: dict[str, Any]) -> None:
        with self.lock:
            self.by_job[job.index] = results
            if served:
                self.schema = served
            if not self.quiet:
                failed = sum(not r.passed for r in results)
                label = job.case.id if job.kind == "case" else f"image ({job.kind})"
                verdict = "ok" if not failed else f"{failed} FAILED"
                say(
                    f"  checks: {len(self.by_job)}/{self.total} done in "
                    f"{time.monotonic() - self.started:.0f} s  {label}: {len(results)} checks, {verdict}"
                )


def run_suite(
    targets: Sequence[Target],
    *,
    cases: Sequence[Case],
    image: str = "",
    quiet: bool = False,
    with_timeout: bool = True,
    shard: Shard | None = None,
) -> SuiteResult:
    """Run every check of docs/spec/verification.md against `targets` (servers of one image).

    `cases` are the cases given per-case checks (a release: every case of its [curriculum],
    in request order; the image checks use the first); `with_timeout=False` leaves
    out the minute-long timeout check (for quick runs; a release never does); `shard`
    runs only the jobs the shard plan gives it, and records which.
    """
    if not targets:
        raise ValueError("run_suite needs at least one target")
    cases = list(cases)
    if not cases:
        raise ValueError("run_suite needs at least one case")
    started = time.monotonic()
    jobs = _jobs(cases, cases[0], with_timeout)
    if shard is not None:
        mine = shard_jobs(shard, cases, with_timeout=with_timeout)
        jobs = [j for j in jobs if j.key in mine]
        shard = Shard(shard.index, shard.count, mine)
    work: queue.Queue[_Job] = queue.Queue()
    for job in jobs:
        work.put(job)
    sink = _Sink(len(jobs), quiet)
    workers = [_Worker(i, t, work, sink) for i, t in enumerate(targets)]
    for w in workers:
        w.start()
    try:
        for w in workers:
            while w.is_alive():
                # A timed wait: Ctrl-C may wake a worker thread rather than this one, and a
                # wait without end would notice it only when every job has run.
                w.join(JOIN_POLL_S)
    except KeyboardInterrupt:
        _drain(work)  # the workers end after their current job (daemon threads: no wait)
        raise
    ordered: list[CheckResult] = []
    for job in _in_order(jobs):
        ordered += sink.by_job.get(
            job.index,
            [CheckResult(f"{_Worker._prefix(job)}/not-run", False, 0.0, observed="job never ran", expected="run")],
        )
    return SuiteResult(
        image=image or targets[0].url,
        targets=tuple(t.url for t in targets),
        checks=tuple(ordered),
        seconds=time.monotonic() - started,
        schema=sink.schema,
        shard=shard,
    )
