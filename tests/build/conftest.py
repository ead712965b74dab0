"""Fixtures for the derived-image build: a small base image in the real local registry
and a committed copy of this checkout that builds can be run from."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.image.oci import image as oci_image
from pipeline.image.oci.layer import FileEntry, write_layer
from pipeline.image.oci.layout import Layout
from pipeline.registry.push import push_layout

REPO = Path(__file__).resolve().parents[2]
SDE = 1_700_000_000


@dataclass(frozen=True)
class PushedBase:
    reference: str
    digest: str
    family: str


def _push_base(registry, tmp: Path, family: oci_image.Family, arch: str = "amd64") -> PushedBase:
    layout = Layout.init(tmp)
    layer = write_layer(
        [
            FileEntry("etc", "dir", 0o755),
            FileEntry("etc/os-release", "file", 0o644, source=b"ID=test-base\n"),
            FileEntry("opt", "dir", 0o755),
        ],
        layout.root / "blobs" / "sha256",
        source_date_epoch=SDE,
    )
    built = oci_image.derive(
        None,
        [oci_image.NewLayer(layer.digest, layer.diff_id, layer.size, "test base")],
        oci_image.ConfigChanges(cmd=("/bin/sh",)),
        source_date_epoch=SDE,
        family=family,
    )
    config_bytes = built.config_bytes
    manifest_bytes, media_type = built.manifest_bytes, built.media_type
    if arch != "amd64":
        import json

        from pipeline._io import canonical_json
        from pipeline.image.oci import digest

        cfg = json.loads(config_bytes)
        cfg["architecture"] = arch
        config_bytes = canonical_json(cfg)
        m = json.loads(manifest_bytes)
        m["config"]["digest"], m["config"]["size"] = digest.of_bytes(config_bytes), len(config_bytes)
        manifest_bytes = canonical_json(m)
    layout.put_bytes(config_bytes)
    layout.add_manifest(manifest_bytes, media_type, ref_name="base")
    client = registry.client()
    repo = f"test/base-{family.name}-{arch}"
    pushed = push_layout(client, repo, layout.root, ref_name="base", tag="base")
    return PushedBase(f"{registry.address}/{repo}@{pushed.manifest_digest}", pushed.manifest_digest, family.name)


@pytest.fixture(scope="session")
def oci_base(local_registry, tmp_path_factory) -> PushedBase:
    return _push_base(local_registry, tmp_path_factory.mktemp("base-oci"), oci_image.OCI)


@pytest.fixture(scope="session")
def docker_base(local_registry, tmp_path_factory) -> PushedBase:
    return _push_base(local_registry, tmp_path_factory.mktemp("base-docker"), oci_image.DOCKER)


@pytest.fixture(scope="session")
def arm_base(local_registry, tmp_path_factory) -> PushedBase:
    return _push_base(local_registry, tmp_path_factory.mktemp("base-arm"), oci_image.OCI, "arm64")


def _git(cwd: Path, *args: str) -> str:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(cwd),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "GIT_AUTHOR_DATE": f"@{SDE} +0000",
        "GIT_COMMITTER_DATE": f"@{SDE} +0000",
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def _copy_checkout(dest: Path) -> None:
    """The files the build reads (the tracked and untracked sources, no caches)."""
    ignore = shutil.ignore_patterns(
        ".git", ".nox", ".release", "dist", "vendor", "__pycache__", ".pytest_cache", "*.pyc"
    )
    shutil.copytree(REPO, dest, ignore=ignore)


@pytest.fixture(scope="session")
def source_repo(tmp_path_factory) -> Path:
    """A committed snapshot of this checkout (one commit at SDE), to clone builds from."""
    src = tmp_path_factory.mktemp("src") / "repo"
    _copy_checkout(src)
    _git(src, "init", "-q", "-b", "main")
    _git(src, "add", "-A")
    _git(src, "commit", "-q", "-m", "snapshot")
    return src


def clone(source: Path, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    _git(dest.parent, "clone", "-q", str(source), str(dest))
    return dest


def commit_change(repo: Path, rel: str, data: bytes) -> None:
    (repo / rel).write_bytes(data)
    _git(repo, "commit", "-q", "-am", "change")
