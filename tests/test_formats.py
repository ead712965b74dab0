"""pipeline.formats: the one definition of a full commit id, of the UTC time records write
and of a Debian control file's paragraphs (dpkg's status, apt's Packages index)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from pipeline.formats import (
    SHORT_COMMIT,
    TIME_FORMAT,
    deb822_paragraphs,
    dpkg_installed,
    epoch_time,
    is_commit,
    parse_utc_time,
    utc_time,
)


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
    assert parse_utc_time("2025-05-20T00:00:00Z") == datetime(2025, 5, 20, tzinfo=UTC)
    for bad in ("2025-05-20T00:00:00+00:00", "2025-05-20", None):
        with pytest.raises((ValueError, TypeError)):
            parse_utc_time(bad)  # type: ignore[arg-type]


STATUS = """\
Package: bash
Status: install ok installed
Version: 5.2.15-2+b13
Conffiles:
 /etc/bash.bashrc 89269e1298235f1b12b4c16e4065ad0d
 /etc/skel/.bashrc 7e3d9e9e3a9b0f0f1e1e1e1e1e1e1e1e
Description: GNU Bourne Again SHell
 Bash is an sh-compatible command language interpreter.
 .
 Version: 9.9 (a continuation line that looks like a field)
Architecture: amd64

Package: gone
Status: deinstall ok config-files
Version: 1.0

Package: half
Status: install ok half-installed
Version: 2.0

Package: zlib1g
Status: install ok installed
Source: zlib (1:1.2.13.dfsg-1)
Version: 1:1.2.13.dfsg-1
"""


def test_continuation_lines_belong_to_their_field_and_are_never_fields():
    bash = deb822_paragraphs(STATUS)[0]
    assert bash["Version"] == "5.2.15-2+b13" and bash["Architecture"] == "amd64"
    assert bash["Conffiles"].split("\n") == [
        "",
        "/etc/bash.bashrc 89269e1298235f1b12b4c16e4065ad0d",
        "/etc/skel/.bashrc 7e3d9e9e3a9b0f0f1e1e1e1e1e1e1e1e",
    ]
    assert bash["Description"].split("\n") == [
        "GNU Bourne Again SHell",
        "Bash is an sh-compatible command language interpreter.",
        ".",
        "Version: 9.9 (a continuation line that looks like a field)",
    ]


@pytest.mark.parametrize(
    "variant",
    [
        pytest.param(lambda s: s, id="one-empty-line"),
        pytest.param(lambda s: s.replace("\n\n", "\n\n\n\n"), id="several-empty-lines"),
        pytest.param(lambda s: s.replace("\n\n", "\n \t\n"), id="whitespace-only-line"),
        pytest.param(lambda s: s.replace("\n\n", "\n  \n\n\t\n"), id="mixed-blank-lines"),
        pytest.param(lambda s: "\n \n" + s + "\n\n \n", id="blank-lines-around"),
        pytest.param(lambda s: s.rstrip("\n"), id="no-final-newline"),
        pytest.param(lambda s: s.replace("\n", "\r\n"), id="crlf"),
        pytest.param(lambda s: "# written by hand\n" + s, id="comment-line"),
    ],
)
def test_paragraphs_are_apart_by_any_blank_lines(variant):
    paragraphs = deb822_paragraphs(variant(STATUS))
    assert [p["Package"] for p in paragraphs] == ["bash", "gone", "half", "zlib1g"]
    assert paragraphs[0]["Architecture"] == "amd64" and paragraphs[3]["Version"] == "1:1.2.13.dfsg-1"
    assert [p["Package"] for p in dpkg_installed(variant(STATUS))] == ["bash", "zlib1g"]


def test_only_the_named_packages_paragraphs():
    index = STATUS + "\nVersion: 3\nPackage: late\n\nPackage: other\nVersion: 4\n"
    assert [p["Package"] for p in deb822_paragraphs(index, {"zlib1g", "late", "missing"})] == ["zlib1g", "late"]
    assert deb822_paragraphs("\n\n \n") == [] and deb822_paragraphs(STATUS, set()) == []
