"""Small file helpers shared by every stage: hashing, canonical JSON, atomic writes."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

CHUNK = 1 << 20


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_stream(stream: BinaryIO) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    for chunk in iter(lambda: stream.read(CHUNK), b""):
        h.update(chunk)
        size += len(chunk)
    return h.hexdigest(), size


def is_tree_path(name: object) -> bool:
    """A plain relative path inside a tree: "a/b", never "/a", "a/../b", "./a" or "a//b"."""
    return isinstance(name, str) and all(part not in ("", ".", "..") for part in name.split("/"))


def canonical_json(obj: Any) -> bytes:
    """Sorted keys, compact separators, UTF-8: the bytes that get hashed."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def pretty_json(obj: Any) -> bytes:
    """Stable human-readable JSON for committed records (sorted keys, 2-space indent)."""
    return (json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write via a temp file in the same directory and rename: never half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_json_atomic(path: Path, obj: Any) -> None:
    write_atomic(path, pretty_json(obj))


def read_json(path: Path) -> Any:
    with open(path, "rb") as f:
        return json.load(f)
