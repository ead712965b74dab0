"""Fixtures for reproduce: fresh git clones of this checkout, release records made in them
(a real build of the real local base read from the session's real registry, and
provenance.json committed as a release engineer would), and a runner for
`python -m pipeline reproduce` in a clone with nothing else present."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from pipeline import config, plan
from pipeline import inputs as image_inputs
from pipeline.image import base, build
from pipeline.records import provenance
from pipeline.registry import basesource
from pipeline.registry.client import Credentials, RegistryClient
from pipeline.registry.push import push_layout

from ..base.basefixtures import base_image  # noqa: F401
from ..shared import once, shared_result

REPO = Path(__file__).resolve().parents[2]
VENDORED = b"# a one-file task module standing in for an upstream one\nTASKS = []\n"
VENDORED_LICENSE = b"MIT License\n\nCopyright (c) the upstream authors\n"
# A source and profile added to the clone's release.toml: the vendored path of the build.
VENDORED_TOML = f'''
[profiles.vendored]
description = "test: the local base and a vendored one-file task module"
registry = "local"
repository = "arena/vendored"
tag = "vendored"
base = "local"
tasks = "vendor:test-tasks"
signing = "key"
external_tasks_required = false
submission_id = "vendored-test"
dataset = "arena/vendored"

[[sources]]
name = "test-tasks"
repository = "https://example.invalid/upstream"
revision = "{"a" * 40}"
path = "tasks/tasks.py"
sha256 = "{hashlib.sha256(VENDORED).hexdigest()}"
size = {len(VENDORED)}
license = "MIT"
license_file = "LICENSE"
license_sha256 = "{hashlib.sha256(VENDORED_LICENSE).hexdigest()}"
profiles = ["vendored"]
'''


def git(cwd: Path, *args: str) -> str:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(cwd),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def fresh_clone(source: Path, dest: Path, *extra: str) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    git(dest.parent, "clone", "-q", *extra, f"file://{source}", str(dest))
    return dest


def vendor(dest: Path, data: bytes = VENDORED) -> Path:
    (dest / "test-tasks").mkdir(parents=True, exist_ok=True)
    (dest / "test-tasks" / "tasks.py").write_bytes(data)
    (dest / "test-tasks" / "LICENSE").write_bytes(VENDORED_LICENSE)
    return dest


def make_records(
    clone: Path,
    registry: str,
    *,
    credentials: Credentials | None = None,
    profile_name: str = "local",
    vendor_dir: Path | None = None,
    base_source: basesource.BaseSource | None = None,
    commit: bool = True,
    push: bool = False,
) -> provenance.Provenance:
    """Build the image of `clone`'s HEAD and commit provenance.json for it, as a release does
    (the check suite and signatures are another stage's business)."""
    cfg = config.load(clone / "release.toml")
    rp = plan.resolve(cfg, profile_name)
    lock = base.load_record(clone / "locks" / "base.json")
    source = base_source or basesource.BaseSource(
        name=lock.name, digest=lock.digest, registry=registry, repository=lock.name
    )
    inputs = image_inputs.image_inputs(clone, rp.profile)
    sde = provenance.source_date_epoch(inputs)
    vendored = rp.task_file(vendor_dir) if vendor_dir else None
    record = build.build(
        cfg,
        repo=clone,
        base=source,
        repository=rp.target.image_name,
        tag=rp.target.tag,
        source_revision=inputs.commit,
        source_date_epoch=sde,
        vendored=vendored,
        out=clone / "dist",
    )
    prov = replace(
        provenance.assemble(
            clone, rp.profile, base=provenance.Base(source.name, source.digest), sources=(), external=(), inputs=inputs
        ),
        image=provenance.Image.of_build(rp.target.image_name, record),
    )
    provenance.write(clone / "provenance.json", prov)
    if push:
        client = RegistryClient(registry, credentials=credentials)
        push_layout(client, rp.target.repository, Path(record.layout), ref_name=record.tag, tag=record.tag)
    if commit:
        git(clone, "add", "provenance.json")
        git(clone, "commit", "-q", "-m", "release records")
    return prov


def reproduce(
    clone: Path, *args: str, env_extra: dict[str, str] | None = None, timeout: float = 900
) -> subprocess.CompletedProcess:
    """`python -m pipeline reproduce` run from `clone` with its own code; no registry is
    found unless one is named (RELEASE_REGISTRY_DIR points at nothing)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELEASE_") and k != "SOURCE_DATE_EPOCH"}
    env.update(PYTHONDONTWRITEBYTECODE="1", RELEASE_REGISTRY_DIR=str(clone / ".no-registry"))
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "pipeline", "reproduce", *args],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@shared_result
def released(tmp_path_factory, local_registry, base_image) -> Path:
    """A clone of this checkout with the local base in the registry and committed records,
    made once per run (tests/shared.py); tests clone it, never change it. The records
    name no registry address, so the worker that made them does not matter."""

    def make(root: Path) -> None:
        clone = fresh_clone(REPO, root / "checkout")
        assert base.load_record(clone / "locks" / "base.json").digest == base_image.digest, (
            "the base built from locks/base.json's inputs is not the pinned one"
        )
        make_records(clone, local_registry.address)

    return once(tmp_path_factory, "reproduce-released", make) / "checkout"
