"""Wall time of the whole check suite against one image, and its parts.

With `--image name@digest` (default: the image of dist/build.json, pushed by `nox -s
build`) it runs exactly what `python -m pipeline verify` runs — anonymous pull, N
containers, the suite — and prints the time of each stage; with `--url` it runs the
suite against servers already running. Goal on the 2-core reference machine: the
whole suite against one image in under 5 minutes (the 60 s timeout check overlaps
the rest when there are two or more containers). With `--shards N` it also runs the
N shards of the suite at once, one container each (what N CI matrix jobs do, on one
machine), and prints each shard's wall time and the merged run's (the longest shard).

    python benchmarks/bench_checks.py [--image REF | --url URL ...] [--parallel N ...] [--shards N ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from pipeline import config  # noqa: E402
from pipeline.checks.merge import merge  # noqa: E402
from pipeline.checks.results import SuiteResult  # noqa: E402
from pipeline.checks.run import target_for  # noqa: E402
from pipeline.checks.shards import Shard  # noqa: E402
from pipeline.checks.suite import run_suite  # noqa: E402
from pipeline.checks.target import Target  # noqa: E402
from pipeline.image.oci.image import parse_config  # noqa: E402
from pipeline.image.oci.layout import Layout  # noqa: E402
from pipeline.registry import local as localregistry  # noqa: E402
from pipeline.registry.pull import pull  # noqa: E402
from pipeline.runtime.runtime import ContainerRuntime  # noqa: E402

GOAL_S = 300.0


def _image_from_build() -> str:
    record = REPO_ROOT / "dist" / "build.json"
    if not record.exists():
        raise SystemExit("no --image given and no dist/build.json: run `nox -s build` first")
    data = json.loads(record.read_text())
    state = localregistry.status()
    if state is None:
        raise SystemExit("the local registry is not running: `python -m pipeline registry start`")
    return f"{state.address}/{data['repository']}@{data['manifest_digest']}"


def _report(label: str, result: SuiteResult, extra: dict[str, float]) -> None:
    groups: dict[str, float] = defaultdict(float)
    for check in result.checks:
        group = check.id.split("/", 1)[0]
        groups["image" if group == "image" else "cases"] += check.seconds
    counts = result.counts()
    print(
        f"{label}: {counts['total']} checks, {counts['failed']} failed, suite wall {result.seconds:.1f} s "
        f"(goal < {GOAL_S:.0f} s: {'met' if result.seconds + sum(extra.values()) < GOAL_S else 'MISSED'})"
    )
    for name, seconds in extra.items():
        print(f"  {name:<28} {seconds:7.1f} s")
    print(f"  {'checks, summed: image':<28} {groups['image']:7.1f} s (timeout check alone ~60 s)")
    print(f"  {'checks, summed: 32 cases':<28} {groups['cases']:7.1f} s")


def bench_image(image: str, parallels: list[int]) -> None:
    cfg = config.load()
    runtime = ContainerRuntime(cfg.runtime)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        pulled = pull(image, Path(tmp) / "oci")
        env = parse_config(Layout(Path(tmp) / "oci").read_blob(pulled.config_digest)).config.env_map()
    pull_s = time.monotonic() - started
    started = time.monotonic()
    runtime.pull(image)
    runtime_pull_s = time.monotonic() - started
    for n in parallels:
        started = time.monotonic()
        containers = [runtime.start(image, port=cfg.port) for _ in range(n)]
        start_s = time.monotonic() - started
        try:
            result = run_suite(
                [target_for(cfg, c.url, env) for c in containers], image=image, quiet=True, cases=cfg.curriculum.cases
            )
        finally:
            for c in containers:
                runtime.remove(c)
        _report(
            f"{n} container(s)",
            result,
            {"anonymous pull (checked)": pull_s, "runtime pull": runtime_pull_s, "start containers": start_s},
        )


def bench_shards(image: str, counts: list[int]) -> None:
    """Each shard on its own container, all at once; the merged record's wall time is the longest."""
    cfg = config.load()
    runtime = ContainerRuntime(cfg.runtime)
    with tempfile.TemporaryDirectory() as tmp:
        pulled = pull(image, Path(tmp) / "oci")
        env = parse_config(Layout(Path(tmp) / "oci").read_blob(pulled.config_digest)).config.env_map()
    runtime.pull(image)

    def one(shard: Shard) -> SuiteResult:
        container = runtime.start(image, port=cfg.port)
        try:
            return run_suite(
                [target_for(cfg, container.url, env)], image=image, quiet=True, shard=shard, cases=cfg.curriculum.cases
            )
        finally:
            runtime.remove(container)

    for n in counts:
        started = time.monotonic()
        with ThreadPoolExecutor(n) as pool:
            parts = list(pool.map(one, [Shard(i, n) for i in range(1, n + 1)]))
        wall = time.monotonic() - started
        merged = merge(parts)
        _report(f"{n} shard(s), one container each", merged, {"start, run and stop every shard": wall})
        for part in parts:
            print(
                f"  shard {part.shard}: {len(part.shard.jobs):2d} jobs, {len(part.checks):3d} checks, "
                f"{part.seconds:6.1f} s"
            )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--image", help="name@sha256:... (default: dist/build.json's image)")
    p.add_argument("--url", action="append", help="servers already running (instead of --image)")
    p.add_argument("--parallel", type=int, action="append", help="containers per run (default: 1 and 2)")
    p.add_argument(
        "--shards", type=int, action="append", default=[], help="also run the suite as N shards at once (repeatable)"
    )
    args = p.parse_args(argv)
    if args.url:
        result = run_suite(
            [Target(url=u) for u in args.url], image=args.url[0], quiet=True, cases=config.load().curriculum.cases
        )
        _report(f"{len(args.url)} server(s)", result, {})
        return 0
    image = args.image or _image_from_build()
    bench_image(image, args.parallel or [1, 2])
    if args.shards:
        bench_shards(image, args.shards)
    return 0


if __name__ == "__main__":
    sys.exit(main())
