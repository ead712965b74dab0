"""Base image figures: build time (cold mmdebstrap and cached rootfs), compressed size
per layer and in total (goal <= 80 MB), installed size of the slim runtime.

Usage: python benchmarks/bench_base.py [--cold]
--cold also times a fresh mmdebstrap run (needs the Debian mirror, about a minute).
Nothing is pushed: layers and manifest go to a temporary OCI layout.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.config import load
from pipeline.image import base
from pipeline.sources import lock

GOAL_BYTES = 80_000_000


def timed_build(state: Path, *, cold: bool) -> tuple[float, base.BuiltBase]:
    started = time.monotonic()
    built = base.build(
        base.BaseSpec(),
        lock.load_lock(),
        python=load().python,
        state_dir=state,
        rootfs_cache=state / "rootfs" if cold else base.STATE_DIR / "rootfs",
        use_cache=not cold,
    )
    return time.monotonic() - started, built


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cold", action="store_true", help="also time an uncached mmdebstrap run")
    args = ap.parse_args()
    runtime_lock = lock.load_lock()
    size = lock.measure(lock.fetch(runtime_lock))
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-base-", dir=base.STATE_DIR.parent) as tmp:
        if args.cold:
            took, built = timed_build(Path(tmp) / "cold", cold=True)
            rows.append(("build, cold (mmdebstrap + layers)", took))
        took, built = timed_build(Path(tmp) / "warm", cold=False)
        rows.append(("build, cached rootfs (layers + manifest)", took))
    print(f"slim runtime: {len(runtime_lock.wheels)} wheels, installed {size.human()}")
    for label, seconds in rows:
        print(f"{label:<44} {seconds:7.1f} s")
    total = 0
    for layer in built.layers:
        total += layer.size
        print(f"layer {layer.role:<15} {layer.size / 1e6:8.1f} MB  {layer.digest}")
    print(f"compressed total {total / 1e6:.1f} MB ({total / GOAL_BYTES:.2f}x of the 80 MB goal)")
    print(f"manifest {built.manifest_digest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
