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
from pipeline.errors import VerificationError
from pipeline.image.oci import digest as oci_digest
from pipeline.image.oci.image import OCI_INDEX, Index, parse
from pipeline.records import attest, bundles, signing, trust
from pipeline.registry import push as publish
from pipeline.registry import referrers
from pipeline.registry.client import Credentials, RegistryClient

from .conftest import EPOCH, make_image, make_records

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sigstore"
KEYLESS = FIXTURES / "github-attestation-reusable-workflow.sigstore.json"
KEYLESS_IDENTITY = ("https://github.com/github/artifact-attestations-workflows/.github/workflows/attest.yml"
                    "@09b495c3f12c7881b3cc17209a327792065c1a1d")
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
    return referrers.push_referrer(client, repo, digest, artifact_type=bundles.MEDIA_TYPE, payload=bundle,
                                   media_type=bundles.MEDIA_TYPE, annotations=bundles.annotations(predicate))


def test_each_signed_statement_is_a_standard_bundle_referrer(pushed):
    rec, client, repo = pushed
    digest = rec.image.digest
    attached = bundles.attach(client, repo, digest, rec.root / "attestations", suffix=signing.DSSE_SUFFIX)
    tag = f"sha256-{digest[7:]}"
    assert [a.listed_by for a in attached] == [f"tag {tag}"] * 4  # docker-registry: no referrers API
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
        assert m["config"] == {"mediaType": "application/vnd.oci.empty.v1+json", "size": 2,
                               "digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"}
        assert m["subject"] == {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest,
                                "size": len(image_raw)}
        assert m["annotations"] == entry["annotations"]
        [layer] = m["layers"]
        assert layer["mediaType"] == bundles.MEDIA_TYPE
        bundle = json.loads(client.get_blob_bytes(repo, layer["digest"]))
        assert bundle["mediaType"] == bundles.MEDIA_TYPE
        assert bundle["verificationMaterial"] == {"publicKey": {"hint": rec.signer.keyid}, "tlogEntries": []}
        # The DSSE envelope the records hold, unchanged.
        name = {v: k for k, v in attest.PREDICATES.items()}.get(entry["annotations"][bundles.PREDICATE_TYPE],
                                                                "release")
        envelope = json.loads((rec.root / "attestations" / f"{name}.dsse.json").read_bytes())
        assert bundle["dsseEnvelope"] == envelope
    assert predicates[1:] == list(attest.PREDICATES.values())
    assert predicates[0].endswith("/release-statement/v1")
    rows = audit.audit(rec.root, registry=True)
    assert all(c.ok for c in rows), audit.render_table(rows)
    assert {"registry/manifest", "registry/referrers", "registry/release", "registry/provenance",
            "registry/sbom", "registry/checks"} <= {c.id for c in rows}


def test_attaching_again_keeps_one_entry_each_and_other_referrers(pushed):
    rec, client, repo = pushed
    digest = rec.image.digest
    other = referrers.push_referrer(client, repo, digest, artifact_type="application/example",
                                    payload=b"x", media_type="application/example", annotations={})
    first = bundles.attach(client, repo, digest, rec.root / "attestations", suffix=signing.DSSE_SUFFIX)
    index_digest = client.head_manifest(repo, referrers.fallback_tag(digest))
    again = bundles.attach(client, repo, digest, rec.root / "attestations", suffix=signing.DSSE_SUFFIX)
    assert again == first
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
    other = trust.from_auditor(key_file=None, identity="https://github.com/x/y/.github/workflows/r.yml@refs/tags/v1",
                               issuer=GITHUB_ISSUER)
    assert "which is not the pinned identity" in _registry_rows(rec.root, trust_root=other)["registry/referrers"].detail


def test_keyless_bundle_with_a_flipped_byte_fails(local_registry, tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(EPOCH))
    repo = f"arena/attest-{uuid.uuid4().hex[:12]}"
    client = local_registry.client()
    image = make_image(tmp_path)
    publish.push_layout(client, repo, image.layout, tag="t")
    _push_bundle(client, repo, image.digest, flip_payload_byte(KEYLESS.read_bytes(), at=400), attest.SLSA_PROVENANCE)
    listing = referrers.list_referrers(client, repo, image.digest)
    got = referrers.fetch_referrer(client, repo, listing.descriptors[0], image.digest,
                                   artifact_type=bundles.MEDIA_TYPE, media_type=bundles.MEDIA_TYPE)
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
        attached = bundles.attach(client, repo, rec.image.digest, rec.root / "attestations", suffix=signing.DSSE_SUFFIX)
        assert [a.listed_by for a in attached] == [referrers.API] * 4
        assert client.head_manifest(repo, referrers.fallback_tag(rec.image.digest)) is None
        listing = referrers.list_referrers(client, repo, rec.image.digest)
        assert listing.found_by == referrers.API and listing.descriptors == tuple(a.descriptor for a in attached)
        rows = audit.audit(rec.root, registry=True)
        assert all(c.ok for c in rows), audit.render_table(rows)
