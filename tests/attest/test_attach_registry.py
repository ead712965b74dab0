"""The release's Sigstore bundles as OCI referrers in a real local registry (Debian's
docker-registry: no referrers API, so the referrers tag schema), and `audit --registry`."""

from __future__ import annotations

import base64
import json
import shutil
import uuid
from pathlib import Path

import pytest

from pipeline import audit, config
from pipeline.audit import selfcheck
from pipeline.errors import VerificationError
from pipeline.image.oci import digest as oci_digest
from pipeline.image.oci.image import OCI_INDEX, Index, parse
from pipeline.records import attest, bundles, signing, trust, vsa
from pipeline.registry import push as publish
from pipeline.registry import referrers
from pipeline.registry.client import Credentials, RegistryClient

from .conftest import EPOCH, make_image, make_records

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sigstore"
KEYLESS = FIXTURES / "github-attestation-reusable-workflow.sigstore.json"
KEYLESS_IDENTITY = (
    "https://github.com/github/artifact-attestations-workflows/.github/workflows/attest.yml"
    "@09b495c3f12c7881b3cc17209a327792065c1a1d"
)
GITHUB_ISSUER = "https://token.actions.githubusercontent.com"


def _registry_rows(root, **kw):
    return {c.id: c for c in audit.audit(root, registry=True, **kw) if c.id.startswith("registry")}


def flip_payload_byte(bundle: bytes, at: int = 40) -> bytes:
    """The bundle with one byte of its signed statement flipped (the JSON still parses)."""
    doc = json.loads(bundle)
    payload = bytearray(base64.b64decode(doc["dsseEnvelope"]["payload"]))
    payload[at] ^= 0x01
    doc["dsseEnvelope"]["payload"] = base64.b64encode(bytes(payload)).decode()
    return json.dumps(doc).encode()


def _push_bundle(client, repo, digest, bundle: bytes, predicate: str):
    return referrers.push_referrer(
        client,
        repo,
        digest,
        artifact_type=bundles.MEDIA_TYPE,
        payload=bundle,
        media_type=bundles.MEDIA_TYPE,
        annotations=bundles.referrer_annotations(predicate),
    )


def self_check(rec, client=None, repo=None):
    """What a release does after attaching the records' bundles: audit them (the registry too),
    sign the verification summary with the release key and, given a registry, attach it."""
    checked = selfcheck.run(
        rec.root,
        signer=rec.signer,
        pinned=True,
        profile="test",
        image=f"{rec.image.name}@{rec.image.digest}",
        out_dir=rec.root / "dist",
        registry=client is not None,
    )
    pushed = selfcheck.attach(client, repo, rec.image.digest, checked) if client is not None else None
    return checked, pushed


def attach_release(rec, client, repo) -> list:
    """The five referrers a release pushes: the records' four bundles, then its summary."""
    attached = bundles.attach(client, repo, rec.image.digest, rec.root / "attestations", suffix=signing.DSSE_SUFFIX)
    return attached + [self_check(rec, client, repo)[1]]


