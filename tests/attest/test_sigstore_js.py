"""A second implementation verifies the registry's bundles: sigstore-js (Node), through
tests/sigstore_js/verify_referrers.mjs, which reads the local registry over plain HTTP.

sigstore-js is installed once per run from tests/sigstore_js/package-lock.json (`npm ci`:
exact versions, integrity hashes). Key-signed referrers are verified with the release public
key; the recorded real keyless bundle (tests/fixtures/sigstore, public Sigstore data) with its
identity, offline against the trusted root sigstore-js ships. One flipped byte, or a statement
or manifest subject of another digest, is refused.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pipeline.image.oci.image import OCI_INDEX, Index, parse
from pipeline.records import attest, bundles, signing, vsa
from pipeline.registry import push as publish
from pipeline.registry import referrers

from ..shared import once
from .conftest import make_image
from .test_attach_registry import (
    GITHUB_ISSUER,
    KEYLESS,
    KEYLESS_IDENTITY,
    _push_bundle,
    attach_release,
    flip_payload_byte,
)

JS = Path(__file__).resolve().parents[1] / "sigstore_js"
SCRIPT = "verify_referrers.mjs"
KEYLESS_SUBJECT = "sha256:49a3aa6075e0f49f82843e74b5baa614ad2a588e6675612bf108a0a008c5ac25"


@pytest.fixture(scope="session")
def sigstore_js(tmp_path_factory) -> Path:
    """verify_referrers.mjs beside its node_modules, installed once per run with `npm ci`."""

    def make(target: Path) -> None:
        for name in ("package.json", "package-lock.json", SCRIPT):
            shutil.copyfile(JS / name, target / name)
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
            cwd=target,
            check=True,
            capture_output=True,
            timeout=600,
        )

    return once(tmp_path_factory, "sigstore-js", make) / SCRIPT


def _node(script: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["node", str(script), *args], capture_output=True, text=True, timeout=120)


def _image(rec) -> str:
    return f"{rec.image.name}@{rec.image.digest}"


def test_the_shipped_script_is_the_one_tested(sigstore_js):
    assert sigstore_js.read_bytes() == (JS / SCRIPT).read_bytes()


def test_sigstore_js_verifies_every_key_signed_referrer(pushed, sigstore_js):
    """The four records' bundles and the release's verification summary (its self-check), each
    verified with the release public key."""
    rec, client, repo = pushed
    attached = attach_release(rec, client, repo)
    image = f"{client.registry}/{repo}@{rec.image.digest}"
    proc = _node(sigstore_js, image, "--key", str(rec.root / "attestations" / signing.PUBLIC_KEY_FILE))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert [l.split()[1] for l in lines[:-1]][1:] == [*attest.PREDICATES.values(), vsa.PREDICATE_TYPE]
    assert lines[0].startswith("OK ") and lines[0].split()[1].endswith("/release-statement/v1")
    assert lines[4] == f"OK {vsa.PREDICATE_TYPE} {attached[4].descriptor.digest} (tag sha256-{rec.image.digest[7:]})"
    assert all(l.endswith(f"(tag sha256-{rec.image.digest[7:]})") for l in lines[:-1])
    assert lines[-1] == f"5 of 5 Sigstore bundles referring to {rec.image.digest} verified"
    # Another key is refused.
    other = signing.KeySigner(signing.CryptoSigner.generate_ed25519())
    other.publish(rec.root / "other")
    proc = _node(sigstore_js, image, "--key", str(rec.root / "other" / signing.PUBLIC_KEY_FILE))
    assert proc.returncode == 1 and proc.stdout.count("signature verification failed") == 5, proc.stdout


def test_sigstore_js_refuses_a_flipped_byte(pushed, sigstore_js):
    rec, client, repo = pushed
    [prov] = [a for a in bundles.of_records(rec.root / "attestations", signing.DSSE_SUFFIX) if a.name == "provenance"]
    bad = _push_bundle(client, repo, rec.image.digest, flip_payload_byte(prov.bundle), prov.predicate_type)
    proc = _node(
        sigstore_js,
        f"{client.registry}/{repo}@{rec.image.digest}",
        "--key",
        str(rec.root / "attestations" / signing.PUBLIC_KEY_FILE),
    )
    assert proc.returncode == 1
    assert f"FAIL {bad.descriptor.digest}" in proc.stdout and "signature verification failed" in proc.stdout


def test_a_summary_with_a_flipped_byte_is_refused_by_sigstore_js_and_the_audit(pushed, sigstore_js):
    """The release's verification summary, one byte of its signed statement flipped, attached beside
    the genuine one: sigstore-js refuses that bundle (and only it), and so does the audit."""
    from pipeline import audit

    rec, client, repo = pushed
    attach_release(rec, client, repo)
    summary = bundles.of_signed(
        "vsa", (rec.root / "dist" / "vsa.release.dsse.json").read_bytes(), signing.DSSE_SUFFIX, what="vsa"
    )
    bad = _push_bundle(client, repo, rec.image.digest, flip_payload_byte(summary.bundle), vsa.PREDICATE_TYPE)
    proc = _node(
        sigstore_js,
        f"{client.registry}/{repo}@{rec.image.digest}",
        "--key",
        str(rec.root / "attestations" / signing.PUBLIC_KEY_FILE),
    )
    assert proc.returncode == 1
    [failed] = [l for l in proc.stdout.splitlines() if l.startswith("FAIL")]
    assert failed.startswith(f"FAIL {bad.descriptor.digest}") and "signature verification failed" in failed
    assert proc.stdout.splitlines()[-1] == f"5 of 6 Sigstore bundles referring to {rec.image.digest} verified"
    rows = {c.id: c for c in audit.audit(rec.root, registry=True)}
    assert not rows["registry/referrers"].ok
    assert bad.descriptor.digest in rows["registry/referrers"].detail
    assert "signature does not verify with the release key" in rows["registry/referrers"].detail


def test_sigstore_js_refuses_a_summary_that_did_not_pass(pushed, sigstore_js):
    from pipeline import audit

    rec, client, repo = pushed
    stmt = vsa.statement(
        [audit.Check("intoto/links", "attestations/layout.json", "fail", "missing")],
        records=rec.root,
        image=f"{rec.image.name}@{rec.image.digest}",
    )
    _push_bundle(
        client, repo, rec.image.digest, bundles.key_bundle(rec.signer.sign(stmt), what="vsa"), vsa.PREDICATE_TYPE
    )
    proc = _node(
        sigstore_js,
        f"{client.registry}/{repo}@{rec.image.digest}",
        "--key",
        str(rec.root / "attestations" / signing.PUBLIC_KEY_FILE),
    )
    assert proc.returncode == 1 and "the verification summary says FAILED, not PASSED" in proc.stdout


def test_sigstore_js_refuses_a_statement_about_another_digest(pushed, sigstore_js):
    rec, client, repo = pushed
    stmt = attest.statement(attest.Subject("elsewhere", "sha256:" + "e" * 64), attest.TEST_RESULT, {"result": "PASSED"})
    _push_bundle(
        client, repo, rec.image.digest, bundles.key_bundle(rec.signer.sign(stmt), what="forged"), attest.TEST_RESULT
    )
    proc = _node(
        sigstore_js,
        f"{client.registry}/{repo}@{rec.image.digest}",
        "--key",
        str(rec.root / "attestations" / signing.PUBLIC_KEY_FILE),
    )
    assert proc.returncode == 1
    assert f"the signed statement is about sha256:{'e' * 64}, not {rec.image.digest}" in proc.stdout


def test_sigstore_js_refuses_a_referrer_whose_subject_is_another_image(pushed, sigstore_js, tmp_path):
    rec, client, repo = pushed
    other = make_image(tmp_path / "other", app_files={"opt/arena/other.txt": b"another image\n"})
    publish.push_layout(client, repo, other.layout, tag="other")
    [release] = bundles.of_records(rec.root / "attestations", signing.DSSE_SUFFIX)[:1]
    _push_bundle(client, repo, rec.image.digest, release.bundle, release.predicate_type)
    foreign = _push_bundle(client, repo, other.digest, release.bundle, release.predicate_type)
    tag = referrers.fallback_tag(rec.image.digest)
    index = parse(client.get_manifest(repo, tag).raw)
    client.put_manifest(repo, tag, Index(OCI_INDEX, index.manifests + (foreign.descriptor,)).to_bytes(), OCI_INDEX)
    proc = _node(
        sigstore_js,
        f"{client.registry}/{repo}@{rec.image.digest}",
        "--key",
        str(rec.root / "attestations" / signing.PUBLIC_KEY_FILE),
    )
    assert proc.returncode == 1
    assert f"its manifest's subject is {other.digest}, not the image" in proc.stdout
    assert proc.stdout.splitlines()[-1].startswith("1 of 2 Sigstore bundles")


def test_sigstore_js_finds_nothing_for_an_image_without_referrers(pushed, sigstore_js):
    rec, client, repo = pushed
    proc = _node(
        sigstore_js,
        f"{client.registry}/{repo}@{rec.image.digest}",
        "--key",
        str(rec.root / "attestations" / signing.PUBLIC_KEY_FILE),
    )
    assert proc.returncode == 1 and "no Sigstore bundle refers to" in proc.stdout


# ------------------------------------------------------------------ keyless: the recorded real bundle

KEYLESS_ARGS = ("--offline", "--certificate-identity", KEYLESS_IDENTITY, "--certificate-oidc-issuer", GITHUB_ISSUER)


def test_sigstore_js_verifies_the_recorded_keyless_bundle_with_its_identity(sigstore_js):
    proc = _node(sigstore_js, "--bundle", str(KEYLESS), "--digest", KEYLESS_SUBJECT, *KEYLESS_ARGS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith(f"OK {attest.SLSA_PROVENANCE} ")


def test_sigstore_js_refuses_the_keyless_bundle_tampered_or_misattributed(sigstore_js, tmp_path):
    flipped = tmp_path / "flipped.sigstore.json"
    flipped.write_bytes(flip_payload_byte(KEYLESS.read_bytes(), at=400))
    proc = _node(sigstore_js, "--bundle", str(flipped), "--digest", KEYLESS_SUBJECT, *KEYLESS_ARGS)
    assert proc.returncode == 1 and "FAIL" in proc.stdout, proc.stdout
    proc = _node(sigstore_js, "--bundle", str(KEYLESS), "--digest", "sha256:" + "e" * 64, *KEYLESS_ARGS)
    assert proc.returncode == 1 and "the signed statement is about sha256:49a3aa60" in proc.stdout
    proc = _node(
        sigstore_js,
        "--bundle",
        str(KEYLESS),
        "--digest",
        KEYLESS_SUBJECT,
        "--offline",
        "--certificate-identity",
        "https://github.com/x/y/.github/workflows/r.yml@refs/tags/v1",
        "--certificate-oidc-issuer",
        GITHUB_ISSUER,
    )
    assert proc.returncode == 1 and "certificate identity error" in proc.stdout


def test_sigstore_js_reads_a_keyless_referrer_from_the_registry(pushed, sigstore_js):
    """The recorded keyless bundle attached to the image: sigstore-js verifies its certificate,
    Rekor entry and identity from the registry, then refuses it for attesting a wheel."""
    rec, client, repo = pushed
    _push_bundle(client, repo, rec.image.digest, KEYLESS.read_bytes(), attest.SLSA_PROVENANCE)
    proc = _node(sigstore_js, f"{client.registry}/{repo}@{rec.image.digest}", *KEYLESS_ARGS)
    assert proc.returncode == 1
    assert f"the signed statement is about {KEYLESS_SUBJECT}, not {rec.image.digest}" in proc.stdout
    proc = _node(
        sigstore_js,
        f"{client.registry}/{repo}@{rec.image.digest}",
        "--key",
        str(rec.root / "attestations" / signing.PUBLIC_KEY_FILE),
    )
    assert "the bundle is not key-signed" in proc.stdout


def test_sigstore_js_uses_the_referrers_api_where_the_registry_has_one(
    local_registry, tmp_path, monkeypatch, sigstore_js
):
    from pipeline.registry.client import Credentials, RegistryClient
    from tests.referrers_standin import ReferrersStandin

    from .conftest import EPOCH, make_records

    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(EPOCH))
    repo = "arena/attest-api"
    with ReferrersStandin(local_registry.address) as api:
        rec = make_records(tmp_path / "records", image_name=f"{api.address}/{repo}")
        client = RegistryClient(api.address, credentials=Credentials(local_registry.user, local_registry.password))
        publish.push_layout(client, repo, rec.image.layout, tag="test")
        attach_release(rec, client, repo)
        proc = _node(
            sigstore_js,
            f"{api.address}/{repo}@{rec.image.digest}",
            "--key",
            str(rec.root / "attestations" / signing.PUBLIC_KEY_FILE),
        )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("(referrers API)") == 5
