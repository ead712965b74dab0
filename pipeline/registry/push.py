"""Push: blobs first (skipping those the registry has), then the manifest by digest,
then a tag for humans. Idempotent: a re-run sends only what is missing.

Artifacts about an image (its signed attestations) are OCI 1.1 referrers:
pipeline.registry.referrers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import ConfigError
from pipeline.image.oci import digest as _digest
from pipeline.image.oci.image import parse_manifest
from pipeline.image.oci.layout import Layout
from pipeline.progress import Progress, say
from pipeline.registry.client import RegistryClient


@dataclass(frozen=True)
class PushResult:
    """What a push sent and what it found already there."""

    registry: str
    repository: str
    manifest_digest: str
    media_type: str
    tag: str | None
    blobs_sent: tuple[str, ...]
    blobs_skipped: tuple[str, ...]
    bytes_sent: int
    manifest_sent: bool

    @property
    def reference(self) -> str:
        """`host/repository@sha256:...`: the identity to pull."""
        return f"{self.registry}/{self.repository}@{self.manifest_digest}"


def push_image(
    client: RegistryClient,
    repository: str,
    manifest_bytes: bytes,
    media_type: str,
    blobs: Mapping[str, Path | bytes],
    *,
    tag: str | None = None,
    mount_from: Sequence[str] = (),
) -> PushResult:
    """Push one image: every blob its manifest names (from `blobs`), then the manifest.

    `blobs` maps digest -> file or bytes; every config/layer digest of the manifest
    must be in it unless the registry already has that blob. A blob that another
    repository of the same registry holds (`mount_from`, e.g. the base's) is mounted
    instead of uploaded.
    """
    manifest = parse_manifest(manifest_bytes, media_type)
    manifest_digest = _digest.of_bytes(manifest_bytes)
    needed = [manifest.config, *manifest.layers]
    sent: list[str] = []
    skipped: list[str] = []
    missing = [d for d in needed if not client.has_blob(repository, d.digest)]
    if mount_from:
        missing = [d for d in missing if not any(client.mount_blob(repository, d.digest, src) for src in mount_from)]
    skipped = [d.digest for d in needed if d not in missing]
    total = sum(d.size for d in missing)
    progress = Progress(f"push {client.registry}/{repository}", total, unit="B")
    bytes_sent = 0
    for desc in missing:
        source = blobs.get(desc.digest)
        if source is None:
            raise ConfigError(
                f"blob {desc.digest} is neither in the registry nor given to push",
                hint="push from a complete OCI layout",
            )
        bytes_sent += client.upload_blob(repository, desc.digest, source, progress=progress)
        sent.append(desc.digest)
    if missing:
        progress.finish()
    manifest_sent = client.head_manifest(repository, manifest_digest) is None
    if manifest_sent:
        client.put_manifest(repository, manifest_digest, manifest_bytes, media_type)
    if tag and client.head_manifest(repository, tag) != manifest_digest:
        client.put_manifest(repository, tag, manifest_bytes, media_type)
    say(
        f"  pushed {client.registry}/{repository}@{manifest_digest}: {len(sent)} blobs sent, "
        f"{len(skipped)} already there"
    )
    return PushResult(
        client.registry,
        repository,
        manifest_digest,
        media_type,
        tag,
        tuple(sent),
        tuple(skipped),
        bytes_sent,
        manifest_sent,
    )


def push_layout(
    client: RegistryClient,
    repository: str,
    layout_dir: Path,
    *,
    ref_name: str | None = None,
    tag: str | None = None,
    mount_from: Sequence[str] = (),
) -> PushResult:
    """Push an image of an OCI layout (verified as it is read) to `repository`."""
    layout = Layout.open(layout_dir)
    img = layout.verify_image(ref_name)
    blobs: dict[str, Path | bytes] = {img.manifest.config.digest: img.config_bytes}
    blobs.update({d.digest: layout.blob_path(d.digest) for d in img.manifest.layers})
    return push_image(
        client, repository, img.manifest_bytes, img.descriptor.media_type, blobs, tag=tag, mount_from=mount_from
    )
