"""The SBOM is read from the image's layers, validates strictly, and is reproducible."""

from __future__ import annotations

import json

import pytest

from pipeline.config import Source
from pipeline.errors import DigestMismatch
from pipeline.records import sbom

from .conftest import TASKS_PY, make_image

SOURCE = Source(
    name="metaharness-tasks",
    repository="https://example.invalid/metaharness",
    revision="4657e5b82e124917b01d79ee5e9de41badb48fda",
    path="arena_env/tasks.py",
    sha256="0" * 64,
    size=1,
    license="MIT",
    license_file="LICENSE",
    profiles=("arena",),
)
LOCK = "requests==2.32.3 \\\n    --hash=sha256:" + "a" * 64 + " \\\n    --hash=sha256:" + "b" * 64 + "\n"


def _generate(img, monkeypatch, epoch="1700000000"):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", epoch)
    return sbom.generate(
        img.layout, name=img.name, app_dir="/opt/arena", sources=[SOURCE], first_party_license="MIT", lock_text=LOCK
    )


def _components(doc):
    return {c["bom-ref"]: c for c in doc["components"]}


def test_sbom_describes_the_layers(small_image, monkeypatch):
    data = _generate(small_image, monkeypatch)
    sbom.validate(data)
    doc = json.loads(data)
    assert doc["specVersion"] == "1.6"
    assert doc["serialNumber"] == f"urn:uuid:{sbom.serial_number(small_image.digest)}"
    assert doc["metadata"]["timestamp"].startswith("2023-11-14T22:13:20")
    meta = doc["metadata"]["component"]
    assert meta["type"] == "container"
    assert meta["purl"].startswith(f"pkg:oci/openenv-data-workflows@{small_image.digest}")
    comps = _components(doc)
    libc = "pkg:deb/debian/libc6@2.36-9%2Bdeb12u4?arch=amd64&distro=debian-12"
    assert libc in comps and comps[libc]["version"] == "2.36-9+deb12u4"
    assert not any("removed-thing" in r for r in comps), "a deinstalled package is listed"
    assert "pkg:pypi/requests@2.32.3" in comps
    req = comps["pkg:pypi/requests@2.32.3"]
    assert req["licenses"] == [{"license": {"id": "Apache-2.0"}}]
    wheel = sorted(p["value"] for p in req["properties"] if p["name"] == "arena:wheel-sha256")
    assert wheel == ["a" * 64, "b" * 64]
    # Two wheels allowed: no single hash can be the component's.
    assert "hashes" not in req
    assert not any("old-pkg" in r for r in comps), "the whiteout did not remove Old_Pkg"
    tasks = comps["file:/opt/arena/vendor/metaharness-tasks/tasks.py"]
    import hashlib

    assert tasks["hashes"] == [{"alg": "SHA-256", "content": hashlib.sha256(TASKS_PY).hexdigest()}]
    assert tasks["licenses"] == [{"license": {"id": "MIT"}}]
    assert {"name": "arena:source-revision", "value": SOURCE.revision} in tasks["properties"]
    deps = {d["ref"]: d.get("dependsOn", []) for d in doc["dependencies"]}
    assert set(deps[meta["bom-ref"]]) == set(comps)


def test_a_wheel_component_carries_the_wheel_hash_from_the_lock(small_image, monkeypatch):
    """The component hash is the locked wheel's sha256, not the RECORD file's: consumers
    match it against the wheel they download. RECORD's hash keeps its own name."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    one = "requests==2.32.3 --hash=sha256:" + "c" * 64 + "\n"
    doc = json.loads(
        sbom.generate(
            small_image.layout,
            name=small_image.name,
            app_dir="/opt/arena",
            sources=[SOURCE],
            first_party_license="MIT",
            lock_text=one,
        )
    )
    req = _components(doc)["pkg:pypi/requests@2.32.3"]
    assert req["hashes"] == [{"alg": "SHA-256", "content": "c" * 64}]
    props = {p["name"]: p["value"] for p in req["properties"]}
    assert props["arena:wheel-sha256"] == "c" * 64
    record = props["arena:dist-info-RECORD-sha256"]
    assert len(record) == 64 and record != "c" * 64
    # Without a lock naming the wheel, nothing claims to be its hash.
    bare = json.loads(
        sbom.generate(
            small_image.layout,
            name=small_image.name,
            app_dir="/opt/arena",
            sources=[SOURCE],
            first_party_license="MIT",
            lock_text="",
        )
    )
    assert "hashes" not in _components(bare)["pkg:pypi/requests@2.32.3"]


def test_sbom_is_byte_identical_across_runs(tmp_path, monkeypatch):
    a = _generate(make_image(tmp_path / "a"), monkeypatch)
    b = _generate(make_image(tmp_path / "b"), monkeypatch)
    assert a == b


def test_sbom_timestamp_follows_source_date_epoch(small_image, monkeypatch):
    doc = json.loads(_generate(small_image, monkeypatch, epoch="86400"))
    assert doc["metadata"]["timestamp"].startswith("1970-01-02T00:00:00")


def test_sbom_refuses_a_corrupt_layer(small_image, monkeypatch):
    manifest = json.loads((small_image.layout / "blobs/sha256" / small_image.digest[7:]).read_bytes())
    blob = small_image.layout / "blobs/sha256" / manifest["layers"][0]["digest"][7:]
    data = bytearray(blob.read_bytes())
    data[-5] ^= 0xFF  # the gzip trailer: content still readable, digest wrong
    blob.write_bytes(bytes(data))
    with pytest.raises(Exception) as exc:
        _generate(small_image, monkeypatch)
    assert manifest["layers"][0]["digest"] in str(exc.value) or isinstance(exc.value, DigestMismatch)


def test_strict_validation_rejects_a_broken_document(small_image, monkeypatch):
    doc = json.loads(_generate(small_image, monkeypatch))
    doc["components"][0]["type"] = "not-a-type"
    with pytest.raises(Exception, match="CycloneDX 1.6"):
        sbom.validate(json.dumps(doc).encode())


# The IRI grammar is built only when an IRI is checked (pipeline.records._iri), in a fresh
# interpreter: the SBOM without external references validates without it, one with a
# broken reference URL is still rejected by it, a good one accepted.
_IRI_PROBE = r"""
import json, sys
from pipeline.records import sbom
from pipeline.errors import ReleaseError
doc = json.loads(sys.stdin.read())
sbom.validate(json.dumps(doc).encode())
print("deferred after a plain SBOM:", type(sys.modules["rfc3987_syntax"]).__name__ == "_Deferred")
for url in ("https://example.org/a%20b", "https://exa mple.org/<x>"):
    doc["components"][0]["externalReferences"] = [{"type": "website", "url": url}]
    try:
        sbom.validate(json.dumps(doc).encode())
        print(url, "accepted")
    except ReleaseError:
        print(url, "rejected")
print("grammar loaded:", "lark" in sys.modules)
"""


def test_the_iri_grammar_is_built_only_where_an_iri_is_checked(small_image, monkeypatch):
    import subprocess
    import sys

    data = _generate(small_image, monkeypatch)
    assert b"externalReferences" not in data
    out = (
        subprocess.run(
            [sys.executable, "-c", _IRI_PROBE], input=data, capture_output=True, check=True, cwd=sbom.REPO_ROOT
        )
        .stdout.decode()
        .splitlines()
    )
    assert out == [
        "deferred after a plain SBOM: True",
        "https://example.org/a%20b accepted",
        "https://exa mple.org/<x> rejected",
        "grammar loaded: True",
    ], out
