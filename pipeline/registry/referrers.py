"""OCI 1.1 referrers: artifacts about an image, found from the image's digest alone.

A referrer is an artifact manifest (OCI image manifest with `artifactType`, the empty
config and `subject` = the image's manifest descriptor) pushed by its digest. A registry
with the referrers API (`GET /v2/<name>/referrers/<digest>`) indexes it by its subject,
and says so with the `OCI-Subject` header when it is pushed. A registry without one
(Debian's docker-registry) is given the referrers tag schema of the distribution spec
instead: an image index tagged `sha256-<hex>` of the subject, listing each referrer's
descriptor with its `artifactType` and annotations, read, extended and written back on
each push. Listing asks the API first and falls back to that tag, as cosign and oras do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pipeline.errors import RegistryError, VerificationError
from pipeline.image.oci import digest as _digest
from pipeline.image.oci.image import (
    INDEX_TYPES,
    OCI_EMPTY,
    OCI_INDEX,
    OCI_MANIFEST,
    Descriptor,
    Index,
    Manifest,
    ManifestError,
    parse,
    parse_manifest,
)
from pipeline.registry.client import RegistryClient

EMPTY_CONFIG = b"{}"
EMPTY_DESCRIPTOR = Descriptor(OCI_EMPTY, _digest.of_bytes(EMPTY_CONFIG), len(EMPTY_CONFIG))
TITLE = "org.opencontainers.image.title"
API = "referrers API"


def fallback_tag(subject_digest: str) -> str:
    """The referrers tag schema's tag for `subject_digest`: `sha256-<hex>`."""
    return f"sha256-{_digest.hex_of(subject_digest)}"


@dataclass(frozen=True)
class Pushed:
    """One referrer pushed: its manifest's descriptor (as listed), and where it is listed."""

    descriptor: Descriptor
    listed_by: str  # API, or `tag sha256-<hex>`


@dataclass(frozen=True)
class Listing:
    """The referrers of one subject, and how they were found (API or the fallback tag)."""

    subject: str
    found_by: str
    descriptors: tuple[Descriptor, ...]


@dataclass(frozen=True)
class Fetched:
    """A referrer's manifest (digest-checked) and its one layer's bytes (digest-checked)."""

    descriptor: Descriptor
    manifest: Manifest
    payload: bytes


def push_referrer(
    client: RegistryClient,
    repository: str,
    subject_digest: str,
    *,
    artifact_type: str,
    payload: bytes,
    media_type: str,
    annotations: Mapping[str, str],
) -> Pushed:
    """Push `payload` as the one layer of an artifact manifest whose subject is `subject_digest`
    (an image of `repository`), then list it: by the registry's referrers API when it has one,
    else in the `sha256-<hex>` tag's index. Pushing the same payload again changes nothing."""
    subject_raw = client.get_manifest(repository, subject_digest)
    layer = Descriptor(
        media_type,
        _digest.of_bytes(payload),
        len(payload),
        annotations={TITLE: f"{fallback_tag(_digest.of_bytes(payload))}.sigstore.json"}
        if media_type.startswith("application/vnd.dev.sigstore.bundle")
        else {},
    )
    manifest = Manifest(
        media_type=OCI_MANIFEST,
        artifact_type=artifact_type,
        config=EMPTY_DESCRIPTOR,
        layers=(layer,),
        annotations=dict(sorted(annotations.items())),
        subject=Descriptor(subject_raw.media_type, subject_digest, len(subject_raw.raw)),
    )
    raw = manifest.to_bytes()
    for digest, blob in ((EMPTY_DESCRIPTOR.digest, EMPTY_CONFIG), (layer.digest, payload)):
        if not client.has_blob(repository, digest):
            client.upload_blob(repository, digest, blob)
    descriptor = Descriptor(
        OCI_MANIFEST, _digest.of_bytes(raw), len(raw), annotations=manifest.annotations, artifact_type=artifact_type
    )
    if client.put_referrer(repository, raw, OCI_MANIFEST):
        return Pushed(descriptor, API)
    tag = fallback_tag(subject_digest)
    current = _tag_index(client, repository, subject_digest)
    listed = current.manifests if current else ()
    # One entry per referrer, where it was first listed: pushing it again moves nothing.
    if any(d.digest == descriptor.digest for d in listed):
        index = Index(OCI_INDEX, tuple(descriptor if d.digest == descriptor.digest else d for d in listed))
    else:
        index = Index(OCI_INDEX, listed + (descriptor,))
    if current is None or index.to_bytes() != Index(OCI_INDEX, current.manifests).to_bytes():
        client.put_manifest(repository, tag, index.to_bytes(), OCI_INDEX)
    return Pushed(descriptor, f"tag {tag}")


