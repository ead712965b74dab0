"""Reset latency and a trivial shell action's round trip over the OpenEnv WebSocket.

Starts the real server (as root, host mode from a root-only copy of env/, contained in
its own namespaces by tests/contained.py so its resets touch nothing of the host) on a
free loopback port, drives it with openenv-core's client, prints p50/p95 in
milliseconds, in each isolation mode (docs/isolation.md: `namespaces`, `unprivileged`).
Targets on the 2-core reference machine, in both: reset p50 < 5 ms, `true` action p50 <
10 ms, and a reset after the worst an agent can leave < 50 ms: every scratch directory and
the workspace filled to its inode limit, a tree 10,000 levels deep, a fork hopper, and
`setsid` daemons holding its directories open.

    sudo python benchmarks/bench_server.py [--rounds N] [--case ID] [--mode MODE]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from openenv.core.generic_client import GenericEnvClient

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from tests.curriculum import serve_the_declared_curriculum  # noqa: E402

serve_the_declared_curriculum()  # before anything imports env

from pipeline.checks.isolation_checks import FLOOD_SCRIPT, HOPPER_SCRIPT  # noqa: E402
from pipeline.runtime.serve import root_only_copy  # noqa: E402
from tests.contained import ContainedProcess, contained_argv  # noqa: E402
from tests.env.test_server_reset_attacks import DEEP  # noqa: E402

TARGETS_MS = {"reset": 5.0, "action `true`": 10.0}
WORST_TARGET_MS = 50.0
MODES = ("namespaces", "unprivileged")
WORST = (
    (
        "every scratch directory and the workspace at its inode limit",
        f"cat > /workspace/home/flood.py <<'EOF'\n{FLOOD_SCRIPT}\nEOF\n"
        "python3 /workspace/home/flood.py f 10000000 /tmp /dev/shm /var/tmp /run/lock /workspace/repo",
    ),
    ("a tree 10,000 levels deep", f"python3 - <<'EOF'\n{DEEP}\nEOF"),
    ("a fork hopper", f"cat > /workspace/home/hop.py <<'EOF'\n{HOPPER_SCRIPT}\nEOF\npython3 /workspace/home/hop.py h"),
    (
        "50 setsid daemons in its directories",
        "for d in /workspace/repo /workspace/home /tmp; do for i in $(seq 16); do "
        "(cd $d && setsid nohup sleep 1000 >/dev/null 2>&1 &); done; done; sleep 0.2",
    ),
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_healthy(url: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("server did not become healthy in 30 s")


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1000, p95 * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--case", default="software_change-d2-s307")
    parser.add_argument(
        "--mode", choices=MODES, action="append", help="the isolation mode to measure (repeat; default: both)"
    )
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench_server: run as root (the server drops commands to UID 2000)", file=sys.stderr)
        return 2
    for mode in args.mode or MODES:
        print(f"isolation: {mode}")
        bench_mode(mode, args.rounds, args.case)
    return 0


def bench_mode(mode: str, rounds: int, case: str) -> None:
    """Serve in ``mode`` and print its figures."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    work = Path(tempfile.mkdtemp(prefix="bench-server-"))
    app = root_only_copy(REPO_ROOT / "env", work / "app" / "env").parent
    os.chmod(app, 0o700)
    argv = [
        sys.executable,
        "-m",
        "env",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--host-mode",
        "--workspace",
        "/workspace",
    ]
    process = subprocess.Popen(
        contained_argv(work / "ns", work, argv),
        cwd=work,
        env={**os.environ, "PYTHONPATH": str(app), "ARENA_ISOLATION": mode},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_healthy(url, process)
        resets: list[float] = []
        actions: list[float] = []
        with GenericEnvClient(base_url=url).sync() as env:
            env.reset(task_id=case)  # warm-up: generates the case once
            for _ in range(rounds):
                started = time.perf_counter()
                env.reset(task_id=case)
                resets.append(time.perf_counter() - started)
                # Three actions per episode stay clear of the 16th-action auto-grading.
                for _ in range(3):
                    started = time.perf_counter()
                    env.step({"operation": "shell", "command": "true"})
                    actions.append(time.perf_counter() - started)
            shapes = {}
            for name, command in WORST:
                env.reset(task_id=case)
                env.step({"operation": "shell", "command": command})
                started = time.perf_counter()
                env.reset(task_id=case)
                shapes[name] = time.perf_counter() - started
        for name, samples in (("reset", resets), ("action `true`", actions)):
            p50, p95 = _percentiles(samples)
            verdict = "ok" if p50 < TARGETS_MS[name] else "MISSED"
            print(
                f"  {name:<14} n={len(samples):<5} p50 {p50:6.1f} ms  p95 {p95:6.1f} ms  "
                f"(target p50 < {TARGETS_MS[name]:g} ms: {verdict})"
            )
        for name, seconds in shapes.items():
            verdict = "ok" if seconds * 1000 < WORST_TARGET_MS else "MISSED"
            print(f"  reset after {name}: {seconds * 1000:6.1f} ms (target < {WORST_TARGET_MS:g} ms: {verdict})")
    finally:
        ContainedProcess(process).stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
