"""The text formats the stages share, each defined once: a full git commit id and a UTC
time to the second (RFC 3339 with `Z`: statements, in-toto layouts, image configs).

On the lowest floor of `pipeline.LAYERS`, so every stage can take them from here.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

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
    return t.astimezone(timezone.utc).strftime(TIME_FORMAT)


def epoch_time(epoch: int) -> str:
    """Seconds since the epoch (SOURCE_DATE_EPOCH) as TIME_FORMAT."""
    return utc_time(datetime.fromtimestamp(int(epoch), timezone.utc))


def parse_utc_time(value: str) -> datetime:
    """A TIME_FORMAT string as an aware UTC time; ValueError (TypeError for a non-string)
    when it is not one."""
    return datetime.strptime(value, TIME_FORMAT).replace(tzinfo=timezone.utc)
