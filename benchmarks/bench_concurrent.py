"""Two runs of the whole suite at once on this machine, as CI runs it: two fresh clones of
HEAD, `CI=true bash .ci/run` in each, started together. Both must pass, and neither may
leave a process, a registry or a container behind (the suite's parallel safety,
docs/testing.md "Two runs on one machine"). Prints each run's wall time and its last lines; the clones
are removed afterwards (kept if something of theirs still runs), their logs stay.

Usage: python benchmarks/bench_concurrent.py   (as root, like the suite; ~2x one run's CPU)
Each run gets its own temporary root (PYTEST_DEBUG_TEMPROOT), so that what it left
behind can be found by path: a process whose command line or working directory lies in
a run's clone or temporary root is that run's. The roots are on /dev/shm when it is there,
as the tests session puts a run's temporary files (noxfile.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.config import REPO_ROOT
from pipeline.image.base import mounts_under
from pipeline.runtime.runtime import LABEL, OWNER, ContainerRuntime

RUNS = ("a", "b")
SCRATCH = Path("/dev/shm")


def pipeline_containers() -> set[str]:
    rt = ContainerRuntime()
    out = rt._cli("ps", "--all", "--no-trunc", "--filter", f"label={LABEL}={OWNER}", "--format", "{{.ID}}")
    return set(out.stdout.decode().split())


def processes_under(roots: list[Path]) -> list[str]:
    """`pid: command line` of every process that runs in or names one of `roots`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        if any(str(r) in cmdline or cwd.startswith(str(r)) for r in roots):
            found.append(f"{proc.name}: {cmdline.strip()[:200]}")
    return found


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="bench-concurrent-"))
    scratch = SCRATCH if SCRATCH.is_dir() and os.access(SCRATCH, os.W_OK) else work
    temps = Path(tempfile.mkdtemp(prefix="bench-concurrent-", dir=scratch))
    containers_before = pipeline_containers()
    started, procs = {}, {}
    for name in RUNS:
        clone, temp = work / name, temps / f"{name}-tmp"
        subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(clone)], check=True)
        temp.mkdir()
        env = {**os.environ, "CI": "true", "PYTEST_DEBUG_TEMPROOT": str(temp)}
        log = open(work / f"{name}.log", "w")
        started[name] = time.monotonic()
        procs[name] = (
            subprocess.Popen(["bash", ".ci/run"], cwd=clone, env=env, stdout=log, stderr=subprocess.STDOUT),
            log,
        )
    failed = False
    for name, (proc, log) in procs.items():
        code = proc.wait()
        log.close()
        took = time.monotonic() - started[name]
        lines = (work / f"{name}.log").read_text(errors="replace").strip().splitlines()
        # pytest's short summary names each failed test and why; then how the run ended.
        tail = [l[:400] for l in lines if l.startswith(("FAILED ", "ERROR "))] + lines[-3:]
        print(f"run {name}: exit {code} after {took:.0f} s wall ({work / f'{name}.log'})")
        print("    " + "\n    ".join(tail))
        failed |= code != 0
    left = processes_under([work / n for n in RUNS] + [temps / f"{n}-tmp" for n in RUNS])
    containers = sorted(pipeline_containers() - containers_before)
    print(f"left behind: {len(left)} process(es), {len(containers)} pipeline container(s)")
    for line in left + containers:
        print("    " + line)
    if failed:
        print(f"the runs' temporary roots are kept in {temps} (on {scratch}: remove them when read)")
    else:
        shutil.rmtree(temps, ignore_errors=True)
    # The clones (each with its .nox and .release, about half a GB) go once nothing of theirs
    # runs and nothing is mounted in them; the logs stay.
    kept = [work / n for n in RUNS if left or mounts_under(work / n)]
    for name in RUNS:
        if work / name not in kept:
            shutil.rmtree(work / name)
    print(f"logs in {work}" + (f"; clones kept: {', '.join(map(str, kept))}" if kept else ""))
    return 1 if failed or left or containers else 0


if __name__ == "__main__":
    raise SystemExit(main())
