"""The derived build against the real local registry: reproducible digests whatever the
checkout path, clock, TZ, umask, locale, file mtimes and directory order; the base's
manifest family kept; bad input refused with one line and no record."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.image import build as build_mod
from pipeline.image.layerdiff import explain, members_of_blob
from pipeline.image.oci import image as oci_image
from pipeline.image.oci.layout import Layout

from .conftest import clone, commit_change


def run_build(
    repo: Path,
    registry,
    base: str,
    *,
    env_extra: dict[str, str] | None = None,
    umask: str = "022",
    prefix: tuple[str, ...] = (),
    push: bool = True,
):
    out = repo / "dist"
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(repo),
        "RELEASE_REGISTRY_DIR": str(registry.root),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env.update(env_extra or {})
    argv = [*prefix, sys.executable, "-m", "pipeline", "build", "--base", base, "--out", str(out)]
    if not push:
        argv.append("--no-push")
    cmd = f"umask {umask} && exec " + " ".join(f"'{a}'" for a in argv)
    proc = subprocess.run(["sh", "-c", cmd], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    return proc, out / "build.json"


def scramble(repo: Path, seed: int) -> None:
    """Random mtimes, and every env/ file re-created in a shuffled order."""
    rng = random.Random(seed)
    files = sorted(p for p in (repo / "env").rglob("*") if p.is_file())
    data = {p: p.read_bytes() for p in files}
    for p in files:
        p.unlink()
    rng.shuffle(files)
    for p in files:
        p.write_bytes(data[p])
        t = rng.randint(1_000_000_000, 2_000_000_000)
        os.utime(p, (t, t))


def test_build_is_reproducible_across_path_clock_tz_umask_locale_mtimes_order(
    tmp_path, source_repo, local_registry, oci_base
):
    a = clone(source_repo, tmp_path / "a" / "checkout")
    b = clone(source_repo, tmp_path / "elsewhere" / "deeper" / "second-checkout")
    scramble(b, seed=7)
    proc_a, rec_a = run_build(
        a, local_registry, oci_base.reference, env_extra={"TZ": "UTC", "LC_ALL": "C"}, umask="022"
    )
    assert proc_a.returncode == 0, proc_a.stderr
    faketime = ("faketime", "+1 hour") if shutil.which("faketime") else ()
    proc_b, rec_b = run_build(
        b,
        local_registry,
        oci_base.reference,
        env_extra={"TZ": "Pacific/Chatham", "LC_ALL": "C.UTF-8", "LANG": "de_DE.UTF-8"},
        umask="077",
        prefix=faketime,
    )
    assert proc_b.returncode == 0, proc_b.stderr
    ra, rb = build_mod.load_record(rec_a), build_mod.load_record(rec_b)
    assert [l.digest for l in ra.app_layers] == [l.digest for l in rb.app_layers]
    assert ra.manifest_digest == rb.manifest_digest
    assert ra.config_digest == rb.config_digest


def test_one_changed_byte_changes_the_digest_and_is_explained(tmp_path, source_repo, local_registry, oci_base):
    a = clone(source_repo, tmp_path / "a")
    b = clone(source_repo, tmp_path / "b")
    target = "env/server/__init__.py"
    original = (b / target).read_bytes()
    commit_change(b, target, original + b"#")
    proc_a, rec_a = run_build(a, local_registry, oci_base.reference, push=False)
    proc_b, rec_b = run_build(b, local_registry, oci_base.reference, push=False)
    assert proc_a.returncode == 0 and proc_b.returncode == 0, proc_a.stderr + proc_b.stderr
    ra, rb = build_mod.load_record(rec_a), build_mod.load_record(rec_b)
    assert ra.manifest_digest != rb.manifest_digest
    env_a, env_b = ra.app_layers[0], rb.app_layers[0]
    assert env_a.name == "env" and env_a.digest != env_b.digest
    assert ra.app_layers[1].digest == rb.app_layers[1].digest  # the task layer is untouched
    lines = explain(list(env_a.members), list(env_b.members))
    assert any(f"/{target}: content differs" in l for l in lines), lines
    assert any(f"/{target}: size differs" in l for l in lines), lines


def test_build_layout_config_and_protected_modes(tmp_path, source_repo, local_registry, oci_base):
    repo = clone(source_repo, tmp_path / "r")
    proc, rec = run_build(repo, local_registry, oci_base.reference)
    assert proc.returncode == 0, proc.stderr
    record = build_mod.load_record(rec)
    layout = Layout.open(Path(record.layout))
    img = layout.verify_image(record.tag)
    assert img.descriptor.digest == record.manifest_digest
    assert img.manifest.media_type == oci_image.OCI_MANIFEST
    assert all(l.media_type == oci_image.OCI_LAYER_GZIP for l in img.manifest.layers)
    cfg = json.loads(img.config_bytes)
    c = cfg["config"]
    assert c["Cmd"][:3] == ["/opt/arena-python/bin/python3", "-m", "env.server.serve"]
    assert c["Cmd"][-4:] == ["--host", "0.0.0.0", "--port", "8000"]
    assert c["WorkingDir"] == "/opt/arena" and "8000/tcp" in c["ExposedPorts"]
    labels = c["Labels"]
    assert labels["org.opencontainers.image.base.digest"] == oci_base.digest
    assert labels["org.opencontainers.image.revision"] == record.source_revision
    assert labels["org.opencontainers.image.created"] == "2023-11-14T22:13:20Z"
    assert cfg["created"] == "2023-11-14T22:13:20Z"
    assert len(cfg["rootfs"]["diff_ids"]) == len(img.manifest.layers) == 4
    # everything under the app dir is root-only; mtimes are SOURCE_DATE_EPOCH
    for layer in record.app_layers:
        members = members_of_blob(layout.blob_path(layer.digest))
        assert [m.path for m in members] == sorted(m.path for m in members)
        for m in members:
            assert (m.uid, m.gid, m.uname, m.gname) == (0, 0, "", "")
            assert m.mtime == record.source_date_epoch
            if m.path.startswith("opt/arena"):
                assert m.mode == (0o700 if m.type == "dir" else 0o600), (m.path, oct(m.mode))
    # the push made the digest pullable by name@digest
    pushed = proc.stdout.strip().splitlines()[-1]
    assert pushed == f"{local_registry.address}/arena/openenv-data-workflows@{record.manifest_digest}"


def test_schema2_base_gets_schema2_layers(tmp_path, source_repo, local_registry, docker_base):
    repo = clone(source_repo, tmp_path / "r")
    proc, rec = run_build(repo, local_registry, docker_base.reference)
    assert proc.returncode == 0, proc.stderr
    record = build_mod.load_record(rec)
    img = Layout.open(Path(record.layout)).verify_image(record.tag)
    assert img.manifest.media_type == oci_image.DOCKER_MANIFEST
    assert img.manifest.config.media_type == oci_image.DOCKER_CONFIG
    assert {l.media_type for l in img.manifest.layers} == {oci_image.DOCKER_LAYER_GZIP}


@pytest.mark.parametrize("case", ["missing-digest", "wrong-arch", "unreachable"])
def test_bad_base_is_one_line_error_and_no_record(case, tmp_path, source_repo, local_registry, oci_base, arm_base):
    repo = clone(source_repo, tmp_path / "r")
    base = {
        "missing-digest": oci_base.reference.rsplit("@", 1)[0] + "@sha256:" + "0" * 64,
        "wrong-arch": arm_base.reference,
        "unreachable": "127.0.0.1:9/test/base@" + oci_base.digest,
    }[case]
    proc, rec = run_build(repo, local_registry, base)
    assert proc.returncode != 0
    # progress and retry lines may come first; the cause is exactly one final line
    errors = [l for l in proc.stderr.splitlines() if l.startswith("error: ")]
    assert len(errors) == 1 and proc.stderr.strip().endswith(errors[0]), proc.stderr
    assert {"missing-digest": "0" * 64, "wrong-arch": "arm64", "unreachable": "127.0.0.1:9"}[case] in errors[0]
    assert not rec.exists()


def test_two_fresh_clones_with_their_own_registries_build_one_digest(tmp_path, source_repo, local_registry, oci_base):
    """Each clone has its own registry (another loopback port) holding the same base, its own
    path, TZ, umask and locale: the image digest is the same, and neither the config nor
    the manifest carries a loopback address, a port, a temporary path or the checkout path."""
    from pipeline.registry import local as localregistry

    from .conftest import _push_base

    second = localregistry.start(tmp_path / "registry-2")
    try:
        other_base = _push_base(second, tmp_path / "base-2", oci_image.OCI)
        assert other_base.digest == oci_base.digest
        assert second.address != local_registry.address
        a = clone(source_repo, tmp_path / "one" / "checkout")
        b = clone(source_repo, tmp_path / "two" / "much" / "deeper" / "clone")
        proc_a, rec_a = run_build(
            a, local_registry, oci_base.reference, push=False, env_extra={"TZ": "UTC", "LC_ALL": "C"}, umask="022"
        )
        proc_b, rec_b = run_build(
            b,
            second,
            other_base.reference,
            push=False,
            env_extra={"TZ": "Asia/Kathmandu", "LC_ALL": "C.UTF-8", "LANG": "fr_FR.UTF-8"},
            umask="077",
        )
    finally:
        localregistry.stop(tmp_path / "registry-2")
    assert proc_a.returncode == 0 and proc_b.returncode == 0, proc_a.stderr + proc_b.stderr
    ra, rb = build_mod.load_record(rec_a), build_mod.load_record(rec_b)
    assert ra.manifest_digest == rb.manifest_digest
    img = Layout.open(Path(rb.layout)).image(rb.tag)
    text = (img.config_bytes + img.manifest_bytes).decode()
    ports = {":" + a.rsplit(":", 1)[1] for a in (local_registry.address, second.address)}
    forbidden = ["127.0.0.1", "localhost", "::1", str(tmp_path), str(b), "/tmp/", *ports]
    found = [f for f in forbidden if f in text]
    assert not found, f"machine-specific bytes in the image config/manifest: {found}"
    labels = json.loads(img.config_bytes)["config"]["Labels"]
    assert labels["org.opencontainers.image.base.name"] == "test/base-oci-amd64"
