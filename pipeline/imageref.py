"""Image references and sha256 digests, each written once.

`SHA256_HEX` is the one pattern of a sha256 (64 lowercase hex digits), `DIGEST` of an OCI
digest (`sha256:<hex>`), and `ImageRef` the one grammar of an image reference,
`[host[:port]/]repository[:tag][@sha256:<hex>]`: what release.toml pins (`name@sha256:...`),
what records and requests name and what the registry client is asked for. Nothing else splits
a reference at its `@`.

On the lowest floor of `pipeline.LAYERS`, so the configuration's model uses it too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipeline.errors import ConfigError

SHA256_HEX = "[0-9a-f]{64}"
DIGEST = f"sha256:{SHA256_HEX}"
_SHA256 = re.compile(SHA256_HEX)

# A repository path component: lowercase alphanumerics, apart by one separator (`.`, `_`,
# `__` or dashes), as the distribution spec names them.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::[0-9]+)?")
_REST = re.compile(
    rf"(?P<repository>{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    rf"(?:@(?P<digest>{DIGEST}))?"
)
FORM = "[host[:port]/]repository[:tag][@sha256:<64 hex>]"
PINNED_FORM = "name@sha256:<64 hex>"


def is_sha256(value: object) -> bool:
    """Whether `value` is a sha256 as 64 lowercase hex digits (a string, nothing around it)."""
    return isinstance(value, str) and _SHA256.fullmatch(value) is not None


@dataclass(frozen=True)
class ImageRef:
    """`[host[:port]/]repository[:tag][@digest]`: `registry` is "" when the reference names
    no host (the first component is a host when it holds a `.` or `:` or is `localhost`)."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, text: str, *, registry: bool = False, pinned: bool = False) -> ImageRef:
        """The reference `text`; a ConfigError when it is malformed, when `registry` asks for a
        host and it names none, or when `pinned` asks for a digest and it has none."""
        if not isinstance(text, str):
            raise ConfigError("an image reference is not a string", expected=FORM, actual=repr(text))
        first, sep, rest = text.partition("/")
        host = first if sep and ("." in first or ":" in first or first == "localhost") else ""
        m = _REST.fullmatch(rest if host else text)
        if m is None or (host and not _HOST.fullmatch(host)):
            raise ConfigError(
                f"image reference {text!r} is malformed", expected=f"{FORM} (lowercase repository)", actual=text
            )
        if registry and not host:
            raise ConfigError(
                f"image reference {text!r} names no registry host",
                expected="host[:port]/repository[:tag|@digest]",
                actual=text,
            )
        if pinned and m["digest"] is None:
            raise ConfigError(
                f"image reference {text!r} is not pinned by digest",
                expected=PINNED_FORM,
                actual=text,
                hint="pin the image by its manifest digest",
            )
        return cls(host, m["repository"], m["tag"], m["digest"])

    @classmethod
    def is_pinned(cls, text: object) -> bool:
        """Whether `text` is a well-formed reference with a digest."""
        try:
            return cls.parse(text, pinned=True) is not None  # type: ignore[arg-type]
        except ConfigError:
            return False

    @property
    def name(self) -> str:
        """`[host/]repository`, without tag or digest."""
        return f"{self.registry}/{self.repository}" if self.registry else self.repository

    @property
    def ref(self) -> str:
        """What to ask a registry for: the digest if there is one, else the tag."""
        return self.digest or self.tag or "latest"

    def with_digest(self, digest: str) -> ImageRef:
        return ImageRef(self.registry, self.repository, None, digest)

    def in_registry(self, registry: str) -> ImageRef:
        """The same repository and digest, read from `registry` instead."""
        return ImageRef(registry, self.repository, self.tag, self.digest)

    def __str__(self) -> str:
        out = self.name
        if self.tag:
            out += f":{self.tag}"
        if self.digest:
            out += f"@{self.digest}"
        return out
