"""What a layer holds, path by path: read from its blob once per process and layer digest.

A layer blob is named by the sha256 of its bytes, so the list of its tar members is a
function of that digest. A reader that verifies a blob's digest while it reads the whole
tar anyway (pipeline.image.oci.files) records the list here; a later reader of the same layer in
the same process takes it instead of decompressing and parsing the tar again. A release
does both: the SBOM reads every layer of the built image, then the verify stage lists the
base's layers again, from the blobs it pulled by the same digests, for
`image/protected-inherited`. Lists are only recorded under a digest the bytes were
checked against; `entries` of a layer nobody recorded reads the blob (and records
nothing: it does not hash what it reads).

`hidden` is the one reading of OCI whiteouts: what a layer's members take away from the
layers below it. The file view of an image (files.py) and the inherited-files check both apply it.
"""

from __future__ import annotations

import gzip
import posixpath
import tarfile
from collections.abc import Iterable, Set
from pathlib import Path
from typing import NamedTuple

WHITEOUT = ".wh."  # `dir/.wh.name` deletes dir/name of the lower layers
OPAQUE = WHITEOUT + ".wh..opq"  # `dir/.wh..wh..opq` empties dir of the lower layers


class Entry(NamedTuple):
    """One member of a layer, as `entries` lists them in archive order."""

    path: str  # in the image: no leading "./" or "/"
    regular: bool  # a regular file (not a hard link, symlink, directory or device)
    directory: bool


_RECORDED: dict[str, tuple[Entry, ...]] = {}


def clean(name: str) -> str:
    """A tar member's name as an image path: `./usr/x` and `/usr/x` are `usr/x`; `.` is ``."""
    path = posixpath.normpath("/" + name).lstrip("/")
    return "" if path == "." else path


def record(digest: str, entries: Iterable[Entry]) -> None:
    """Keep the list of the layer whose bytes were just checked against `digest`."""
    _RECORDED[digest] = tuple(entries)


def entries(blob: Path, digest: str) -> tuple[Entry, ...]:
    """The members of the layer whose blob is `blob` and digest `digest`, in order: as
    recorded, else read."""
    known = _RECORDED.get(digest)
    return known if known is not None else read(blob)


def read(blob: Path) -> tuple[Entry, ...]:
    """The members of the gzip'd layer tar `blob`, in order, read from it."""
    with gzip.open(blob, "rb") as gz, tarfile.open(fileobj=gz, mode="r|") as tar:
        listed = (member(info) for info in tar)
        return tuple(entry for entry in listed if entry.path)


def member(info: tarfile.TarInfo) -> Entry:
    """A tar member as an Entry (its path empty for the archive's root, `.`)."""
    return Entry(clean(info.name), info.isreg(), info.isdir())


def is_whiteout(path: str) -> bool:
    """Whether a member is a whiteout marker (`.wh.<name>` or the opaque one), which is
    never a file of the image."""
    return posixpath.basename(path).startswith(WHITEOUT)


def hidden(lower: Set[str], members: Iterable[Entry]) -> set[str]:
    """The paths of `lower` (what the layers below leave, directories aside) that a layer
    with these members hides, by the OCI image spec ("Whiteouts"):

    - `dir/.wh.name` hides dir/name and everything under it;
    - `dir/.wh..wh..opq` hides everything under dir;
    - any other member hides a lower entry at its own path (it replaces it), and one that
      is not a directory also hides everything under that path.

    Whiteouts apply to the lower layers only, never to the layer's own members, wherever
    they stand in its archive: the members are taken as a whole, not one after the other.
    The caller removes the paths returned, then adds the layer's members."""
    if not lower:
        return set()
    gone: set[str] = set()  # the path and all under it
    emptied: set[str] = set()  # all under the path
    replaced: set[str] = set()  # the path itself
    for entry in members:
        parent, name = posixpath.split(entry.path)
        if name == OPAQUE:
            emptied.add(parent)
        elif name.startswith(WHITEOUT):
            gone.add(posixpath.join(parent, name[len(WHITEOUT) :]))
        elif entry.directory:
            replaced.add(entry.path)
        else:
            gone.add(entry.path)
    if not (gone or emptied or replaced):
        return set()
    emptied |= gone

    def is_hidden(path: str) -> bool:
        if path in gone or path in replaced:
            return True
        while path:
            path = posixpath.dirname(path)
            if path in emptied:
                return True
        return False

    return {path for path in lower if is_hidden(path)}
