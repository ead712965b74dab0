"""Offline sigstore verification on a real recorded production bundle, and its tampered copies.

The bundle is the GitHub artifact attestation copied into `tests/fixtures/sigstore/`
(public data; its README names the source: cli/cli's test data; sigstore 4.5.1
verifies it offline with the embedded production trust root). Tampered copies are
made here from the original bytes. The real `sigstore` CLI is run on it too, as the
attestations README tells an auditor to. Signing keylessly needs sigstore's public
services and an OIDC identity, so that test is marked `network`.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import audit
from pipeline.errors import VerificationError
from pipeline.records import attest, signing, trust

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sigstore"
BUNDLE = FIXTURES / "github-attestation-reusable-workflow.sigstore.json"
POLICY = signing.SigstorePolicy(
    identity="https://github.com/github/artifact-attestations-workflows/.github/workflows/attest.yml"
    "@09b495c3f12c7881b3cc17209a327792065c1a1d",
    issuer="https://token.actions.githubusercontent.com",
)
SUBJECT_SHA256 = "49a3aa6075e0f49f82843e74b5baa614ad2a588e6675612bf108a0a008c5ac25"


def _tampered(mutate) -> bytes:
    doc = json.loads(BUNDLE.read_bytes())
    mutate(doc)
    return json.dumps(doc).encode()


def _flip_b64_char(text: str, pos: int) -> str:
    ch = text[pos]
    return text[:pos] + ("A" if ch != "A" else "B") + text[pos + 1 :]


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
    wrong = signing.SigstorePolicy(
        identity="https://github.com/someone/else/.github/workflows/x.yml@refs/heads/main", issuer=POLICY.issuer
    )
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


def _keyless(records):
    """The records turned keyless: the DSSE files removed, the fixture bundle as the release statement."""
    att = records.root / "attestations"
    for p in list(att.glob("*.dsse.json")) + [att / "release.pub.pem", att / "keyid"]:
        p.unlink()
    shutil.copyfile(BUNDLE, att / "release.sigstore.json")
    return att


def test_audit_verifies_bundles_against_the_auditors_identity(records):
    """The bundle's signature and identity verify; its content (not a release statement) is refused."""
    _keyless(records)
    auditor = trust.from_auditor(key_file=None, identity=POLICY.identity, issuer=POLICY.issuer)
    rows = {c.id: c for c in audit.audit(records.root, trust_root=auditor)}
    assert "predicateType" in rows["release/signature"].detail
    assert "sigstore verification failed" not in rows["release/signature"].detail
    prefix = trust.from_auditor(key_file=None, issuer=POLICY.issuer, identity=POLICY.identity.split("@")[0] + "@*")
    rows = {c.id: c for c in audit.audit(records.root, trust_root=prefix)}
    assert "predicateType" in rows["release/signature"].detail


def test_audit_refuses_a_bundle_from_another_identity(records):
    att = _keyless(records)
    pinned = "https://github.com/akseljoonas/openenv-arena-release/.github/workflows/release.yml@refs/tags/*"
    auditor = trust.from_auditor(key_file=None, identity=pinned, issuer=POLICY.issuer)
    rows = {c.id: c for c in audit.audit(records.root, trust_root=auditor)}
    assert rows["release/signature"].detail.startswith(
        f"attestations/release.sigstore.json is signed by {POLICY.identity}, which is not the pinned identity; "
        f"expected {pinned}"
    )
    # trust.toml pins only keys for this profile: a bundle is refused, naming its signer
    rows = {c.id: c for c in audit.audit(records.root)}
    assert rows["release/signature"].detail.startswith(
        "attestations/release.sigstore.json: no sigstore identity is pinned ([trust.test] of trust.toml)"
    )
    assert POLICY.identity in rows["release/signature"].detail
    (att / "release.sigstore.json").write_bytes(
        _tampered(lambda d: d["dsseEnvelope"].update(payload=_flip_b64_char(d["dsseEnvelope"]["payload"], 400)))
    )
    auditor = trust.from_auditor(key_file=None, identity=POLICY.identity, issuer=POLICY.issuer)
    rows = {c.id: c for c in audit.audit(records.root, trust_root=auditor)}
    assert "sigstore verification failed" in rows["release/signature"].detail


