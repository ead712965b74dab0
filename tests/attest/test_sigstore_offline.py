"""Offline sigstore verification on a real recorded production bundle, and its tampered copies.

The bundle is the GitHub artifact attestation recorded in
`<repo>/../shared/fixtures/sigstore/` (see its README: sigstore 4.5.1 verifies it
offline with the embedded production trust root). Tampered copies are made here
from the original bytes. Signing keylessly needs sigstore's public services and an
OIDC identity, so that test is marked `network`.
"""

from __future__ import annotations

import base64
import json
import os
import shutil

import pytest

from pipeline import attest, audit, signing
from pipeline.config import REPO_ROOT
from pipeline.errors import VerificationError

FIXTURES = REPO_ROOT.parent / "shared" / "fixtures" / "sigstore"
BUNDLE = FIXTURES / "github-attestation-reusable-workflow.sigstore.json"
POLICY = signing.SigstorePolicy(
    identity="https://github.com/github/artifact-attestations-workflows/.github/workflows/attest.yml"
             "@09b495c3f12c7881b3cc17209a327792065c1a1d",
    issuer="https://token.actions.githubusercontent.com",
)
SUBJECT_SHA256 = "49a3aa6075e0f49f82843e74b5baa614ad2a588e6675612bf108a0a008c5ac25"

pytestmark = pytest.mark.skipif(not BUNDLE.is_file(), reason=f"recorded sigstore fixture not found at {BUNDLE}")


def _tampered(mutate) -> bytes:
    doc = json.loads(BUNDLE.read_bytes())
    mutate(doc)
    return json.dumps(doc).encode()


def _flip_b64_char(text: str, pos: int) -> str:
    ch = text[pos]
    return text[:pos] + ("A" if ch != "A" else "B") + text[pos + 1:]


def test_real_bundle_verifies_offline():
    payload = signing.sigstore_verify(BUNDLE.read_bytes(), POLICY, what=BUNDLE.name)
    stmt = attest.load_statement(payload, what=BUNDLE.name)
    assert stmt["predicateType"] == attest.SLSA_PROVENANCE
    assert stmt["subject"][0]["digest"]["sha256"] == SUBJECT_SHA256


@pytest.mark.parametrize("pos", [40, 400, 900])
def test_payload_char_changed_fails(pos):
    def mutate(doc):
        doc["dsseEnvelope"]["payload"] = _flip_b64_char(doc["dsseEnvelope"]["payload"], pos)

    with pytest.raises(VerificationError, match="invalid signature"):
        signing.sigstore_verify(_tampered(mutate), POLICY, what="tampered.sigstore.json")


def test_inclusion_proof_hash_changed_fails():
    def mutate(doc):
        proof = doc["verificationMaterial"]["tlogEntries"][0]["inclusionProof"]
        h = bytearray(base64.b64decode(proof["hashes"][0]))
        h[0] ^= 1
        proof["hashes"][0] = base64.b64encode(bytes(h)).decode()

    with pytest.raises(VerificationError, match="inclusion proof"):
        signing.sigstore_verify(_tampered(mutate), POLICY, what="tampered.sigstore.json")


def test_wrong_identity_fails():
    wrong = signing.SigstorePolicy(identity="https://github.com/someone/else/.github/workflows/x.yml@refs/heads/main",
                                   issuer=POLICY.issuer)
    with pytest.raises(VerificationError, match="SANs do not match"):
        signing.sigstore_verify(BUNDLE.read_bytes(), wrong, what=BUNDLE.name)


def test_wrong_issuer_fails():
    wrong = signing.SigstorePolicy(identity=POLICY.identity, issuer="https://accounts.google.com")
    with pytest.raises(VerificationError, match="sigstore verification failed"):
        signing.sigstore_verify(BUNDLE.read_bytes(), wrong, what=BUNDLE.name)


def test_verification_leaves_the_home_directory_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    signing.sigstore_verify(BUNDLE.read_bytes(), POLICY, what=BUNDLE.name)
    assert not (tmp_path / "data").exists() and not (tmp_path / "cache").exists()
    assert os.environ["XDG_DATA_HOME"] == str(tmp_path / "data")


def test_audit_uses_the_identity_policy_for_bundles(records):
    """A keyless release: the audit verifies the bundle's signature, then the subject check bites."""
    att = records.root / "attestations"
    for p in list(att.glob("*.dsse.json")) + [att / "release.pub.pem", att / "keyid"]:
        p.unlink()
    (att / signing.IDENTITY_FILE).write_bytes(POLICY.to_json())
    shutil.copyfile(BUNDLE, att / "provenance.sigstore.json")
    rows = {c.name: c for c in audit.audit(records.root)}
    assert rows["provenance signature (sigstore)"].ok, rows["provenance signature (sigstore)"].detail
    assert not rows["provenance subject = submission image"].ok
    assert SUBJECT_SHA256 in rows["provenance subject = submission image"].detail
    assert not rows["sbom signature (sigstore)"].ok and "missing" in rows["sbom signature (sigstore)"].detail
    (att / "provenance.sigstore.json").write_bytes(_tampered(
        lambda d: d["dsseEnvelope"].update(payload=_flip_b64_char(d["dsseEnvelope"]["payload"], 400))))
    rows = {c.name: c for c in audit.audit(records.root)}
    assert not rows["provenance signature (sigstore)"].ok
    assert "attestations/provenance.sigstore.json" in rows["provenance signature (sigstore)"].detail


@pytest.mark.network
def test_keyless_signing_round_trip(tmp_path):
    """Real sigstore signing: needs Fulcio/Rekor and an ambient OIDC identity (CI)."""
    from sigstore.oidc import detect_credential

    if not (os.environ.get("SIGSTORE_ID_TOKEN") or detect_credential()):
        pytest.skip("no OIDC identity token available for keyless signing")
    signer = signing.SigstoreSigner()
    stmt = attest.statement(attest.Subject("example/image", "sha256:" + "0" * 64), attest.TEST_RESULT,
                            {"result": "PASSED", "passedTests": [], "failedTests": [], "warnedTests": [],
                             "configuration": []})
    bundle = signer.sign(stmt)
    signer.publish(tmp_path)
    policy = signing.SigstorePolicy.load(tmp_path / signing.IDENTITY_FILE)
    assert signing.sigstore_verify(bundle, policy, what="fresh bundle") == stmt
