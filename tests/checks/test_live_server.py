"""The whole suite against the real server (`python -m env serve`) passes, every check."""

from __future__ import annotations

import json

import pytest

from pipeline.checks import results as results_mod
from pipeline.checks.image_checks import IMAGE_CHECKS
from pipeline.checks.suite import run_suite
from tests.curriculum import all_cases

pytestmark = [pytest.mark.root, pytest.mark.slow]


def test_every_check_passes_on_the_real_server(live_server, tmp_path):
    result = run_suite([live_server], cases=all_cases(), image="live-server")
    failures = [f"{c.id}: observed {c.observed!r:.400} expected {c.expected!r:.200}" for c in result.failures]
    assert not failures, "\n".join(failures)
    ids = {c.id for c in result.checks}
    # Every case's fixed checks and every image check ran (stable IDs).
    for case in all_cases():
        for name in (
            "reset",
            "identity-across-seeds",
            "correct",
            "all-but-one",
            "wrong",
            "unknown-key",
            "edited-inputs",
            "cached-terminal",
        ):
            assert f"{case.id}/{name}" in ids
        assert any(i.startswith(f"{case.id}/partial-") for i in ids)
    # A host server has no vendored file and no container limits.
    expected_image = {
        f"image/{n}"
        for n in IMAGE_CHECKS
        if n not in ("protected-vendored", "protected-inherited") and not n.startswith("limit-")
    }
    assert expected_image <= ids
    # The record round-trips through its one writer and loader.
    path = tmp_path / "checks.json"
    results_mod.write(path, result)
    loaded = results_mod.load(path)
    assert loaded.counts() == result.counts() == json.loads(path.read_text())["summary"]
    assert loaded.schema["action"]["properties"]["operation"]["enum"] == ["shell", "finish"]
