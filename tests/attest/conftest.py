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
