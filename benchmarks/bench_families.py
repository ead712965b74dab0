"""Throughput of the first-party task families: generation, grading and oracle time.

Prints, per family and difficulty, tasks generated per second, gradings per second and
the mean oracle time, then the time to generate every case of release.toml's [curriculum]
(target < 1 s).
Run: python benchmarks/bench_families.py [--seeds N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from env import families
from pipeline import config


def _rate(count: int, seconds: float) -> str:
    return f"{count / seconds:10.0f}" if seconds > 0 else "       inf"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=200, help="tasks per family and difficulty")
    args = parser.parse_args(argv)

    print(f"{'family':24} d {'gen/s':>10} {'grade/s':>10} {'oracle ms':>10} {'max gen ms':>10}")
    for family in families.TASK_IDS:
        for difficulty in (1, 2, 3):
            seeds = range(args.seeds)
            slowest = 0.0
            start = time.perf_counter()
            tasks = []
            for seed in seeds:
                t0 = time.perf_counter()
                tasks.append(families.make_task(family, seed, difficulty))
                slowest = max(slowest, time.perf_counter() - t0)
            generating = time.perf_counter() - start
            start = time.perf_counter()
            for task in tasks:
                families.grade(task, task["expected"])
            grading = time.perf_counter() - start
            start = time.perf_counter()
            for task in tasks:
                families.oracle_answer(task)
            oracle = time.perf_counter() - start
            print(
                f"{family:24} {difficulty} {_rate(len(tasks), generating)} {_rate(len(tasks), grading)} "
                f"{1000 * oracle / len(tasks):10.2f} {1000 * slowest:10.2f}"
            )

    cases = config.load().curriculum.cases
    start = time.perf_counter()
    for case in cases:
        families.make_task(case.family, case.seed, case.difficulty)
    elapsed = time.perf_counter() - start
    print(f"all {len(cases)} curriculum cases generated in {elapsed * 1000:.1f} ms (target < 1000 ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
