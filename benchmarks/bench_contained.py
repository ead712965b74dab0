"""What a contained host-mode server costs the test suite to start: forked from a
forkserver that imported the server's stack (tests/forked_server.py) against executed
afresh (tests/contained.py's `contained_argv`), as tests/env/conftest.py starts them.

For each way and round: seconds until /health answers, and the server's CPU by then
(PID 1 of its namespace, from /proc). The first forked start also pays for starting
the forkserver (its one import of the stack), printed apart. Median of the rounds.

    sudo python benchmarks/bench_contained.py [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from tests.curriculum import serve_the_declared_curriculum  # noqa: E402

serve_the_declared_curriculum()  # before anything imports env

from tests import forked_server  # noqa: E402
from tests.env.conftest import start_server  # noqa: E402


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _start_once(root: Path) -> tuple[float, float]:
    started = time.monotonic()
    server = start_server(Path(tempfile.mkdtemp(dir=root)))
    healthy = time.monotonic() - started
    try:
        return healthy, _cpu_s(server.contained.init_pid())
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: the server drops its shell commands to UID 2000")
    forkable = forked_server.forkable
    with tempfile.TemporaryDirectory(prefix="bench-contained-") as tmp:
        root = Path(tmp)
        first = _start_once(root)  # starts the forkserver
        print(f"first forked start (the forkserver imports the stack): healthy after {first[0]:.2f} s")
        figures = {}
        for way, can_fork in (("forked", forkable), ("executed", lambda argv: False)):
            forked_server.forkable = can_fork
            rounds = [_start_once(root) for _ in range(args.rounds)]
            figures[way] = (statistics.median(r[0] for r in rounds), statistics.median(r[1] for r in rounds))
        forked_server.forkable = forkable
    for way, (healthy, cpu) in figures.items():
        print(f"{way:9s} healthy after {healthy:.2f} s, server CPU by then {cpu:.2f} s (median of {args.rounds})")


if __name__ == "__main__":
    main()
