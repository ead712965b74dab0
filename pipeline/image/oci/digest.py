"""Content digests in the OCI form `sha256:<64 hex>`."""

from __future__ import annotations

import hashlib
import re

from pipeline.errors import ConfigError, DigestMismatch
from pipeline.imageref import DIGEST

_DIGEST = re.compile(DIGEST)


def of_bytes(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def is_digest(value: str) -> bool:
    return isinstance(value, str) and _DIGEST.fullmatch(value) is not None


def parse(value: str, *, what: str = "digest") -> str:
    """Validate `sha256:<64 lowercase hex>` and return it unchanged."""
    if not is_digest(value):
        raise ConfigError(
            f"{what} is not a sha256 digest",
            expected="sha256:<64 lowercase hex>",
            actual=repr(value),
        )
    return value


def hex_of(digest: str) -> str:
    return parse(digest)[len("sha256:") :]


def verify(data: bytes, digest: str, *, what: str) -> None:
    """Raise DigestMismatch naming `what` when data does not hash to digest."""
    actual = of_bytes(data)
    if actual != digest:
        raise DigestMismatch(
            f"{what} does not match its digest",
            expected=digest,
            actual=actual,
            hint="the content was modified or corrupted; do not use it",
        )
