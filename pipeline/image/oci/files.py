"""The files of an image, read from its layers: each layer of an image in an OCI layout is
applied in order (whiteouts included, `listing.hidden`) to an in-memory view that keeps only
the paths its reader asks for. Every blob is hashed while it is read and must match its
digest. The SBOM (pipeline.records.sbom) and the audit's coverage check read images so.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from pipeline.errors import DigestMismatch, ReleaseError
from pipeline.image.oci import listing
from pipeline.image.oci.layout import Layout


@dataclass(frozen=True)
class LayoutImage:
    """An image of an OCI layout: manifest digest, parsed manifest and config, its layer blobs."""

    digest: str
    manifest: dict
    config: dict
    layers: tuple[tuple[str, Path], ...]  # (layer digest, blob path), bottom first


def open_image(layout: Path, ref: str | None = None) -> LayoutImage:
    """The image in an OCI layout (by ref name when it holds several): manifest and config verified."""
    lay = Layout.open(Path(layout))
    img = lay.image(ref)
    return LayoutImage(
        digest=img.descriptor.digest,
        manifest=json.loads(img.manifest_bytes),
        config=json.loads(img.config_bytes),
        layers=tuple((d.digest, lay.blob_path(d.digest)) for d in img.manifest.layers),
    )


def open_image_by_digest(layout: Path, digest: str) -> LayoutImage:
    """The image with manifest `digest` in an OCI layout (the audit's way in: no ref names)."""
    lay = Layout.open(Path(layout))
    manifest = json.loads(lay.read_blob(digest))
    config = json.loads(lay.read_blob(manifest["config"]["digest"], size=manifest["config"]["size"]))
    return LayoutImage(
        digest=digest,
        manifest=manifest,
        config=config,
        layers=tuple((d["digest"], lay.blob_path(d["digest"])) for d in manifest["layers"]),
    )


class _HashingReader:
    """Read-through wrapper that hashes every byte it hands out."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw, self.hash = raw, hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.hash.update(data)
        return data


@dataclass
class FileView:
    """Regular files (bytes) and symlinks (targets) at the wanted paths of an image."""

    files: dict[str, bytes] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)

    def paths(self) -> set[str]:
        return self.files.keys() | self.links.keys()

    def drop(self, paths: set[str]) -> None:
        for path in paths:
            self.files.pop(path, None)
            self.links.pop(path, None)

    def only(self, keep: Callable[[str], bool]) -> FileView:
        """The view of the paths `keep` names: what `read_view` with `keep` gives, from a
        view read with a wider one (the audit reads the layers once for two checks)."""
        return FileView(
            files={p: d for p, d in self.files.items() if keep(p)},
            links={p: t for p, t in self.links.items() if keep(p)},
        )

    def read(self, path: str) -> bytes | None:
        """File content at `path`, following symlinks inside the view."""
        resolved = self.resolve(path)
        return None if resolved is None else self.files[resolved]

    def resolve(self, path: str) -> str | None:
        """The path of the regular file `path` names, following symlinks inside the view
        (the file's own and its parent directories'); None when the view has no such file."""
        for _ in range(16):
            if path in self.files:
                return path
            link, rest = self._first_link(path)
            if link is None:
                return None
            target = self.links[link]
            joined = target if target.startswith("/") else posixpath.join("/", posixpath.dirname(link), target)
            path = posixpath.normpath(posixpath.join(joined, rest) if rest else joined).lstrip("/")
        return None

    def _first_link(self, path: str) -> tuple[str | None, str]:
        """The first prefix of `path` that is a symlink in the view, and the rest after it."""
        parts = path.split("/")
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            if prefix in self.links:
                return prefix, "/".join(parts[i:])
        return None, ""


def _apply_layer(view: FileView, blob: Path, layer_digest: str, keep: Callable[[str], bool]) -> None:
    """Apply one layer: what it hides of the lower layers goes (listing.hidden: its
    whiteouts and replacements), then its own files are added. What the layer lists is
    recorded under its digest once its bytes match it (listing)."""
    listed: list[listing.Entry] = []
    added: dict[str, bytes] = {}
    links: dict[str, str] = {}
    hardlinks: dict[str, str] = {}
    try:
        raw = open(blob, "rb")
    except FileNotFoundError:
        raise ReleaseError(f"layer blob {layer_digest} is missing", hint="rebuild or re-pull the image") from None
    with raw:
        reader = _HashingReader(raw)
        with tarfile.open(fileobj=reader, mode="r|*") as tar:  # type: ignore[call-overload]
            for m in tar:
                entry = listing.member(m)
                name = entry.path
                if not name:
                    continue
                listed.append(entry)
                if listing.is_whiteout(name) or not keep(name):
                    continue
                if m.isreg():
                    f = tar.extractfile(m)
                    added[name] = f.read() if f is not None else b""
                elif m.issym():
                    links[name] = m.linkname
                elif m.islnk():
                    hardlinks[name] = listing.clean(m.linkname)
        while reader.read(1 << 20):
            pass  # hash any trailing padding too
    actual = "sha256:" + reader.hash.hexdigest()
    if actual != layer_digest:
        raise DigestMismatch(
            f"layer blob {blob.name} does not match its digest",
            expected=layer_digest,
            actual=actual,
            hint="the OCI layout is corrupt; rebuild the image",
        )
    listing.record(layer_digest, listed)
    view.drop(listing.hidden(view.paths(), listed))
    view.files.update(added)
    view.links.update(links)
    for name, target in hardlinks.items():
        content = added.get(target, view.files.get(target))
        if content is None:
            raise ReleaseError(
                f"hard link {name} in layer {layer_digest} points outside the files read",
                actual=target,
                hint="the reader keeps only the files it was asked for",
            )
        view.files[name] = content


def read_view(image: LayoutImage, keep: Callable[[str], bool]) -> FileView:
    """The files of the image that `keep` names (a relative path, no leading slash), after
    applying every layer bottom-up."""
    view = FileView()
    for layer_digest, blob in image.layers:
        _apply_layer(view, blob, layer_digest, keep)
    return view
