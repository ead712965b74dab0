"""What a container of the image costs to start, and what `python3` costs in an action.

Each round starts the image as the release's checks do (the budget's limits, a user
namespace, the port published on loopback), waits for /health, and reads the server's
CPU time then (utime + stime of the container's PID 1, from /proc on this host); then
times `python3 -c 'import json, csv, subprocess'` in the container (bash's `time`, the
CPU an agent's small script spends before its first line). Prints the median and the
worst of each. Default image: the last build's (dist/build.json, from its OCI layout, as
`nox -s serve` loads it); `--image NAME` takes one already in the engine's store, e.g.
an earlier release's, to compare two bases.

    python benchmarks/bench_start.py [--image NAME] [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from pipeline import config  # noqa: E402
from pipeline.errors import ReleaseError  # noqa: E402
from pipeline.runtime.limits import ContainerLimits  # noqa: E402
from pipeline.runtime.runtime import ContainerRuntime  # noqa: E402
from pipeline.runtime.serve import built_record, load_built  # noqa: E402

ACTION = "import json, csv, subprocess"


def _cpu_seconds(proc_root: str) -> float:
    """utime + stime of the process whose /proc/<PID>/root is `proc_root`, in seconds."""
    fields = (Path(proc_root).parent / "stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _action_cpu(runtime: ContainerRuntime, cid: str) -> float:
    script = f"TIMEFORMAT='%U %S'; time python3 -c '{ACTION}'"
    out = runtime._cli("exec", cid, "bash", "-c", script)
    user, system = out.stderr.decode().split()[-2:]
    return float(user) + float(system)


def bench(image: str | None, rounds: int) -> None:
    cfg = config.load()
    runtime = ContainerRuntime(cfg.runtime)
    if image is None:
        record = built_record(REPO_ROOT / "dist" / "build.json")
        image = load_built(runtime, record)
    limits = ContainerLimits.from_budgets(cfg.budgets["procedural"])
    healthy, server_cpu, action_cpu = [], [], []
    for n in range(rounds):
        container = runtime.run(image, port=cfg.port, limits=limits)
        try:
            healthy.append(runtime.wait_healthy(container))
            proc_root = runtime.host_root(container)
            if proc_root is None:
                raise SystemExit("bench_start: cannot read the server's /proc entry (run as root, with a local engine)")
            server_cpu.append(_cpu_seconds(proc_root))
            action_cpu.extend(_action_cpu(runtime, container.id) for _ in range(3))
        finally:
            runtime.remove(container)
        print(
            f"  round {n + 1}/{rounds}: healthy after {healthy[-1]:.2f} s, server CPU {server_cpu[-1]:.2f} s",
            flush=True,
        )
    print(f"image {image}")
    for label, values in (
        ("to /health (wall)", healthy),
        ("server CPU at /health", server_cpu),
        (f"python3 -c '{ACTION}' (CPU)", action_cpu),
    ):
        print(f"  {label:<52} median {statistics.median(values):6.2f} s, worst {max(values):6.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", help="an image in the engine's store (default: dist/build.json's)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    try:
        bench(args.image, args.rounds)
    except ReleaseError as exc:
        raise SystemExit(f"bench_start: {exc.one_line()}") from None


if __name__ == "__main__":
    main()
