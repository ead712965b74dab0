"""Wall time of `repair-checks` per repair image, and the share spent waiting on the container.

By default it starts a throwaway local registry, builds the stand-in repair images of
tests/checks/repair_standin (the good one and its broken variants; `--faults` picks
which, `slow-start` only on request: it waits 130 s by design) and runs on each, one
after the other, exactly what `python -m pipeline repair-checks` runs
(`pipeline.checks.external.check_image`). With `--image REF --task ID --reference FILE`
it times one image of any registry instead (e.g. a real MiMo image, where reachable).

Per image it prints the wall time and its parts: the anonymous pull (every blob checked),
the container engine (pull into its store, run, writable-layer measurements, removal),
start to healthy, `openenv validate`, the replies of the server (the episodes), and of
those the grader's own run time (the finishes). "Waiting on the container" is start to
healthy plus the server's replies. Goal on the 2-core reference machine: under 60 s per
image beyond the grader's own run time. Figures only; nothing is asserted.

    python benchmarks/bench_repair.py [--faults all|none|F,F...] [--image REF --task ID --reference FILE]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager, nullcontext
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from pipeline import config  # noqa: E402
from pipeline.checks import client, conformance, external, repair  # noqa: E402
from pipeline.registry import local as localregistry  # noqa: E402
from pipeline.runtime.limits import ExternalLimits  # noqa: E402
from pipeline.runtime.runtime import ContainerRuntime  # noqa: E402

GOAL_S = 60.0
TASK = "format-code-task-000666"
PARTS = ("anonymous pull", "engine", "start to healthy", "openenv validate", "server replies", "of which grading")


class _Clock:
    """Seconds spent in each part of one run, measured by wrapping the calls that make it."""

    def __init__(self) -> None:
        self.parts: dict[str, float] = defaultdict(float)

    @contextmanager
    def timing(self, part: str):
        started = time.monotonic()
        try:
            yield
        finally:
            self.parts[part] += time.monotonic() - started

    def wrap(self, owner, name: str, part: str, *, finish: bool = False):
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            # Session._call(self, fn, action): a finish action is graded.
            grading = finish and len(args) > 2 and isinstance(args[2], dict) and args[2].get("operation") == "finish"
            with self.timing(part), self.timing("of which grading") if grading else nullcontext():
                return original(*args, **kwargs)

        setattr(owner, name, timed)
        return original


def _instrument(clock: _Clock) -> list[tuple[object, str, object]]:
    """Wrap the calls of one run; returns what to restore."""
    wrapped = []
    for owner, name, part in (
        (external, "registry_facts", "anonymous pull"),
        (external, "pull", "anonymous pull"),
        (ContainerRuntime, "pull", "engine"),
        (ContainerRuntime, "run", "engine"),
        (ContainerRuntime, "remove", "engine"),
        (ContainerRuntime, "writable_bytes", "engine"),
        (repair, "wait_healthy", "start to healthy"),
        (conformance, "validate", "openenv validate"),
    ):
        wrapped.append((owner, name, clock.wrap(owner, name, part)))
    wrapped.append((client.Session, "_call", clock.wrap(client.Session, "_call", "server replies", finish=True)))
    return wrapped


def bench_one(label: str, image: str, task: str, reference: repair.ReferenceRepair) -> None:
    cfg = config.load()
    runtime = ContainerRuntime(cfg.runtime)
    budget = cfg.budgets["external"]
    plan = external.StartPlan(
        runtime=runtime, budget=budget.values, limits=ExternalLimits.from_budgets(budget), references={task: reference}
    )
    clock = _Clock()
    restore = _instrument(clock)
    started = time.monotonic()
    try:
        result = external.check_image(image, task, start=plan)
    finally:
        wall = time.monotonic() - started
        for owner, name, original in restore:
            setattr(owner, name, original)
        runtime.cleanup()
    parts = clock.parts
    waiting = parts["start to healthy"] + parts["server replies"]
    beyond = wall - parts["of which grading"]
    outcomes = result.outcomes()
    print(
        f"{label}: {wall:6.1f} s wall, {waiting / wall:4.0%} waiting on the container; "
        f"{beyond:5.1f} s beyond grading (goal < {GOAL_S:.0f} s: {'met' if beyond < GOAL_S else 'MISSED'}); "
        f"{len(outcomes['passed'])} passed, {len(outcomes['failed'])} failed "
        f"{outcomes['failed'] or ''}; writable layer peak {result.writable_layer_peak_bytes or 0:,} bytes"
    )
    for part in PARTS:
        print(f"    {part:<18} {parts[part]:6.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", default="all", help="all, none, or a comma-separated list of faults")
    parser.add_argument("--image", help="time this image instead of the stand-ins (needs --task, --reference)")
    parser.add_argument("--task", default=TASK)
    parser.add_argument("--reference", type=Path)
    args = parser.parse_args()
    if args.image:
        if args.reference is None:
            parser.error("--image needs --reference")
        bench_one(args.image, args.image, args.task, repair.ReferenceRepair.read(args.reference))
        return
    from tests.checks.repair_standin import FAULTS, REFERENCE_SCRIPT, build_standins

    chosen = (
        tuple(f for f in FAULTS if f != "slow-start")
        if args.faults == "all"
        else ()
        if args.faults == "none"
        else tuple(args.faults.split(","))
    )
    reference = repair.ReferenceRepair.read(REFERENCE_SCRIPT)
    with tempfile.TemporaryDirectory(prefix="bench-repair-") as tmp:
        registry = localregistry.start(Path(tmp) / "registry")
        try:
            started = time.monotonic()
            standins = build_standins(registry, Path(tmp) / "work", task_id=TASK, faults=chosen)
            print(
                f"stand-ins built and pushed: {len(standins)} images in {time.monotonic() - started:.1f} s "
                "(the base cached in .release/ after the first build)"
            )
            for fault, standin in standins.items():
                bench_one(fault or "good", standin.reference, TASK, reference)
        finally:
            localregistry.stop(Path(tmp) / "registry")


if __name__ == "__main__":
    main()
