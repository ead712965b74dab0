"""`python -m pipeline reproduce` wall time from a clean clone, as CI and rebuilders run it:
with no base in any registry (the base rebuilt from locks/base.json: mmdebstrap, wheel
download, layers; goal <= 90 s on 2 cores) and with the base reachable in a registry
(goal <= 5 s).

Usage: python benchmarks/bench_reproduce.py
Set-up (not timed): a clone of this checkout's HEAD, a private local registry holding
the pinned base, the image built and its provenance.json committed, as a release does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline import basestage, config, plan
from pipeline import inputs as image_inputs
from pipeline.config import REPO_ROOT
from pipeline.image import base, build
from pipeline.records import provenance
from pipeline.registry import basesource
from pipeline.registry import local as localregistry
from pipeline.registry.client import Credentials, RegistryClient

GOALS = {"no registry (base rebuilt from the lock)": 90.0, "base reachable in a registry": 5.0}


def git(cwd: Path, *args: str) -> None:
    env = dict(
        os.environ,
        GIT_AUTHOR_NAME="bench",
        GIT_AUTHOR_EMAIL="bench@localhost",
        GIT_COMMITTER_NAME="bench",
        GIT_COMMITTER_EMAIL="bench@localhost",
    )
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def released_clone(dest: Path, registry: str) -> None:
    """A clone of HEAD with the image built and provenance.json committed."""
    git(dest.parent, "clone", "-q", f"file://{REPO_ROOT}", str(dest))
    cfg = config.load(dest / "release.toml")
    target = plan.resolve(cfg, "local").target
    lock = base.load_record(dest / "locks" / "base.json")
    source = basesource.BaseSource(name=lock.name, digest=lock.digest, registry=registry, repository=lock.name)
    inputs = image_inputs.image_inputs(dest, "local")
    record = build.build(
        cfg,
        repo=dest,
        base=source,
        repository=target.image_name,
        tag=target.tag,
        source_revision=inputs.commit,
        source_date_epoch=inputs.time,
        out=dest / "dist",
    )
    provenance.write(
        dest / "provenance.json",
        replace(
            provenance.assemble(
                dest, "local", base=provenance.Base(lock.name, lock.digest), sources=(), external=(), inputs=inputs
            ),
            image=provenance.Image.of_build(target.image_name, record),
        ),
    )
    git(dest, "add", "provenance.json")
    git(dest, "commit", "-q", "-m", "release records")


def timed_reproduce(source: Path, dest: Path, *args: str) -> tuple[float, str]:
    """Clone `source` afresh into `dest` and time `python -m pipeline reproduce` there."""
    git(dest.parent, "clone", "-q", f"file://{source}", str(dest))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELEASE_")}
    env["RELEASE_REGISTRY_DIR"] = str(dest / ".no-registry")
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "reproduce", *args], cwd=dest, env=env, capture_output=True, text=True
    )
    took = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"reproduce failed:\n{proc.stdout}\n{proc.stderr[-3000:]}")
    return took, next(l for l in proc.stdout.splitlines() if l.startswith("image "))


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="bench-reproduce-"))
    registry_dir = work / "registry"
    try:
        state = localregistry.start(registry_dir)
        client = RegistryClient(state.address, credentials=Credentials(state.user, state.password))
        # The pinned base's layout from an earlier build is re-pushed; else it is built.
        shutil.copyfile(base.BASE_LOCK, work / "base.json")
        record = basestage.ensure(client, basestage.BaseInputs(record_path=work / "base.json")).record
        released = work / "released"
        released_clone(released, state.address)
        rows = [
            ("no registry (base rebuilt from the lock)", *timed_reproduce(released, work / "ci-clone")),
            (
                "base reachable in a registry",
                *timed_reproduce(released, work / "warm-clone", "--base-registry", state.address),
            ),
        ]
    finally:
        localregistry.stop(registry_dir)
        shutil.rmtree(work, ignore_errors=True)
    print(f"reproduce from a clean clone of {REPO_ROOT.name} (base {record.digest[:19]}):")
    for label, seconds, line in rows:
        goal = GOALS[label]
        print(
            f"  {label:<42} {seconds:7.1f} s  (goal <= {goal:.0f} s: "
            f"{'met' if seconds <= goal else 'MISSED'})  {line.split(':')[0]}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
