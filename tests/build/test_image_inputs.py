"""Image inputs are what reaches the image: pinning a new release key (trust.toml), editing a
base-builder module whose base digest stays the same (locks/base.json's builder hash moves),
budgets and other request fields move no image digest; a change to env/ still does.

Real builds (`python -m pipeline build`) of a committed clone, against a base in the real
local registry; every commit gets its own time, so a moved image-input commit would change
both the revision label and SOURCE_DATE_EPOCH."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from pipeline import inputs as image_inputs
from pipeline.image import build as build_mod

from .conftest import clone
from .test_build import run_build


class Commits:
    """git in a test clone, each commit a minute after the last."""

    def __init__(self, repo: Path, start: int = 1_750_000_000) -> None:
        self.repo, self.time = repo, start

    def __call__(self, message: str, **files: bytes) -> str:
        for rel, data in files.items():
            (self.repo / rel.replace("__", "/")).write_bytes(data)
        self.time += 60
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(self.repo),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
            "GIT_AUTHOR_DATE": f"@{self.time} +0000",
            "GIT_COMMITTER_DATE": f"@{self.time} +0000",
        }
        git = ["git", "-C", str(self.repo)]
        subprocess.run([*git, "add", "-A"], env=env, check=True)
        subprocess.run([*git, "commit", "-q", "-m", message], env=env, check=True)
        return subprocess.run(
            [*git, "rev-parse", "HEAD"], env=env, check=True, capture_output=True, text=True
        ).stdout.strip()


def _build(repo: Path, registry, base) -> build_mod.BuildRecord:
    proc, record = run_build(repo, registry, base.reference, push=False)
    assert proc.returncode == 0, proc.stderr
    return build_mod.load_record(record)


def _builder_sha256(repo: Path) -> str:
    """The base-builder hash of the clone's own modules (what `nox -s base` would record)."""
    return subprocess.run(
        [sys.executable, "-c", "from pipeline.image.base import builder_sha256; print(builder_sha256())"],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(repo)},
    ).stdout.strip()


def test_key_rotation_and_base_builder_comment_move_no_digest_env_change_does(
    tmp_path, source_repo, local_registry, oci_base
):
    repo = clone(source_repo, tmp_path / "checkout")
    commit = Commits(repo)
    first = _build(repo, local_registry, oci_base)

    # A release engineer on a new machine pins their key (`python -m pipeline key`) and commits.
    trust = (repo / "trust.toml").read_text()
    rotated = re.sub(r'keyids = \["[0-9a-f]{64}"\]', f'keyids = ["{"7" * 64}"]', trust)
    assert rotated != trust
    commit("trust.toml: pin the new release key", **{"trust.toml": rotated.encode()})
    # A base-builder module gains a comment: the base digest is the same, `nox -s base` records
    # the new builder hash in locks/base.json.
    module = repo / "pipeline" / "image" / "base.py"
    module.write_text(module.read_text() + "\n# A comment that changes no byte of the base.\n")
    lock = json.loads((repo / "locks" / "base.json").read_text())
    old_builder, lock["builder_sha256"] = lock["builder_sha256"], _builder_sha256(repo)
    assert lock["builder_sha256"] != old_builder
    commit(
        "base builder: a comment; locks/base.json: its builder hash (same digest)",
        **{"locks__base.json": (json.dumps(lock, indent=2, sort_keys=True) + "\n").encode()},
    )
    # Budgets and the request's fields are not image inputs either.
    toml = (repo / "release.toml").read_text()
    commit(
        "release.toml: budgets and request fields",
        **{
            "release.toml": toml.replace("cpu_floor_vcpus = 2", "cpu_floor_vcpus = 4")
            .replace('submission_id = "openenv-data-workflows-local"', 'submission_id = "another-id"')
            .encode()
        },
    )
    second = _build(repo, local_registry, oci_base)
    assert second.source_revision == first.source_revision
    assert (second.manifest_digest, second.source_date_epoch) == (first.manifest_digest, first.source_date_epoch)

    # Teeth: a change to env/ moves the image-input commit, the label, the time and the digest.
    moved = commit(
        "env: a change that reaches the image",
        **{"env__server__mcp.py": (repo / "env" / "server" / "mcp.py").read_bytes() + b"\n# reaches the image\n"},
    )
    third = _build(repo, local_registry, oci_base)
    assert third.source_revision == moved and third.source_date_epoch == commit.time
    assert third.manifest_digest != first.manifest_digest


def test_what_counts_is_named_when_it_differs(tmp_path, source_repo):
    repo = clone(source_repo, tmp_path / "checkout")
    commit = Commits(repo)
    start = commit("nothing", **{"README.md": b"notes\n"})
    toml = (repo / "release.toml").read_text()
    changed = commit(
        "release.toml: the port and a budget",
        **{
            "release.toml": toml.replace("port = 8000", "port = 8001")
            .replace("cpu_floor_vcpus = 2", "cpu_floor_vcpus = 3")
            .encode(),
            "env__server__mcp.py": (repo / "env" / "server" / "mcp.py").read_bytes() + b"#\n",
            "env__families__grading.py": (repo / "env" / "families" / "grading.py").read_bytes() + b"#\n",
        },
    )
    assert image_inputs.differences(repo, start, changed, "local") == [
        "env/families/grading.py",
        "env/server/mcp.py",
        "release.port",
    ]
    # The arena image serves the vendored task file, not env/families: that edit does not reach it.
    assert image_inputs.differences(repo, start, changed, "arena") == ["env/server/mcp.py", "release.port"]
    assert image_inputs.image_inputs(repo, "local").commit == changed


def test_the_curriculum_is_an_image_input(tmp_path, source_repo):
    """[curriculum] is written into the image (env/curriculum.json): editing it moves the
    image-input commit of every profile; the budgets beside it still do not."""
    repo = clone(source_repo, tmp_path / "checkout")
    commit = Commits(repo)
    start = commit("nothing", **{"README.md": b"notes\n"})
    toml = (repo / "release.toml").read_text()
    assert "seeds = [101, 307]\n" in toml
    changed = commit(
        "release.toml: the curriculum's seeds",
        **{"release.toml": toml.replace("seeds = [101, 307]\n", "seeds = [101, 202]\n").encode()},
    )
    for profile in ("local", "arena"):
        assert image_inputs.differences(repo, start, changed, profile) == ["curriculum"]
        assert image_inputs.image_inputs(repo, profile).commit == changed
