"""Explain why two layers differ, file by file (in the spirit of diffoci).

A layer's identity is its bytes; when a rebuilt layer's digest differs from the
recorded one, this says which member differs and how: content, mode, owner, mtime,
type/link target, a missing or extra file, or only the order of members.
"""

from __future__ import annotations

import gzip
import hashlib
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FIELDS = ("type", "mode", "uid", "gid", "mtime", "size", "sha256", "linkname", "uname", "gname")


@dataclass(frozen=True)
class Member:
    """One tar member's metadata and content hash, as recorded or as rebuilt."""

    path: str
    type: str
    mode: int
    uid: int
    gid: int
    mtime: int
    size: int
    sha256: str
    linkname: str = ""
    uname: str = ""
    gname: str = ""

    def to_json(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in ("path",) + FIELDS}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Member:
        return cls(**{k: data[k] for k in ("path",) + FIELDS if k in data})


_TYPES = {
    tarfile.REGTYPE: "file",
    tarfile.AREGTYPE: "file",
    tarfile.DIRTYPE: "dir",
    tarfile.SYMTYPE: "symlink",
    tarfile.LNKTYPE: "hardlink",
}


def members_of_blob(blob: Path) -> list[Member]:
    """Members of a gzip'd layer tar, in archive order."""
    out: list[Member] = []
    with gzip.open(blob, "rb") as gz, tarfile.open(fileobj=gz, mode="r|") as tar:
        for info in tar:
            digest = ""
            if info.isfile():
                f = tar.extractfile(info)
                digest = hashlib.sha256(f.read() if f else b"").hexdigest()
            out.append(
                Member(
                    path=info.name,
                    type=_TYPES.get(info.type, repr(info.type)),
                    mode=info.mode,
                    uid=info.uid,
                    gid=info.gid,
                    mtime=int(info.mtime),
                    size=info.size,
                    sha256=digest,
                    linkname=info.linkname,
                    uname=info.uname,
                    gname=info.gname,
                )
            )
    return out


def explain(recorded: list[Member], rebuilt: list[Member]) -> list[str]:
    """Human-readable differences, most specific first; empty when members agree."""
    lines: list[str] = []
    old = {m.path: m for m in recorded}
    new = {m.path: m for m in rebuilt}
    for path in sorted(old.keys() - new.keys()):
        lines.append(f"{path}: missing from the rebuilt layer")
    for path in sorted(new.keys() - old.keys()):
        lines.append(f"{path}: extra in the rebuilt layer")
    for path in sorted(old.keys() & new.keys()):
        a, b = old[path], new[path]
        for field in FIELDS:
            va, vb = getattr(a, field), getattr(b, field)
            if va != vb:
                what = "content" if field == "sha256" else field
                if field == "mode":
                    va, vb = oct(va), oct(vb)
                lines.append(f"{path}: {what} differs (recorded {va}, rebuilt {vb})")
    if not lines and [m.path for m in recorded] != [m.path for m in rebuilt]:
        lines.append(
            "same members with the same metadata, but in a different order: "
            f"recorded {[m.path for m in recorded][:5]}..., rebuilt {[m.path for m in rebuilt][:5]}..."
        )
    return lines


@dataclass(frozen=True)
class AppLayer:
    """An application layer as built: digests, size and its members (for diffs)."""

    name: str
    digest: str
    diff_id: str
    size: int
    members: tuple[Member, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "digest": self.digest,
            "diff_id": self.diff_id,
            "size": self.size,
            "members": [m.to_json() for m in self.members],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AppLayer:
        return cls(
            name=data["name"],
            digest=data["digest"],
            diff_id=data["diff_id"],
            size=data["size"],
            members=tuple(Member.from_json(m) for m in data["members"]),
        )
