"""The one image-reference grammar (pipeline.imageref) and the one sha256 pattern."""

from __future__ import annotations

import pytest

from pipeline.errors import ConfigError
from pipeline.imageref import ImageRef, is_sha256

HEX = "ab" * 32
DIGEST = f"sha256:{HEX}"


@pytest.mark.parametrize(
    ("text", "registry", "repository", "tag", "digest"),
    [
        (f"ghcr.io/owner/repo@{DIGEST}", "ghcr.io", "owner/repo", None, DIGEST),
        (f"127.0.0.1:5000/openenv-arena@{DIGEST}", "127.0.0.1:5000", "openenv-arena", None, DIGEST),
        (f"localhost/a/b:v1.2@{DIGEST}", "localhost", "a/b", "v1.2", DIGEST),
        (f"openenv-arena@{DIGEST}", "", "openenv-arena", None, DIGEST),
        ("library/debian:bookworm", "", "library/debian", "bookworm", None),
        ("docker.io/x__y.z-w", "docker.io", "x__y.z-w", None, None),
    ],
)
def test_a_reference_parses_into_its_parts_and_back(text, registry, repository, tag, digest):
    ref = ImageRef.parse(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (registry, repository, tag, digest)
    assert str(ref) == text
    assert ref.name == (f"{registry}/{repository}" if registry else repository)
    assert ref.ref == (digest or tag or "latest")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "UPPER/case",
        "a//b",
        "a/b@sha256:" + "A" * 64,
        "a/b@sha256:" + "a" * 63,
        "a/b@sha512:" + "a" * 64,
        f"a/b@{DIGEST}x",
        f"a/b @{DIGEST}",
        f"a/b@@{DIGEST}",
        "a/-b",
        "a/b:",
        f"bad_host.io/x@{DIGEST}",
        None,
        7,
    ],
)
def test_a_malformed_reference_is_refused(text):
    with pytest.raises(ConfigError):
        ImageRef.parse(text)
    assert not ImageRef.is_pinned(text)


def test_registry_and_pinned_are_asked_for():
    with pytest.raises(ConfigError, match="names no registry host"):
        ImageRef.parse(f"openenv-arena@{DIGEST}", registry=True)
    with pytest.raises(ConfigError, match="not pinned by digest"):
        ImageRef.parse("ghcr.io/a/b:latest", pinned=True)
    assert ImageRef.is_pinned(f"a/b@{DIGEST}") and not ImageRef.is_pinned("ghcr.io/a/b:latest")
    moved = ImageRef.parse(f"openenv-arena@{DIGEST}").in_registry("127.0.0.1:5000")
    assert str(moved) == f"127.0.0.1:5000/openenv-arena@{DIGEST}"


def test_the_sha256_pattern_takes_64_lowercase_hex_and_nothing_around_it():
    assert is_sha256(HEX)
    for bad in (HEX.upper(), HEX[:-1], HEX + "0", f" {HEX}", DIGEST, None, 0):
        assert not is_sha256(bad)
