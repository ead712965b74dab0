"""What a layer holds, path by path: read from its blob once per process and layer digest.

A layer blob is named by the sha256 of its bytes, so the list of its tar members is a
function of that digest. A reader that verifies a blob's digest while it reads the whole
tar anyway (the SBOM reader) records the list here; a later reader of the same layer in
the same process takes it instead of decompressing and parsing the tar again. A release
does both: the SBOM reads every layer of the built image, then the verify stage lists the
base's layers again, from the blobs it pulled by the same digests, for
`image/protected-inherited`. Lists are only recorded under a digest the bytes were
checked against; `entries` of a layer nobody recorded reads the blob (and records
nothing: it does not hash what it reads).
"""

from __future__ import annotations

import gzip
import posixpath
import tarfile
from collections.abc import Iterable
from pathlib import Path

# (path in the image: no leading "./" or "/"; is a regular file), in archive order.
Entry = tuple[str, bool]

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
        named = ((clean(info.name), info.isfile()) for info in tar)
        return tuple((name, regular) for name, regular in named if name)
