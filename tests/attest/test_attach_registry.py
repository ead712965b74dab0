"""Attestations attached in a real local registry, and `audit --registry` against it."""

from __future__ import annotations

import uuid

import pytest

from pipeline import attest, audit, publish, signing
from pipeline.oci.registry import Credentials, RegistryClient

from .conftest import EPOCH, make_records



@pytest.fixture
def pushed(local_registry, tmp_path, monkeypatch):
    """The small image pushed to a fresh repository (the registry is shared by the session)."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(EPOCH))
    repository = f"arena/attest-{uuid.uuid4().hex[:12]}"
    rec = make_records(tmp_path / "records", image_name=f"{local_registry.address}/{repository}")
    client = RegistryClient(local_registry.address,
                            credentials=Credentials(local_registry.user, local_registry.password))
    publish.push_layout(client, repository, rec.image.layout, tag="test")
    return rec, client, repository


def _registry_rows(root):
    return {c.name: c for c in audit.audit(root, registry=True) if c.name.startswith("registry")}


def test_attached_attestations_pass_the_registry_audit(pushed):
    rec, client, repo = pushed
    tags = attest.attach(client, repo, rec.image.digest, rec.root / "attestations", suffix=signing.DSSE_SUFFIX)
    hexd = rec.image.digest[7:]
    assert set(tags) == {f"sha256-{hexd}.att", f"sha256-{hexd}.sbom"}
    rows = audit.audit(rec.root, registry=True)
    assert all(c.ok for c in rows), audit.render_table(rows)
    assert {"registry manifest = submission image", "registry att tag = records",
            "registry sbom tag = records"} <= {c.name for c in rows}
    bundle = publish.fetch_attachment(client, repo, rec.image.digest, "att")
    assert len(bundle.splitlines()) == 3


def test_missing_att_tag_fails(pushed):
    rec, _, _ = pushed
    rows = _registry_rows(rec.root)
    assert rows["registry manifest = submission image"].ok
    assert not rows["registry att tag = records"].ok
    assert "is missing" in rows["registry att tag = records"].detail


def test_att_tag_with_other_content_fails(pushed):
    rec, client, repo = pushed
    attest.attach(client, repo, rec.image.digest, rec.root / "attestations", suffix=signing.DSSE_SUFFIX)
    # The registry's .att is replaced by a bundle without the check results; the records keep all three.
    two = b"\n".join(attest.attestation_bundle(rec.root / "attestations", signing.DSSE_SUFFIX).splitlines()[:2])
    publish.attach(client, repo, rec.image.digest, "att", two + b"\n", attest.ATT_MEDIA_TYPE)
    rows = _registry_rows(rec.root)
    assert not rows["registry att tag = records"].ok
    assert "sha256 of the" in rows["registry att tag = records"].detail


def test_image_not_pushed_fails(local_registry, tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(EPOCH))
    rec = make_records(tmp_path / "r", image_name=f"{local_registry.address}/arena/never-pushed")
    rows = _registry_rows(rec.root)
    assert not rows["registry manifest = submission image"].ok
