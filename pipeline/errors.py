"""The one error family of the pipeline.

Every failure says what failed, the expected and the actual value where there are
two to compare, and what to do about it. The CLI turns a ReleaseError into one line
and a non-zero exit code.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

# "Not given", apart from a value that is None (an expected file that is absent, say).
_UNSET: object = type("Unset", (), {"__repr__": lambda self: "<unset>"})()


class ReleaseError(Exception):
    """Base of every error the pipeline raises on purpose."""

    exit_code = 1

    def __init__(
        self,
        what: str,
        *,
        expected: object = _UNSET,
        actual: object = _UNSET,
        hint: str | None = None,
    ) -> None:
        self.what = what
        self.has_expected = expected is not _UNSET
        self.has_actual = actual is not _UNSET
        self.expected = expected if self.has_expected else None
        self.actual = actual if self.has_actual else None
        self.hint = hint
        super().__init__(self.one_line())

    def one_line(self) -> str:
        """`what; expected E, got A; hint`: the expected part only when one was given, so a
        value that is simply wrong reads `what; got A; hint` (never "expected None")."""
        parts = [self.what]
        if self.has_expected:
            parts.append(f"expected {self.expected}, got {self.actual}")
        elif self.has_actual:
            parts.append(f"got {self.actual}")
        if self.hint:
            parts.append(self.hint)
        return "; ".join(parts)

    def diagnostics(self) -> str:
        """A longer explanation for humans (defaults to the one-line message)."""
        return self.one_line()


class ConfigError(ReleaseError):
    """release.toml or a command-line argument is invalid."""

    exit_code = 2


class ToolError(ReleaseError):
    """An external tool (git, podman, mmdebstrap, nginx, ...) failed or is missing."""


class DigestMismatch(ReleaseError):
    """Bytes do not hash to the digest that pins them."""


class RegistryError(ReleaseError):
    """The OCI registry refused, failed, or could not be reached."""


class HubError(ReleaseError):
    """The dataset hub (Hugging Face) refused, failed, or could not be reached."""


class SourceError(ReleaseError):
    """A pinned upstream input could not be fetched or does not match its pin."""


class VerificationError(ReleaseError):
    """A signature, attestation or record does not verify."""


class CheckFailure(ReleaseError):
    """The functional check suite found failing checks."""


class NoSpace(ReleaseError):
    """A file system ran out of space (ENOSPC), or has too little for what comes next."""

    @classmethod
    def at(cls, path: str | Path, *, need: int | None, what: str, fix: str | None = None) -> NoSpace:
        """One line: the path, what needed the space and how much, what is free, the fix."""
        path = Path(path)
        probe = path
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        try:
            free = f"{shutil.disk_usage(probe).free / 1e6:,.0f} MB free"
        except OSError:
            free = "free space unknown"
        return cls(
            f"no space left on the file system of {path} ({what})",
            expected=f"about {need / 1e6:,.0f} MB free" if need else "free space",
            actual=free,
            hint=fix or f"free space on that file system (or put {path} on another one), then run again",
        )


def is_no_space(exc: BaseException) -> bool:
    """Whether `exc` is the kernel's ENOSPC (or EDQUOT: a quota, the same fix)."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