def test_each_signed_statement_is_a_standard_bundle_referrer(pushed):
    rec, client, repo = pushed
    digest = rec.image.digest
    attached = attach_release(rec, client, repo)
    tag = f"sha256-{digest[7:]}"
    assert [a.listed_by for a in attached] == [f"tag {tag}"] * 5  # docker-registry: no referrers API
    assert client.get_referrers(repo, digest) is None
    listing = referrers.list_referrers(client, repo, digest)
    assert listing.found_by == f"tag {tag}"
    assert [d.digest for d in listing.descriptors] == [a.descriptor.digest for a in attached]
    # The fallback index, as the referrers tag schema has it.
    index = client.get_manifest(repo, tag)
    doc = json.loads(index.raw)
    assert doc["mediaType"] == OCI_INDEX and index.media_type == OCI_INDEX
    image_raw = client.get_manifest(repo, digest).raw
    predicates = []
    for entry in doc["manifests"]:
        assert entry["artifactType"] == bundles.MEDIA_TYPE
        assert entry["annotations"]["dev.sigstore.bundle.content"] == "dsse-envelope"
        predicates.append(entry["annotations"]["dev.sigstore.bundle.predicateType"])
        m = json.loads(client.get_manifest(repo, entry["digest"]).raw)
        assert m["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
        assert m["artifactType"] == bundles.MEDIA_TYPE
        assert m["config"] == {
            "mediaType": "application/vnd.oci.empty.v1+json",
            "size": 2,
            "digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
        }
        assert m["subject"] == {
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest,
            "size": len(image_raw),
        }
        assert m["annotations"] == entry["annotations"]
        [layer] = m["layers"]
        assert layer["mediaType"] == bundles.MEDIA_TYPE
        bundle = json.loads(client.get_blob_bytes(repo, layer["digest"]))
        assert bundle["mediaType"] == bundles.MEDIA_TYPE
        assert bundle["verificationMaterial"] == {"publicKey": {"hint": rec.signer.keyid}, "tlogEntries": []}
        # The DSSE envelope the records hold (the summary: dist/'s), unchanged.
        name = {v: k for k, v in attest.PREDICATES.items()}.get(entry["annotations"][bundles.PREDICATE_TYPE], "release")
        signed = (
            rec.root / "dist" / "vsa.release.dsse.json"
            if predicates[-1] == vsa.PREDICATE_TYPE
            else rec.root / "attestations" / f"{name}.dsse.json"
        )
        assert bundle["dsseEnvelope"] == json.loads(signed.read_bytes())
    assert predicates[1:4] == list(attest.PREDICATES.values())
    assert predicates[0].endswith("/release-statement/v1")
    assert predicates[4] == vsa.PREDICATE_TYPE
    rows = audit.audit(rec.root, registry=True)
    assert all(c.ok for c in rows), audit.render_table(rows)
    by_id = {c.id: c for c in rows}
    assert {
        "registry/manifest",
        "registry/referrers",
        "registry/vsa",
        "registry/release",
        "registry/provenance",
        "registry/sbom",
        "registry/checks",
    } <= set(by_id)
    assert by_id["registry/vsa"].status == "pass"
    assert by_id["registry/listed"].detail.startswith("5 Sigstore bundle(s) signed by the trust root: ")
    assert by_id["registry/listed"].detail.endswith(vsa.PREDICATE_TYPE)


def test_the_release_summary_is_its_self_check_signed_by_the_release_key(pushed):
    """The summary a release attaches: about the image, PASSED, signed with the release key, marked as
    the releaser's self-check, naming the records it verified and the one check it could not run."""
    rec, client, repo = pushed
    bundles.attach(client, repo, rec.image.digest, rec.root / "attestations", suffix=signing.DSSE_SUFFIX)
    checked, _ = self_check(rec, client, repo)
    assert checked.path == rec.root / "dist" / "vsa.release.dsse.json"
    stmt = json.loads(signing.dsse_verify(checked.path.read_bytes(), rec.signer.signer.public_key, what="vsa"))
    assert stmt["subject"][0]["digest"]["sha256"] == rec.image.digest[7:]
    pred = stmt["predicate"]
    assert pred["verificationResult"] == "PASSED" and pred["selfCheck"].startswith("the releaser's own audit")
    assert pred["notVerified"] == ["registry/vsa"] and pred["checks"]["registry/referrers"] == "pass"
    assert pred["trustRoot"].startswith(f"keyids {rec.signer.keyid}")
    assert {i["uri"] for i in pred["inputAttestations"]} >= {"attestations/release.dsse.json"}
    [row] = [c for c in checked.rows if c.id == "registry/vsa"]
    assert row.status == "skipped" and "after this audit" in row.detail


def test_the_self_check_refuses_records_that_fail_and_signs_nothing(pushed):
    rec, client, repo = pushed
    with pytest.raises(VerificationError, match=r"fail their own audit: .*first registry/referrers"):
        self_check(rec, client, repo)  # nothing attached yet
    assert not (rec.root / "dist" / "vsa.release.dsse.json").exists()


def test_a_summary_with_one_flipped_byte_fails(pushed):
    rec, client, repo = pushed
    attach_release(rec, client, repo)
    summary = bundles.of_signed(
        "vsa", (rec.root / "dist" / "vsa.release.dsse.json").read_bytes(), signing.DSSE_SUFFIX, what="vsa"
    )
    bad = _push_bundle(client, repo, rec.image.digest, flip_payload_byte(summary.bundle), vsa.PREDICATE_TYPE)
    rows = _registry_rows(rec.root)
    assert not rows["registry/referrers"].ok
    assert f"referrer {bad.descriptor.digest}" in rows["registry/referrers"].detail
    assert "signature does not verify with the release key" in rows["registry/referrers"].detail


def test_no_summary_or_a_failed_one_fails(pushed):
    rec, client, repo = pushed
    bundles.attach(client, repo, rec.image.digest, rec.root / "attestations", suffix=signing.DSSE_SUFFIX)
    rows = _registry_rows(rec.root)
    assert rows["registry/referrers"].ok and rows["registry/release"].ok
    assert "no verification summary signed by the trust root" in rows["registry/vsa"].detail
    # A summary the release key signed that says FAILED.
    failed = [audit.Check("intoto/links", "attestations/layout.json", "fail", "missing")]
    stmt = vsa.statement(failed, records=rec.root, image=f"{rec.image.name}@{rec.image.digest}")
    _push_bundle(
        client, repo, rec.image.digest, bundles.key_bundle(rec.signer.sign(stmt), what="vsa"), vsa.PREDICATE_TYPE
    )
    rows = _registry_rows(rec.root)
    assert rows["registry/referrers"].ok
    assert "verificationResult; expected PASSED, got FAILED" in rows["registry/vsa"].detail


def test_another_auditors_summary_is_listed_not_judged(pushed):
    """A summary signed by someone else (another auditor, or anyone who may push) neither fails the
    audit nor counts for it; one naming the release key but signed by another is refused."""
    rec, client, repo = pushed
    attach_release(rec, client, repo)
    auditor = signing.KeySigner(signing.CryptoSigner.generate_ed25519())
    stmt = vsa.statement(
        [audit.Check("x", "y", "fail")], records=rec.root, image=f"{rec.image.name}@{rec.image.digest}"
    )
    theirs = _push_bundle(
        client, repo, rec.image.digest, bundles.key_bundle(auditor.sign(stmt), what="vsa"), vsa.PREDICATE_TYPE
    )
    rows = audit.audit(rec.root, registry=True)
    assert all(c.ok for c in rows), audit.render_table(rows)
    listed = next(c for c in rows if c.id == "registry/listed").detail
    assert listed.startswith("5 Sigstore bundle(s) signed by the trust root")
    assert "1 signed by others, not checked" in listed and theirs.descriptor.digest in listed
    assert f"keyid {auditor.keyid}" in listed
    # Their signature under the release key's keyid: it claims the trust root, so it must verify.
    doc = json.loads(bundles.key_bundle(auditor.sign(stmt), what="vsa"))
    doc["verificationMaterial"]["publicKey"]["hint"] = rec.signer.keyid
    _push_bundle(client, repo, rec.image.digest, json.dumps(doc).encode(), vsa.PREDICATE_TYPE)
    rows = _registry_rows(rec.root)
    assert not rows["registry/referrers"].ok
    assert (
        "the public-key hint names another key" in rows["registry/referrers"].detail
        or "is not signed by the trusted key" in rows["registry/referrers"].detail
    )


def test_attaching_again_keeps_one_entry_each_and_other_referrers(pushed):
    rec, client, repo = pushed
    digest = rec.image.digest
    other = referrers.push_referrer(
        client,
        repo,
        digest,
        artifact_type="application/example",
        payload=b"x",
        media_type="application/example",
        annotations={},
    )
    first = attach_release(rec, client, repo)
    index_digest = client.head_manifest(repo, referrers.fallback_tag(digest))
    again = bundles.attach(client, repo, digest, rec.root / "attestations", suffix=signing.DSSE_SUFFIX)
    assert again == first[:4]
    assert client.head_manifest(repo, referrers.fallback_tag(digest)) == index_digest
    listed = referrers.list_referrers(client, repo, digest).descriptors
    assert [d.digest for d in listed] == [other.descriptor.digest] + [a.descriptor.digest for a in first]
    # A referrer of another type is listed, and left alone by the audit.
    rows = audit.audit(rec.root, registry=True)
    assert all(c.ok for c in rows), audit.render_table(rows)


def test_no_referrers_fails(pushed):
    rec, _, _ = pushed
    rows = _registry_rows(rec.root)
    assert rows["registry/manifest"].ok
    assert not rows["registry/referrers"].ok
    assert "no Sigstore bundle refers to" in rows["registry/referrers"].detail
    assert f"tag sha256-{rec.image.digest[7:]}" in rows["registry/referrers"].detail


def test_a_bundle_with_one_flipped_byte_fails(pushed):
    rec, client, repo = pushed
    bundles.attach(client, repo, rec.image.digest, rec.root / "attestations", suffix=signing.DSSE_SUFFIX)
    [prov] = [a for a in bundles.of_records(rec.root / "attestations", signing.DSSE_SUFFIX) if a.name == "provenance"]
    _push_bundle(client, repo, rec.image.digest, flip_payload_byte(prov.bundle), prov.predicate_type)
    rows = _registry_rows(rec.root)
    assert not rows["registry/referrers"].ok
    assert "signature does not verify with the release key" in rows["registry/referrers"].detail


def test_a_bundle_about_another_digest_fails(pushed):
    """Signed by the release key, attached to this image, but its statement is about another image."""
    rec, client, repo = pushed
    bundles.attach(client, repo, rec.image.digest, rec.root / "attestations", suffix=signing.DSSE_SUFFIX)
    stmt = attest.statement(attest.Subject("elsewhere", "sha256:" + "e" * 64), attest.TEST_RESULT, {"result": "PASSED"})
    bundle = bundles.key_bundle(rec.signer.sign(stmt), what="forged")
    _push_bundle(client, repo, rec.image.digest, bundle, attest.TEST_RESULT)
    rows = _registry_rows(rec.root)
    assert not rows["registry/referrers"].ok
    assert "the signed statement is about another artifact" in rows["registry/referrers"].detail
    assert "e" * 64 in rows["registry/referrers"].detail


def test_an_index_listing_another_images_referrer_fails(pushed, tmp_path):
    """The tag index names a referrer whose own manifest's subject is another image."""
    rec, client, repo = pushed
    digest = rec.image.digest
    bundles.attach(client, repo, digest, rec.root / "attestations", suffix=signing.DSSE_SUFFIX)
    other = make_image(tmp_path / "other", app_files={"opt/arena/other.txt": b"another image\n"})
    publish.push_layout(client, repo, other.layout, tag="other")
    [release] = bundles.of_records(rec.root / "attestations", signing.DSSE_SUFFIX)[:1]
    foreign = _push_bundle(client, repo, other.digest, release.bundle, release.predicate_type)
    tag = referrers.fallback_tag(digest)
    index = parse(client.get_manifest(repo, tag).raw)
    forged = Index(OCI_INDEX, index.manifests + (foreign.descriptor,))
    client.put_manifest(repo, tag, forged.to_bytes(), OCI_INDEX)
    rows = _registry_rows(rec.root)
    assert not rows["registry/referrers"].ok
    assert "its manifest's subject is another image" in rows["registry/referrers"].detail
    assert other.digest in rows["registry/referrers"].detail


def test_records_not_in_the_registry_fail(pushed):
    """The registry holds valid bundles of this image, but not the records' checks statement."""
    rec, client, repo = pushed
    for a in bundles.of_records(rec.root / "attestations", signing.DSSE_SUFFIX):
        if a.name != "checks":
            _push_bundle(client, repo, rec.image.digest, a.bundle, a.predicate_type)
    rows = _registry_rows(rec.root)
    assert rows["registry/referrers"].ok and rows["registry/provenance"].ok
    assert not rows["registry/checks"].ok
    assert "is not among the bundles referring to" in rows["registry/checks"].detail


def test_keyless_bundle_referrer_is_verified_by_sigstore(pushed):
    """A recorded real keyless bundle (public Sigstore data: tests/fixtures/sigstore) attached to the
    image: sigstore-python verifies its certificate, Rekor entry and identity, then refuses it because
    it attests a wheel, not this image; one flipped byte fails the signature itself."""
    rec, client, repo = pushed
    att = rec.root / "attestations"
    for p in list(att.glob("*.dsse.json")):
        p.unlink()
    shutil.copyfile(KEYLESS, att / "release.sigstore.json")
    _push_bundle(client, repo, rec.image.digest, KEYLESS.read_bytes(), attest.SLSA_PROVENANCE)
    auditor = trust.from_auditor(key_file=None, identity=KEYLESS_IDENTITY, issuer=GITHUB_ISSUER)
    rows = _registry_rows(rec.root, trust_root=auditor)
    detail = rows["registry/referrers"].detail
    assert "the signed statement is about another artifact" in detail, detail
    assert "subject sha256 49a3aa6075e0f49f82843e74b5baa614ad2a588e6675612bf108a0a008c5ac25" in detail
    other = trust.from_auditor(
        key_file=None, identity="https://github.com/x/y/.github/workflows/r.yml@refs/tags/v1", issuer=GITHUB_ISSUER
    )
    # Signed by another identity: not the release's, so not judged, and none is left that is.
    detail = _registry_rows(rec.root, trust_root=other)["registry/referrers"].detail
    assert "none of the 1 Sigstore bundle(s) referring to" in detail and "claims the trust root" in detail
    assert f"signed by {KEYLESS_IDENTITY}" in detail


def test_keyless_bundle_with_a_flipped_byte_fails(local_registry, tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(EPOCH))
    repo = f"arena/attest-{uuid.uuid4().hex[:12]}"
    client = local_registry.client()
    image = make_image(tmp_path)
    publish.push_layout(client, repo, image.layout, tag="t")
    _push_bundle(client, repo, image.digest, flip_payload_byte(KEYLESS.read_bytes(), at=400), attest.SLSA_PROVENANCE)
    listing = referrers.list_referrers(client, repo, image.digest)
    got = referrers.fetch_referrer(
        client,
        repo,
        listing.descriptors[0],
        image.digest,
        artifact_type=bundles.MEDIA_TYPE,
        media_type=bundles.MEDIA_TYPE,
    )
    auditor = trust.from_auditor(key_file=None, identity=KEYLESS_IDENTITY, issuer=GITHUB_ISSUER)
    with pytest.raises(VerificationError, match="sigstore verification failed"):
        bundles.verify(got.payload, auditor, what="tampered", att_dir=tmp_path)


def test_image_not_pushed_fails(local_registry, tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(EPOCH))
    rec = make_records(tmp_path / "r", image_name=f"{local_registry.address}/arena/never-pushed")
    rows = _registry_rows(rec.root)
    assert not rows["registry/manifest"].ok


def test_key_bundle_round_trips_through_sigstores_models(records):
    env = (records.root / "attestations" / "sbom.dsse.json").read_bytes()
    bundle = bundles.key_bundle(env, what="sbom")
    assert bundles.envelope_of(bundle) == json.loads(env)
    pins = trust.pins(config.load(records.root / "release.toml"), "test")
    v = bundles.verify(bundle, pins, what="sbom", att_dir=records.root / "attestations")
    assert v.statement["predicateType"] == attest.CYCLONEDX_BOM
    with pytest.raises(VerificationError, match="is not a Sigstore bundle"):
        bundles.parse(bundle.replace(b'"tlogEntries":[]', b'"tlogEntries":7'), what="broken")


def test_sbom_components_checked_against_pulled_blobs(pushed):
    """No dist/oci: with --registry the audit pulls the layers anonymously and reads the SBOM's
    components and what the image installs from them; an SBOM hiding a component is caught
    that way too."""
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


def test_digest_helper_matches_the_empty_descriptor():
    assert referrers.EMPTY_DESCRIPTOR.digest == oci_digest.of_bytes(b"{}")


def test_a_name_without_a_registry_is_read_from_the_running_local_registry(local_registry, tmp_path, monkeypatch):
    """The local profile records `arena/<name>@sha256:...` (no machine's address): --registry reads
    it from the local registry running here, and says how to start one when none is."""
    from pipeline.audit.registry import image_location

    monkeypatch.setenv("RELEASE_REGISTRY_DIR", str(local_registry.root))
    located = image_location("arena/openenv-data-workflows")
    assert located.name == f"{local_registry.address}/arena/openenv-data-workflows"
    assert image_location("ghcr.io/o/r").registry == "ghcr.io"
    monkeypatch.setenv("RELEASE_REGISTRY_DIR", str(tmp_path / "none"))
    with pytest.raises(VerificationError, match="no local registry is running"):
        image_location("arena/openenv-data-workflows")


def test_a_registry_with_the_referrers_api_lists_them_itself(local_registry, tmp_path, monkeypatch):
    """Where the registry has the referrers API (a stand-in in front of the real registry), the
    push is answered with OCI-Subject, no `sha256-<hex>` tag is written, and the audit finds the
    bundles by the API."""
    from tests.referrers_standin import ReferrersStandin

    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(EPOCH))
    repo = f"arena/attest-{uuid.uuid4().hex[:12]}"
    with ReferrersStandin(local_registry.address) as api:
        rec = make_records(tmp_path / "records", image_name=f"{api.address}/{repo}")
        client = RegistryClient(api.address, credentials=Credentials(local_registry.user, local_registry.password))
        publish.push_layout(client, repo, rec.image.layout, tag="test")
        attached = attach_release(rec, client, repo)
        assert [a.listed_by for a in attached] == [referrers.API] * 5
        assert client.head_manifest(repo, referrers.fallback_tag(rec.image.digest)) is None
        listing = referrers.list_referrers(client, repo, rec.image.digest)
        assert listing.found_by == referrers.API and listing.descriptors == tuple(a.descriptor for a in attached)
        rows = audit.audit(rec.root, registry=True)
        assert all(c.ok for c in rows), audit.render_table(rows)
