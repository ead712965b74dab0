"""The text formats the stages share, each defined once: a full git commit id, a UTC
time to the second (RFC 3339 with `Z`: statements, in-toto layouts, image configs) and
Debian's control-file paragraphs (dpkg's status database, apt's Packages indexes).

On the lowest floor of `pipeline.LAYERS`, so every stage can take them from here. One of
the base builder's modules (`pipeline.image.base.BUILDER_MODULES`): a change here moves
the builder hash that locks/base.json pins.
"""

from __future__ import annotations

import re
from collections.abc import Set
from datetime import UTC, datetime

# A full git commit id: 40 lowercase hex digits. Match with `fullmatch` (or `is_commit`).
COMMIT = re.compile(r"[0-9a-f]{40}")
# What a short commit id looks like: only to say why a value is not a full one.
SHORT_COMMIT = re.compile(r"[0-9a-fA-F]{4,39}")
# A UTC time to the second, as every record here writes it: 2025-05-20T00:00:00Z.
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def is_commit(value: object) -> bool:
    """Whether `value` is a full 40-hex commit id (a string, nothing around it)."""
    return isinstance(value, str) and COMMIT.fullmatch(value) is not None


def utc_time(t: datetime) -> str:
    """An aware time as TIME_FORMAT in UTC (fractions of a second dropped)."""
    return t.astimezone(UTC).strftime(TIME_FORMAT)


def epoch_time(epoch: int) -> str:
    """Seconds since the epoch (SOURCE_DATE_EPOCH) as TIME_FORMAT."""
    return utc_time(datetime.fromtimestamp(int(epoch), UTC))


def parse_utc_time(value: str) -> datetime:
    """A TIME_FORMAT string as an aware UTC time; ValueError (TypeError for a non-string)
    when it is not one."""
    return datetime.strptime(value, TIME_FORMAT).replace(tzinfo=UTC)


# Paragraphs are apart by one or more blank lines: empty, or only spaces and tabs.
_PARAGRAPH_BREAK = re.compile(r"\n(?:[ \t]*\n)+")


def deb822_paragraphs(text: str, packages: Set[str] | None = None) -> list[dict[str, str]]:
    """The paragraphs of a Debian control file (deb822: dpkg's status, an apt Packages
    index), in order, as field -> value.

    A value is the text after the field's colon, stripped; each continuation line (one
    that starts with a space or tab) adds a line of its own to it, stripped (`.` stays
    `.`). Paragraphs are apart by any number of lines that are empty or hold only spaces
    and tabs; CRLF line ends, `#` comment lines and blank lines before the first or
    after the last paragraph are allowed. With `packages`, only the paragraphs whose
    `Package` is one of them (an apt index holds about 60,000 paragraphs for the
    hundred a rootfs installs: the others are passed over at their first line when
    that line names the package, as apt and dpkg write them)."""
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    out = []
    for block in _PARAGRAPH_BREAK.split("\n" + text + "\n"):
        if packages is not None:
            first = block.lstrip("\n").partition("\n")[0]
            if first.startswith("Package:") and first[len("Package:") :].strip() not in packages:
                continue
        fields: dict[str, str] = {}
        key = None
        for line in block.split("\n"):
            if not line or line.startswith("#"):
                continue
            if line[0] in " \t":
                if key is not None:
                    fields[key] += "\n" + line.strip()
                continue
            name, sep, value = line.partition(":")
            if sep:
                key = name.strip()
                fields[key] = value.strip()
        if fields and (packages is None or fields.get("Package") in packages):
            out.append(fields)
    return out


def dpkg_installed(status: str) -> list[dict[str, str]]:
    """The paragraphs of dpkg's status database (/var/lib/dpkg/status) whose package is
    installed (`Status: install ok installed`; not half-installed, removed or with only
    its configuration files left), in order."""
    return [
        p for p in deb822_paragraphs(status) if "Package" in p and p.get("Status", "").split()[-1:] == ["installed"]
    ]
