"""A small real image for the SBOM and attestation tests, and the audit's records.

`small_image` writes an OCI image layout whose layers are made with
pipeline.oci.layer: a fake Debian base (dpkg status, os-release as a symlink like
bookworm's), a Python prefix with two dist-infos, an upper layer that deletes one
of them with a whiteout, and the app layer under /opt/arena (first-party code, a
vendored task file and its licence).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.oci import digest as oci_digest
from pipeline.oci.layer import FileEntry, parents_of, write_layer

EPOCH = 1_700_000_000
APP = "/opt/arena"
SITE = "opt/arena-python/lib/python3.11/site-packages"
DPKG_STATUS = b"""Package: base-files
Status: install ok installed
Priority: required
Architecture: amd64
Version: 12.4+deb12u5
Description: Debian base system miscellaneous files
 This package contains the basic filesystem hierarchy.

Package: libc6
Status: install ok installed
Architecture: amd64
Multi-Arch: same
Source: glibc
Version: 2.36-9+deb12u4
Description: GNU C Library: Shared libraries

Package: removed-thing
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0
"""
OS_RELEASE = b'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n'
TASKS_PY = b"# vendored upstream task module\nTASKS = []\n"


def _meta(name: str, version: str, license_expr: str) -> bytes:
    return (f"Metadata-Version: 2.4\nName: {name}\nVersion: {version}\n"
            f"License-Expression: {license_expr}\n\nlong description\n").encode()


def _files(entries: dict[str, bytes], *, links: dict[str, str] | None = None) -> list[FileEntry]:
    out = [FileEntry(path=p, type="file", mode=0o644, source=d) for p, d in entries.items()]
    out += [FileEntry(path=p, type="symlink", mode=0o777, linkname=t) for p, t in (links or {}).items()]
    return parents_of([e.path for e in out]) + out


@dataclass(frozen=True)
class SmallImage:
    layout: Path
    digest: str
    name: str


def make_image(root: Path, *, app_files: dict[str, bytes] | None = None) -> SmallImage:
    """Write the small image into `root/oci` and return its manifest digest."""
    layout = root / "oci"
    blobs = layout / "blobs" / "sha256"
    layers = [
        _files({"var/lib/dpkg/status": DPKG_STATUS, "usr/lib/os-release": OS_RELEASE},
               links={"etc/os-release": "../usr/lib/os-release"}),
        _files({
            f"{SITE}/requests-2.32.3.dist-info/METADATA": _meta("requests", "2.32.3", "Apache-2.0"),
            f"{SITE}/requests-2.32.3.dist-info/RECORD": b"requests/__init__.py,sha256=abc,10\n",
            f"{SITE}/Old_Pkg-1.0.dist-info/METADATA": _meta("Old_Pkg", "1.0", "MIT"),
            f"{SITE}/Old_Pkg-1.0.dist-info/RECORD": b"old_pkg/__init__.py,,\n",
        }),
        _files({f"{SITE}/.wh.Old_Pkg-1.0.dist-info": b""}),
        _files(app_files or {
            "opt/arena/env/__init__.py": b"",
            "opt/arena/env/server/app.py": b"app = None\n",
            "opt/arena/vendor/metaharness-tasks/tasks.py": TASKS_PY,
            "opt/arena/vendor/metaharness-tasks/LICENSE": b"MIT License\n",
            "opt/arena/licenses/metaharness-tasks.LICENSE": b"MIT License\n",
        }),
    ]
    written = [write_layer(entries, blobs, source_date_epoch=EPOCH) for entries in layers]
    config = {
        "architecture": "amd64", "os": "linux", "created": "2023-11-14T22:13:20Z",
        "config": {"WorkingDir": APP},
        "rootfs": {"type": "layers", "diff_ids": [w.diff_id for w in written]},
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    (blobs / oci_digest.hex_of(oci_digest.of_bytes(config_bytes))).write_bytes(config_bytes)
    manifest = {
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": oci_digest.of_bytes(config_bytes), "size": len(config_bytes)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": w.digest,
                    "size": w.size} for w in written],
    }
    manifest_bytes = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    digest = oci_digest.of_bytes(manifest_bytes)
    (blobs / oci_digest.hex_of(digest)).write_bytes(manifest_bytes)
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": manifest["mediaType"], "digest": digest, "size": len(manifest_bytes)}]}))
    return SmallImage(layout=layout, digest=digest, name="arena/openenv-data-workflows")


@pytest.fixture
def small_image(tmp_path) -> SmallImage:
    return make_image(tmp_path)


# ------------------------------------------------------------------ a release's records

BASE = "registry.example.invalid/base/python@sha256:" + "5" * 64
LICENSE = b"MIT License\n\nCopyright (c) upstream\n"
LOCK_TEXT = ("requests==2.32.3 \\\n    --hash=sha256:" + "a" * 64 + "\n"
             "idna==3.10 \\\n    --hash=sha256:" + "c" * 64 + "\n")
CHECKS = (("image/health", True), ("sort-d1-s101/correct", True))


def release_toml(tasks_sha256: str, tasks_size: int, license_sha256: str) -> str:
    budgets = "\n".join(f"{k} = 1" for k in (
        "reset_wall_s", "rollout_wall_s", "verifier_wall_s", "tool_wall_s", "tool_calls_total",
        "tool_calls_per_minute", "completion_tokens", "observation_tokens", "context_tokens",
        "memory_gib", "cpu_floor_vcpus", "workspace_gib"))
    return f'''
[release]
name = "openenv-data-workflows"
app_dir = "/opt/arena"
python = "/opt/arena-python/bin/python3"
port = 8000
source_url = "https://github.com/akseljoonas/openenv-arena-release"

[profiles.test]
registry = "registry.example.invalid"
repository = "arena/openenv-data-workflows"
tag = "test"
base = "{BASE}"
tasks = "vendor:metaharness-tasks"
signing = "key"
external_tasks_required = false

[[sources]]
name = "metaharness-tasks"
repository = "https://example.invalid/ruvnet/metaharness"
revision = "4657e5b82e124917b01d79ee5e9de41badb48fda"
path = "integrations/openenv-arena/arena_env/tasks.py"
sha256 = "{tasks_sha256}"
size = {tasks_size}
license = "MIT"
license_file = "LICENSE"
license_sha256 = "{license_sha256}"
profiles = ["test"]

[external]
dataset = "XiaomiMiMo/MiMo-V2.6-RL-oss"
revision = "639865fd3374018d6cb29b9fb82dd531406fcf5f"
license = "Apache-2.0"

[budgets.procedural]
split = "train"
{budgets}
'''


@dataclass(frozen=True)
class Records:
    root: Path
    image: SmallImage
    signer: object  # pipeline.signing.KeySigner


def make_records(root: Path, signer=None, *, image_name: str | None = None) -> Records:
    """A complete, correctly signed set of release records under `root`."""
    import hashlib
    from datetime import datetime, timezone

    from securesystemslib.signer import CryptoSigner

    from pipeline import attest, provenance, sbom, signing
    from pipeline import config as config_mod
    from pipeline.sources import VendoredFile

    sha = lambda b: hashlib.sha256(b).hexdigest()  # noqa: E731
    root.mkdir(parents=True, exist_ok=True)
    (root / "release.toml").write_text(release_toml(sha(TASKS_PY), len(TASKS_PY), sha(LICENSE)))
    cfg = config_mod.load(root / "release.toml")
    for rel, data in (("vendor/metaharness-tasks/tasks.py", TASKS_PY), ("vendor/metaharness-tasks/LICENSE", LICENSE),
                      ("locks/runtime.txt", LOCK_TEXT.encode())):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    src = cfg.sources[0]
    prov = provenance.Provenance(
        schema=provenance.SCHEMA, profile="test", source_date_epoch=EPOCH,
        project=provenance.ProjectRevision(commit="1" * 40, tree="2" * 40, dirty=False, dirty_paths=(),
                                           allow_dirty=False),
        base=provenance.Base(name=BASE.split("@")[0], digest=BASE.split("@")[1]),
        wheel_lock=provenance.WheelLock(path="locks/runtime.txt", sha256=sha(LOCK_TEXT.encode())),
        builder=provenance.builder(),
        sources=(VendoredFile(source=src.name, repository=src.repository, revision=src.revision, path=src.path,
                              sha256=src.sha256, size=src.size, license=src.license,
                              license_file=src.license_file, license_sha256=sha(LICENSE),
                              vendor_path="metaharness-tasks/tasks.py",
                              license_path="metaharness-tasks/LICENSE"),),
        external=(),
    )
    provenance.write(root / "provenance.json", prov)
    image = make_image(root / "dist", app_files={
        "opt/arena/env/__init__.py": b"",
        "opt/arena/vendor/metaharness-tasks/tasks.py": TASKS_PY,
        "opt/arena/vendor/metaharness-tasks/LICENSE": LICENSE,
    })
    name = image_name or f"{cfg.profile('test').registry}/{cfg.profile('test').repository}"
    (root / "submission.json").write_text(json.dumps({"image": f"{name}@{image.digest}", "tasks": []}))
    sbom_bytes = sbom.generate(image.layout, name=name, app_dir=cfg.app_dir, sources=cfg.sources,
                               first_party_license="MIT", lock_text=LOCK_TEXT)
    from pipeline.checks.results import CheckResult, SuiteResult

    checks = SuiteResult(image=f"{name}@{image.digest}", targets=("image",), seconds=1.0,
                         checks=tuple(CheckResult(id=i, passed=ok, seconds=0.1) for i, ok in CHECKS))
    checks_bytes = json.dumps(checks.to_json()).encode()
    signer = signer or signing.KeySigner(CryptoSigner.generate_ed25519())
    t = datetime(2024, 1, 1, tzinfo=timezone.utc)
    attest.write_attestations(
        cfg=cfg, subject=attest.Subject(name=name, digest=image.digest), provenance=prov, lock_text=LOCK_TEXT,
        sbom_bytes=sbom_bytes, checks=checks, checks_sha256=sha(checks_bytes), signer=signer,
        out_dir=root / "attestations", started=t, finished=t, invocation_id="test-run",
    )
    return Records(root=root, image=image, signer=signer)


@pytest.fixture
def records(tmp_path, monkeypatch) -> Records:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(EPOCH))
    return make_records(tmp_path / "records")
