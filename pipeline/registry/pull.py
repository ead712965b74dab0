"""Credential-less pull of an image by digest into an empty OCI layout, fully checked.

This is how a release proves that what it pushed is what anyone gets: no
credentials (the anonymous token flow where the registry asks for it), a fresh
store, every blob's digest and size checked against the manifest, the manifest's
digest recomputed from the exact bytes received.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import ConfigError, DigestMismatch
from pipeline.image.oci import digest as _digest
from pipeline.image.oci.image import Descriptor, Index, ManifestError, parse, parse_config
from pipeline.image.oci.layout import Layout
from pipeline.imageref import ImageRef
from pipeline.progress import Progress, say
from pipeline.registry.client import RegistryClient


@dataclass(frozen=True)
class PullResult:
    """What an anonymous pull fetched and checked."""

    reference: str
    manifest_digest: str
    media_type: str
    config_digest: str
    config_size: int
    layers: tuple[Descriptor, ...]
    compressed_size: int
    layout: Path
    index_digest: str | None = None

    @property
    def layer_count(self) -> int:
        return len(self.layers)


def pull(reference: str | ImageRef, dest: Path, *, client: RegistryClient | None = None) -> PullResult:
    """Pull `host/repo@sha256:...` anonymously into the empty directory `dest`.

    An image index is resolved to its linux/amd64 manifest. The result's
    `manifest_digest` is that of the image manifest (the index digest, if any, is
    kept separately).
    """
    ref = reference if isinstance(reference, ImageRef) else ImageRef.parse(reference, registry=True)
    if ref.digest is None:
        raise ConfigError(f"pull {ref} by digest, not by tag", expected="host/repository@sha256:<hex>", actual=str(ref))
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise ConfigError(
            f"pull destination {dest} is not empty", hint="pull into a fresh directory so nothing is reused"
        )
    # Never the caller's credentials: this pull must work for anyone.
    client = client or RegistryClient(ref.registry)
    if client.credentials is not None:
        raise ConfigError(
            "the verification pull must be credential-less", hint="pass a RegistryClient without credentials"
        )

    fetched = client.get_manifest(ref.repository, ref.digest)
    parsed = parse(fetched.raw, fetched.media_type)
    index_digest = None
    layout = Layout.init(dest)
    if isinstance(parsed, Index):
        index_digest = fetched.digest
        chosen = parsed.select()
        layout.put_bytes(fetched.raw)
        fetched = client.get_manifest(ref.repository, chosen.digest)
        if len(fetched.raw) != chosen.size:
            raise DigestMismatch(
                f"manifest {chosen.digest} has the wrong size", expected=chosen.size, actual=len(fetched.raw)
            )
        parsed = parse(fetched.raw, fetched.media_type)
        if isinstance(parsed, Index):
            raise ManifestError("image index points to another index", actual=chosen.digest)
    manifest = parsed
    media_type = manifest.media_type

    config_bytes = client.get_blob_bytes(ref.repository, manifest.config.digest)
    if len(config_bytes) != manifest.config.size:
        raise DigestMismatch(
            f"config blob {manifest.config.digest} has the wrong size",
            expected=manifest.config.size,
            actual=len(config_bytes),
        )
    config = parse_config(config_bytes)
    config.check_platform()
    if len(config.diff_ids) != len(manifest.layers):
        raise ManifestError(
            "config and manifest disagree on the layer count",
            expected=len(manifest.layers),
            actual=len(config.diff_ids),
        )
    layout.put_bytes(config_bytes)

    progress = Progress(f"pull {ref.name}", manifest.compressed_size, unit="B")
    for layer in manifest.layers:
        if layout.has_blob(layer.digest):
            continue
        client.get_blob(
            ref.repository, layer.digest, layout.blob_path(layer.digest), size=layer.size, progress=progress
        )
    progress.finish()

    wanted = chosen.digest if index_digest else ref.digest
    actual = _digest.of_bytes(fetched.raw)
    if actual != wanted:
        raise DigestMismatch(f"manifest of {ref} does not hash to its digest", expected=wanted, actual=actual)
    stored = layout.add_manifest(fetched.raw, media_type, ref_name=ref.digest)
    # Re-read everything from the store: the layout is what later stages use.
    layout.verify_image(ref.digest)
    result = PullResult(
        reference=str(ref),
        manifest_digest=stored.digest,
        media_type=media_type,
        config_digest=manifest.config.digest,
        config_size=manifest.config.size,
        layers=manifest.layers,
        compressed_size=manifest.compressed_size,
        layout=dest,
        index_digest=index_digest,
    )
    say(
        f"  pulled {ref}: {result.layer_count} layers, {result.compressed_size:,} compressed "
        "bytes, every digest checked"
    )
    return result