def _tag_index(client: RegistryClient, repository: str, subject_digest: str) -> Index | None:
    tag = fallback_tag(subject_digest)
    if client.head_manifest(repository, tag) is None:
        return None
    fetched = client.get_manifest(repository, tag)
    return _as_index(fetched.raw, fetched.media_type, where=f"{client.registry}/{repository}:{tag}")


def _as_index(raw: bytes, media_type: str, *, where: str) -> Index:
    try:
        parsed = parse(raw, media_type)
    except ManifestError as exc:
        raise RegistryError(f"{where} is not a referrers index: {exc.one_line()}") from None
    if not isinstance(parsed, Index) or parsed.media_type not in INDEX_TYPES:
        raise RegistryError(
            f"{where} is not a referrers index",
            expected=OCI_INDEX,
            actual=getattr(parsed, "media_type", type(parsed).__name__),
            hint="the tag is reserved for the referrers of the image whose digest it names",
        )
    return parsed


def list_referrers(client: RegistryClient, repository: str, subject_digest: str) -> Listing:
    """Every referrer of `subject_digest`: the referrers API's index, or the `sha256-<hex>`
    tag's when the registry has no API; empty when neither lists any."""
    fetched = client.get_referrers(repository, subject_digest)
    if fetched is not None:
        index = _as_index(
            fetched.raw,
            fetched.media_type or OCI_INDEX,
            where=f"the referrers of {client.registry}/{repository}@{subject_digest}",
        )
        return Listing(subject_digest, API, index.manifests)
    tag = fallback_tag(subject_digest)
    tagged = _tag_index(client, repository, subject_digest)
    return Listing(subject_digest, f"tag {tag}", tagged.manifests if tagged else ())


def fetch_referrer(
    client: RegistryClient,
    repository: str,
    descriptor: Descriptor,
    subject_digest: str,
    *,
    artifact_type: str,
    media_type: str,
) -> Fetched:
    """A listed referrer's manifest and payload, each digest-checked; VerificationError unless
    it is an artifact of `artifact_type` with one layer of `media_type` whose subject is
    `subject_digest` (an index entry can name any manifest: the manifest's own subject decides)."""
    where = f"referrer {descriptor.digest} of {subject_digest}"
    fetched = client.get_manifest(repository, descriptor.digest)
    try:
        manifest = parse_manifest(fetched.raw, fetched.media_type)
    except ManifestError as exc:
        raise VerificationError(f"{where} is not an artifact manifest: {exc.one_line()}") from None
    actual_subject = manifest.subject.digest if manifest.subject else None
    if actual_subject != subject_digest:
        raise VerificationError(
            f"{where}: its manifest's subject is another image",
            expected=subject_digest,
            actual=actual_subject or "no subject",
            hint="the referrers index lists an artifact that is not about this image",
        )
    if manifest.artifact_type != artifact_type:
        raise VerificationError(f"{where}: artifactType", expected=artifact_type, actual=manifest.artifact_type)
    if (
        manifest.config.digest != EMPTY_DESCRIPTOR.digest
        or len(manifest.layers) != 1
        or manifest.layers[0].media_type != media_type
    ):
        raise VerificationError(
            f"{where}: not an empty config and one {media_type} layer",
            actual=f"config {manifest.config.media_type}, " + ", ".join(d.media_type for d in manifest.layers),
        )
    payload = client.get_blob_bytes(repository, manifest.layers[0].digest)
    return Fetched(descriptor, manifest, payload)
