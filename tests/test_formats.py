"""pipeline.formats: the one definition of a full commit id and of the UTC time records write."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from pipeline.formats import SHORT_COMMIT, TIME_FORMAT, epoch_time, is_commit, parse_utc_time, utc_time


def test_a_commit_id_is_exactly_40_lowercase_hex_digits():
    full = "639865fd3374018d6cb29b9fb82dd531406fcf5f"
    assert is_commit(full)
    for value in (full[:39], full + "0", full.upper(), full + "\n", " " + full, "main", None, 40):
        assert not is_commit(value), value
    assert SHORT_COMMIT.fullmatch(full[:7]) and not SHORT_COMMIT.fullmatch("main")


def test_times_are_utc_to_the_second_and_read_back():
    assert TIME_FORMAT == "%Y-%m-%dT%H:%M:%SZ"
    assert epoch_time(1747699200) == "2025-05-20T00:00:00Z"
    paris = datetime(2025, 5, 20, 2, 0, 0, 500_000, tzinfo=timezone(timedelta(hours=2)))
    assert utc_time(paris) == "2025-05-20T00:00:00Z"
    assert parse_utc_time("2025-05-20T00:00:00Z") == datetime(2025, 5, 20, tzinfo=timezone.utc)
    for bad in ("2025-05-20T00:00:00+00:00", "2025-05-20", None):
        with pytest.raises((ValueError, TypeError)):
            parse_utc_time(bad)  # type: ignore[arg-type]
