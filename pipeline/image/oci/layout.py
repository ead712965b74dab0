"""OCI image layout on disk: `oci-layout`, `index.json`, `blobs/sha256/<hex>`.

Every blob read back is checked against its digest (and size where a descriptor
gives one); a blob is written under its digest only after its bytes hash to it.
Image references inside the layout use the `org.opencontainers.image.ref.name`
annotation of `index.json`.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path

from pipeline._io import CHUNK, canonical_json, write_atomic
from pipeline.errors import DigestMismatch, ReleaseError
from pipeline.image.oci import digest as _digest
from pipeline.image.oci.image import OCI_INDEX, Descriptor, Index, Manifest, parse, parse_manifest

REF_NAME = "org.opencontainers.image.ref.name"
# The name docker (containerd) gives an image it loads from an OCI archive; podman reads REF_NAME.
CONTAINERD_NAME = "io.containerd.image.name"
LAYOUT_VERSION = "1.0.0"


class LayoutError(ReleaseError):
    """The directory is not a usable OCI image layout."""


@dataclass(frozen=True)
class LayoutImage:
    """One image of a layout: its descriptor, exact manifest bytes and parsed manifest."""

    descriptor: Descriptor
    manifest_bytes: bytes
    manifest: Manifest
    config_bytes: bytes


def _hash_file(path: Path) -> tuple[str, int]:
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
            size += len(chunk)
    return "sha256:" + h.hexdigest(), size


class Layout:
    """An OCI image layout directory (created by `Layout.init`, opened by `Layout.open`)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @classmethod
    def init(cls, root: Path) -> Layout:
        """Create (or reuse) a layout at `root`."""
        root = Path(root)
        (root / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
        marker = root / "oci-layout"
        if not marker.exists():
            write_atomic(marker, canonical_json({"imageLayoutVersion": LAYOUT_VERSION}))
        if not (root / "index.json").exists():
            write_atomic(
                root / "index.json", canonical_json({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []})
            )
        return cls(root)

    @classmethod
    def open(cls, root: Path) -> Layout:
        """Open an existing layout; LayoutError if `root` is not one."""
        root = Path(root)
        try:
            version = json.loads((root / "oci-layout").read_bytes()).get("imageLayoutVersion")
        except (OSError, ValueError):
            raise LayoutError(
                f"{root} is not an OCI image layout", hint="expected an oci-layout file; build or pull the image first"
            ) from None
        if version != LAYOUT_VERSION:
            raise LayoutError(f"unsupported OCI layout version in {root}", expected=LAYOUT_VERSION, actual=version)
        return cls(root)

    # ------------------------------------------------------------ blobs

    def blob_path(self, digest: str) -> Path:
        return self.root / "blobs" / "sha256" / _digest.hex_of(digest)

    def has_blob(self, digest: str) -> bool:
        return self.blob_path(digest).is_file()

    def put_bytes(self, data: bytes) -> str:
        """Store bytes as a blob; return its digest."""
        dig = _digest.of_bytes(data)
        if not self.has_blob(dig):
            write_atomic(self.blob_path(dig), data)
        return dig

    def put_file(self, src: Path, digest: str, *, move: bool = False, link: bool = False) -> None:
        """Store a file as blob `digest` after checking that it hashes to it.

        `link` hard-links the file (e.g. from a shared blob cache) where the file system
        allows it, and copies otherwise.
        """
        actual, _ = _hash_file(Path(src))
        if actual != digest:
            raise DigestMismatch(f"blob {digest} ({src}) does not match its digest", expected=digest, actual=actual)
        dest = self.blob_path(digest)
        if dest.exists():
            return
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
        if move:
            os.replace(src, tmp)
        elif link:
            try:
                os.link(src, tmp)
            except OSError:
                shutil.copyfile(src, tmp)
        else:
            shutil.copyfile(src, tmp)
        os.replace(tmp, dest)

    def read_blob(self, digest: str, *, size: int | None = None) -> bytes:
        """A small blob's bytes, verified against its digest (and size)."""
        path = self.blob_path(digest)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise LayoutError(f"blob {digest} is missing from {self.root}") from None
        if size is not None and len(data) != size:
            raise DigestMismatch(f"blob {digest} in {self.root} has the wrong size", expected=size, actual=len(data))
        _digest.verify(data, digest, what=f"blob {digest} in {self.root}")
        return data

    def verify_blob(self, digest: str, size: int | None = None) -> None:
        """Stream-check a (large) blob against its digest and size."""
        path = self.blob_path(digest)
        if not path.is_file():
            raise LayoutError(f"blob {digest} is missing from {self.root}")
        actual, actual_size = _hash_file(path)
        if size is not None and actual_size != size:
            raise DigestMismatch(f"blob {digest} in {self.root} has the wrong size", expected=size, actual=actual_size)
        if actual != digest:
            raise DigestMismatch(
                f"blob {digest} in {self.root} does not match its digest", expected=digest, actual=actual
            )

    # ------------------------------------------------------------ index

    def index(self) -> Index:
        parsed = parse((self.root / "index.json").read_bytes(), OCI_INDEX)
        if not isinstance(parsed, Index):
            raise LayoutError(f"{self.root}/index.json is not an image index")
        return parsed

    def add_manifest(self, manifest_bytes: bytes, media_type: str, *, ref_name: str) -> Descriptor:
        """Store a manifest blob and point `ref_name` at it (replacing an older entry)."""
        dig = self.put_bytes(manifest_bytes)
        desc = Descriptor(media_type, dig, len(manifest_bytes), annotations={REF_NAME: ref_name})
        kept = [d for d in self.index().manifests if d.annotations.get(REF_NAME) != ref_name]
        write_atomic(
            self.root / "index.json",
            canonical_json(
                {
                    "schemaVersion": 2,
                    "mediaType": OCI_INDEX,
                    "manifests": [d.to_json() for d in kept] + [desc.to_json()],
                }
            ),
        )
        return desc

    def resolve(self, ref_name: str | None = None) -> Descriptor:
        """The index entry named `ref_name`, or the only entry when None."""
        entries = self.index().manifests
        if ref_name is None:
            if len(entries) != 1:
                raise LayoutError(
                    f"{self.root} holds {len(entries)} images; name one", expected="exactly one image or a ref name"
                )
            return entries[0]
        for d in entries:
            if d.annotations.get(REF_NAME) == ref_name:
                return d
        names = ", ".join(sorted(d.annotations.get(REF_NAME, "?") for d in entries)) or "none"
        raise LayoutError(f"no image named {ref_name!r} in {self.root}", actual=names)

    def by_digest(self, digest: str) -> Descriptor:
        """The index entry of the image whose manifest has `digest`, whichever ref names it."""
        for d in self.index().manifests:
            if d.digest == digest:
                return d
        held = ", ".join(sorted({d.digest for d in self.index().manifests})) or "none"
        raise LayoutError(f"no image {digest} in {self.root}", expected=digest, actual=held)

    def image(self, ref_name: str | None = None, *, digest: str | None = None) -> LayoutImage:
        """Load one image (named `ref_name`, or with manifest `digest`): exact manifest bytes
        and config bytes, both verified."""
        desc = self.by_digest(digest) if digest is not None else self.resolve(ref_name)
        raw = self.read_blob(desc.digest, size=desc.size)
        manifest = parse_manifest(raw, desc.media_type)
        config = self.read_blob(manifest.config.digest, size=manifest.config.size)
        return LayoutImage(desc, raw, manifest, config)

    def verify_image(self, ref_name: str | None = None, *, digest: str | None = None) -> LayoutImage:
        """`image()` plus a full check of every layer blob."""
        img = self.image(ref_name, digest=digest)
        for layer in img.manifest.layers:
            self.verify_blob(layer.digest, layer.size)
        return img

    # ------------------------------------------------------------ one image out of a layout

    def copy_image(self, source: Layout, digest: str, *, ref_name: str) -> Descriptor:
        """Copy image `digest` of `source` into this layout under `ref_name`: every blob is
        checked against its digest on the way in; images already here are kept."""
        img = source.image(digest=digest)
        for blob in (img.manifest.config, *img.manifest.layers):
            self.put_file(source.blob_path(blob.digest), blob.digest, link=True)
        return self.add_manifest(img.manifest_bytes, img.descriptor.media_type, ref_name=ref_name)

    def write_archive(self, digest: str, path: Path, *, name: str, docker: bool = False) -> LayoutImage:
        """An OCI archive (a tar of a layout) holding only image `digest`, named `name` for the
        engine that loads it; every blob is verified first. With `docker`, also the
        `manifest.json` of `docker save`, which Docker 20.10's `load` reads (it reads no OCI
        index): the same config and layer blobs, the name as its tag."""
        img = self.verify_image(digest=digest)
        desc = Descriptor(
            img.descriptor.media_type, digest, img.descriptor.size, annotations={REF_NAME: name, CONTAINERD_NAME: name}
        )
        index = canonical_json({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [desc.to_json()]})
        with tarfile.open(path, "w") as tar:
            for member, data in (
                ("oci-layout", canonical_json({"imageLayoutVersion": LAYOUT_VERSION})),
                ("index.json", index),
            ):
                info = tarfile.TarInfo(member)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            blobs = (digest, img.manifest.config.digest, *(l.digest for l in img.manifest.layers))
            for blob in dict.fromkeys(blobs):
                tar.add(self.blob_path(blob), arcname=f"blobs/sha256/{_digest.hex_of(blob)}")
            if docker:
                saved = canonical_json(
                    [
                        {
                            "Config": f"blobs/sha256/{_digest.hex_of(img.manifest.config.digest)}",
                            "RepoTags": [name],
                            "Layers": [f"blobs/sha256/{_digest.hex_of(l.digest)}" for l in img.manifest.layers],
                        }
                    ]
                )
                info = tarfile.TarInfo("manifest.json")
                info.size = len(saved)
                tar.addfile(info, io.BytesIO(saved))
        return img
