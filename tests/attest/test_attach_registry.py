"""Attestations attached in a real local registry, and `audit --registry` against it."""

from __future__ import annotations

import uuid

import pytest

from pipeline.records import attest, signing
from pipeline import audit
from pipeline.registry import push as publish

from .conftest import EPOCH, make_records



@pytest.fixture
def pushed(local_registry, tmp_path, monkeypatch):
    """The small image pushed to a fresh repository (the registry is shared by the session)."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(EPOCH))
    repository = f"arena/attest-{uuid.uuid4().hex[:12]}"
    rec = make_records(tmp_path / "records", image_name=f"{local_registry.address}/{repository}")
    client = local_registry.client()
    publish.push_layout(client, repository, rec.image.layout, tag="test")
    return rec, client, repository


def _registry_rows(root):
    return {c.id: c for c in audit.audit(root, registry=True) if c.id.startswith("registry")}


def test_attached_attestations_pass_the_registry_audit(pushed):
    rec, client, repo = pushed
    tags = attest.attach(client, repo, rec.image.digest, rec.root / "attestations", suffix=signing.DSSE_SUFFIX)
    hexd = rec.image.digest[7:]
    assert set(tags) == {f"sha256-{hexd}.att", f"sha256-{hexd}.sbom"}
    rows = audit.audit(rec.root, registry=True)
    assert all(c.ok for c in rows), audit.render_table(rows)
    assert {"registry/manifest", "registry/att", "registry/sbom"} <= {c.id for c in rows}
    bundle = publish.fetch_attachment(client, repo, rec.image.digest, "att")
    assert len(bundle.splitlines()) == 3


def test_missing_att_tag_fails(pushed):
    rec, _, _ = pushed
    rows = _registry_rows(rec.root)
    assert rows["registry/manifest"].ok
    assert not rows["registry/att"].ok
    assert "is missing" in rows["registry/att"].detail


def test_att_tag_with_other_content_fails(pushed):
    rec, client, repo = pushed
    attest.attach(client, repo, rec.image.digest, rec.root / "attestations", suffix=signing.DSSE_SUFFIX)
    # The registry's .att is replaced by a bundle without the check results; the records keep all three.
    two = b"\n".join(attest.attestation_bundle(rec.root / "attestations", signing.DSSE_SUFFIX).splitlines()[:2])
    publish.attach(client, repo, rec.image.digest, "att", two + b"\n", attest.ATT_MEDIA_TYPE)
    rows = _registry_rows(rec.root)
    assert not rows["registry/att"].ok
    assert "sha256 of the" in rows["registry/att"].detail


def test_image_not_pushed_fails(local_registry, tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(EPOCH))
    rec = make_records(tmp_path / "r", image_name=f"{local_registry.address}/arena/never-pushed")
    rows = _registry_rows(rec.root)
    assert not rows["registry/manifest"].ok


def test_sbom_components_checked_against_pulled_blobs(pushed):
    """No dist/oci: with --registry the audit pulls the layers anonymously and reads the SBOM's
    components and what the image installs from them; an SBOM hiding a component is caught
    that way too."""
    import json
    import shutil

    rec, _, _ = pushed
    shutil.rmtree(rec.root / "dist")
    rows = {c.id: c for c in audit.audit(rec.root, registry=True)}
    assert rows["sbom/components"].ok, rows["sbom/components"].detail
    assert rows["sbom/coverage"].ok, rows["sbom/coverage"].detail
    path = rec.root / "attestations" / "sbom.cdx.json"
    doc = json.loads(path.read_text())
    doc["components"] = [c for c in doc["components"] if c["name"] != "libc6"]
    path.write_text(json.dumps(doc))
    rows = {c.id: c for c in audit.audit(rec.root, registry=True)}
    assert "missing pkg:deb/debian/libc6@" in rows["sbom/components"].detail
    assert ", got deb libc6 " in rows["sbom/coverage"].detail