@pytest.mark.parametrize(
    "pattern,san,ok",
    [
        (
            "https://github.com/o/r/.github/workflows/release.yml@refs/tags/*",
            "https://github.com/o/r/.github/workflows/release.yml@refs/tags/v1.0",
            True,
        ),
        (
            "https://github.com/o/r/.github/workflows/release.yml@refs/tags/*",
            "https://github.com/o/r/.github/workflows/release.yml@refs/tags/",
            False,
        ),
        (
            "https://github.com/o/r/.github/workflows/release.yml@refs/tags/*",
            "https://github.com/o/r/.github/workflows/release.yml@refs/heads/main",
            False,
        ),
        (
            "https://github.com/o/r/.github/workflows/release.yml@refs/tags/*",
            "https://github.com/o/r/.github/workflows/release.yml@refs/tags/v1 x",
            False,
        ),
        (
            "https://github.com/o/r/.github/workflows/release.yml@refs/tags/v1",
            "https://github.com/o/r/.github/workflows/release.yml@refs/tags/v1",
            True,
        ),
        (
            "https://github.com/o/r/.github/workflows/release.yml@refs/tags/v1",
            "https://github.com/o/r/.github/workflows/release.yml@refs/tags/v10",
            False,
        ),
        # case and look-alike letters: exact, never folded
        (
            "https://github.com/o/r/.github/workflows/release.yml@refs/tags/*",
            "https://github.com/O/r/.github/workflows/release.yml@refs/tags/v1",
            False,
        ),
        (
            "https://github.com/o/r/.github/workflows/release.yml@refs/tags/*",
            "https://github.com/\u043e/r/.github/workflows/release.yml@refs/tags/v1",
            False,
        ),
        # what `*` stands for is a git tag name: release/1.0 is one; NUL, U+2028, "..", "?" are not
        (
            "https://github.com/o/r/.github/workflows/release.yml@refs/tags/*",
            "https://github.com/o/r/.github/workflows/release.yml@refs/tags/release/1.0",
            True,
        ),
        (
            "https://github.com/o/r/.github/workflows/release.yml@refs/tags/*",
            "https://github.com/o/r/.github/workflows/release.yml@refs/tags/v1\x00evil",
            False,
        ),
        (
            "https://github.com/o/r/.github/workflows/release.yml@refs/tags/*",
            "https://github.com/o/r/.github/workflows/release.yml@refs/tags/v1\u2028x",
            False,
        ),
        (
            "https://github.com/o/r/.github/workflows/release.yml@refs/tags/*",
            "https://github.com/o/r/.github/workflows/release.yml@refs/tags/../heads/main",
            False,
        ),
        (
            "https://github.com/o/r/.github/workflows/release.yml@refs/tags/*",
            "https://github.com/o/r/.github/workflows/release.yml@refs/tags/v1?ref=main",
            False,
        ),
        (
            "https://github.com/o/r/.github/workflows/release.yml@refs/tags/*",
            "https://github.com/o/r/.github/workflows/release.yml@refs/tags/v1.lock",
            False,
        ),
    ],
)
def test_identity_rule(pattern, san, ok):
    assert trust.identity_matches(pattern, san) is ok


def _sigstore_cli(tmp_path, identity: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "sigstore",
            "verify",
            "identity",
            "--offline",
            "--bundle",
            str(BUNDLE),
            "--cert-identity",
            identity,
            "--cert-oidc-issuer",
            POLICY.issuer,
            f"sha256:{SUBJECT_SHA256}",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_sigstore_cli_verifies_the_fixture_offline(tmp_path):
    """The command attestations/README.md gives an auditor, run for real on the recorded bundle."""
    proc = _sigstore_cli(tmp_path, POLICY.identity)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"OK: SHA2_256:{SUBJECT_SHA256}" in proc.stdout + proc.stderr
    wrong = _sigstore_cli(tmp_path, "https://github.com/x/y/.github/workflows/attest.yml@refs/heads/main")
    assert wrong.returncode != 0
    assert "SANs do not match" in wrong.stdout + wrong.stderr


@pytest.mark.network
def test_keyless_signing_round_trip(tmp_path):
    """Real sigstore signing: needs Fulcio/Rekor and an ambient OIDC identity (CI)."""
    from sigstore.oidc import detect_credential

    if not (os.environ.get("SIGSTORE_ID_TOKEN") or detect_credential()):
        pytest.skip("no OIDC identity token available for keyless signing")
    signer = signing.SigstoreSigner()
    stmt = attest.statement(
        attest.Subject("example/image", "sha256:" + "0" * 64),
        attest.TEST_RESULT,
        {"result": "PASSED", "passedTests": [], "failedTests": [], "warnedTests": [], "configuration": []},
    )
    bundle = signer.sign(stmt)
    signer.publish(tmp_path)
    policy = signing.SigstorePolicy.load(tmp_path / signing.IDENTITY_FILE)
    assert signing.sigstore_verify(bundle, policy, what="fresh bundle") == stmt


def test_the_keyless_readme_command_verifies_verbatim(tmp_path):
    """The `sigstore verify identity` line a keyless release's README prints, run as written
    (the fixture bundle standing in for attestations/provenance.sigstore.json)."""
    import shlex

    subject = attest.Subject("demo", f"sha256:{SUBJECT_SHA256}")
    files = [
        attest.AttestationFile(
            "provenance", Path("attestations/provenance.sigstore.json"), attest.SLSA_PROVENANCE, "0" * 64
        )
    ]
    text = attest.readme(
        subject,
        "sigstore",
        files,
        signer_id=POLICY.identity,
        issuer=POLICY.issuer,
        source_url="https://github.com/akseljoonas/openenv-arena-release",
    ).decode()
    line = next(l for l in text.splitlines() if "--bundle attestations/provenance.sigstore.json" in l)
    (tmp_path / "attestations").mkdir()
    shutil.copyfile(BUNDLE, tmp_path / "attestations" / "provenance.sigstore.json")
    argv = shlex.split(line)
    assert argv[:4] == ["sigstore", "verify", "identity", "--offline"]
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, "-m", *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
