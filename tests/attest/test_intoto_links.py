"""Stage links chained by a layout signed with the release key (in-toto 3.1)."""

from __future__ import annotations

import json

import pytest
from securesystemslib.signer import CryptoSigner

from pipeline import audit, intoto_links
from pipeline.errors import VerificationError


def _record_all(root, signer):
    (root / "dist" / "oci").mkdir(parents=True, exist_ok=True)
    for step in ("vendor", "sbom", "attest", "submission"):
        intoto_links.record(step, root, signer)
    intoto_links.write_layout(root, signer)


@pytest.fixture
def chained(records):
    _record_all(records.root, records.signer.signer)
    return records


def test_chain_verifies(chained):
    intoto_links.verify(chained.root, chained.signer.signer.public_key)
    rows = {c.name: c for c in audit.audit(chained.root)}
    assert rows["in-toto layout and stage links"].ok, rows["in-toto layout and stage links"].detail


def test_sbom_changed_between_stages_breaks_the_chain(chained):
    root, signer = chained.root, chained.signer.signer
    sbom = root / "attestations" / "sbom.cdx.json"
    sbom.write_bytes(sbom.read_bytes().replace(b'"version": 1', b'"version": 2'))
    intoto_links.record("attest", root, signer)  # attest consumed an SBOM the sbom step did not produce
    with pytest.raises(VerificationError, match="in-toto verification failed"):
        intoto_links.verify(root, signer.public_key)


def test_record_edited_after_its_stage(chained):
    path = chained.root / "attestations" / "checks.dsse.json"
    doc = json.loads(path.read_text())
    doc["payloadType"] = doc["payloadType"] + " "
    path.write_text(json.dumps(doc))
    with pytest.raises(VerificationError, match="attestations/checks.dsse.json differs"):
        intoto_links.verify(chained.root, chained.signer.signer.public_key)


def test_submission_edited_after_its_stage(chained):
    path = chained.root / "submission.json"
    path.write_text(path.read_text().replace('"tasks": []', '"tasks": [1]'))
    with pytest.raises(VerificationError, match="submission.json differs"):
        intoto_links.verify(chained.root, chained.signer.signer.public_key)


def test_link_signed_by_another_key(chained):
    intoto_links.record("vendor", chained.root, CryptoSigner.generate_ed25519())
    for p in (chained.root / "attestations" / "links").glob("vendor.*.link"):
        if not p.name.startswith(f"vendor.{chained.signer.signer.public_key.keyid[:8]}"):
            p.rename(chained.root / "attestations" / "links" /
                     f"vendor.{chained.signer.signer.public_key.keyid[:8]}.link")
    with pytest.raises(VerificationError):
        intoto_links.verify(chained.root, chained.signer.signer.public_key)


def test_missing_link(chained):
    next((chained.root / "attestations" / "links").glob("sbom.*.link")).unlink()
    with pytest.raises(VerificationError, match="missing"):
        intoto_links.verify(chained.root, chained.signer.signer.public_key)
    rows = {c.name: c for c in audit.audit(chained.root)}
    assert not rows["in-toto layout and stage links"].ok
