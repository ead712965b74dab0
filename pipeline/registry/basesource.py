"""Where a build reads its base from, by digest: a registry or an OCI image layout.

The derived image depends on the base's manifest and config bytes and on its recorded
name (the `org.opencontainers.image.base.name` label); never on where the bytes were
read from. A loopback registry's address is this machine's (another rebuilder's port
differs), so a base read from one is named by its repository alone.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from pipeline._io import sha256_file
from pipeline.config import REPO_ROOT
from pipeline.errors import ConfigError, DigestMismatch
from pipeline.image.oci.image import (
    BaseImage,
    Index,
    UnsupportedPlatform,
    parse,
    parse_config,
    parse_manifest,
)
from pipeline.image.oci.layout import Layout
from pipeline.imageref import ImageRef
from pipeline.progress import Progress, say
from pipeline.registry.client import RegistryClient

# Base layer blobs, content-addressed and shared by every build of this checkout.
BLOB_CACHE = REPO_ROOT / ".release" / "cache" / "blobs"


def _loopback(registry: str) -> bool:
    """Whether `host[:port]` (or `[v6]:port`) names this machine's loopback interface."""
    name = registry[1 : registry.find("]")] if registry.startswith("[") else registry.split(":")[0]
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def stable_name(ref: ImageRef) -> str:
    """The name a base is recorded under: a loopback registry's address is this machine's
    (another rebuilder's port differs), so only the repository; otherwise host/repository."""
    return ref.repository if _loopback(ref.registry) else ref.name


@dataclass(frozen=True)
class BaseSource:
    """Where the build reads its base (by digest): a registry, or an OCI image layout.

    `name` is the base's recorded name, the one the image's label carries, whatever
    the source; the source itself never reaches the image.
    """

    name: str
    digest: str
    registry: str | None = None
    repository: str | None = None
    layout: Path | None = None

    @classmethod
    def from_registry(cls, reference: str, name: str | None = None) -> BaseSource:
        ref = ImageRef.parse(reference, registry=True, pinned=True)
        return cls(
            name=name or stable_name(ref), digest=str(ref.digest), registry=ref.registry, repository=ref.repository
        )

    @classmethod
    def from_layout(cls, layout: Path, name: str, digest: str) -> BaseSource:
        return cls(name=name, digest=digest, layout=Path(layout))

    def __str__(self) -> str:
        where = f"registry {self.registry}" if self.layout is None else f"OCI layout {self.layout}"
        return f"{self.name}@{self.digest} from {where}"

    def read(self, layout: Layout) -> BaseImage:
        """What the build calls (image/build.py's `Base`): see `read_base`."""
        return read_base(self, layout)


def read_base(source: BaseSource, layout: Layout) -> BaseImage:
    """The base's manifest and config, its layer blobs linked into `layout`."""
    if source.layout is None:
        ref = ImageRef(source.registry or "", source.repository or source.name, None, source.digest)
        # The base is read anonymously, as anyone rebuilding the image would read it.
        return fetch_base(RegistryClient(ref.registry), ref, layout)
    return base_from_layout(Layout.open(source.layout), source.digest, layout)


def base_from_layout(src: Layout, digest: str, layout: Layout) -> BaseImage:
    """The base `digest` from an OCI image layout (every blob verified on the way)."""
    desc = next((d for d in src.index().manifests if d.digest == digest), None)
    if desc is None:
        raise ConfigError(
            f"the base {digest} is not in the OCI layout {src.root}",
            actual=", ".join(d.digest for d in src.index().manifests) or "empty",
            hint="rebuild the base layout from locks/base.json",
        )
    raw = src.read_blob(desc.digest, size=desc.size)
    manifest = parse_manifest(raw, desc.media_type)
    config_bytes = src.read_blob(manifest.config.digest, size=manifest.config.size)
    layout.put_bytes(config_bytes)
    for layer in manifest.layers:
        if not _intact(layout.blob_path(layer.digest), layer.digest, "the layout's"):
            layout.put_file(src.blob_path(layer.digest), layer.digest)
    return BaseImage(manifest=manifest, config_bytes=config_bytes)


def fetch_base(client: RegistryClient, ref: ImageRef, layout: Layout) -> BaseImage:
    """The base's manifest and config by digest; its layer blobs into `layout`.

    Blobs already in the layout (verified when written) are not fetched again, so a
    no-op rebuild touches the registry for two small documents only.
    """
    if ref.digest is None:
        raise ConfigError(f"base {ref} must be pinned by digest", expected="name@sha256:...", actual=str(ref))
    fetched = client.get_manifest(ref.repository, ref.digest)
    parsed = parse(fetched.raw, fetched.media_type)
    if isinstance(parsed, Index):
        chosen = parsed.select()
        fetched = client.get_manifest(ref.repository, chosen.digest)
        parsed = parse(fetched.raw, fetched.media_type)
        if isinstance(parsed, Index):
            raise UnsupportedPlatform(f"base {ref} index points to another index")
    manifest = parsed
    if layout.has_blob(manifest.config.digest):
        config_bytes = layout.read_blob(manifest.config.digest, size=manifest.config.size)
    else:
        config_bytes = client.get_blob_bytes(ref.repository, manifest.config.digest)
        layout.put_bytes(config_bytes)
    config = parse_config(config_bytes)
    platform = f"{config.os}/{config.architecture}"
    if platform != "linux/amd64":
        raise UnsupportedPlatform(
            f"base {ref} is not a linux/amd64 image",
            expected="linux/amd64",
            actual=platform,
            hint="pin the amd64 image (or its index)",
        )
    missing = [l for l in manifest.layers if not _intact(layout.blob_path(l.digest), l.digest, "the layout's")]
    fetch = [l for l in missing if not (BLOB_CACHE / l.digest[7:]).is_file()]
    _fetch(client, ref, fetch)
    for layer in missing:
        # A copy, not a hard link: a byte changed in one is then not in the other too. The
        # cached blob is checked against its digest on the way (put_file); a corrupt one is
        # discarded and fetched again.
        cached = BLOB_CACHE / layer.digest[7:]
        try:
            layout.put_file(cached, layer.digest)
        except DigestMismatch as exc:
            say(f"    cached base blob {cached} is corrupt (it hashes to {exc.actual}): discarded and fetched again")
            cached.unlink(missing_ok=True)
            _fetch(client, ref, [layer])
            layout.put_file(cached, layer.digest)
    return BaseImage(manifest=manifest, config_bytes=config_bytes)


def _intact(path: Path, digest: str, whose: str) -> bool:
    """Whether the blob at `path` is there and hashes to `digest`; a corrupt one is removed
    with a line saying so (the caller takes it again)."""
    if not path.is_file():
        return False
    actual = "sha256:" + sha256_file(path)
    if actual == digest:
        return True
    say(f"    {whose} blob {path} is corrupt (it hashes to {actual}): discarded and taken again")
    path.unlink()
    return False


def _fetch(client: RegistryClient, ref: ImageRef, layers: list) -> None:
    if not layers:
        return
    BLOB_CACHE.mkdir(parents=True, exist_ok=True)
    progress = Progress(f"fetch base layers of {ref.name}", sum(l.size for l in layers), unit="B")
    for layer in layers:
        client.get_blob(ref.repository, layer.digest, BLOB_CACHE / layer.digest[7:], size=layer.size, progress=progress)
    progress.finish()
