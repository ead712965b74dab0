"""Teeth: the suite against deliberately broken servers fails exactly where it should.

Each fault is a test-only launcher (tests/checks/broken/launch.py) around the real
server; the suite runs on two cases (the image checks use the first) without the
minute-long timeout check, which has its own test against the healthy server.
"""

from __future__ import annotations

import pytest

from pipeline.checks.cases import all_cases
from pipeline.checks.image_checks import IMAGE_CHECKS
from pipeline.checks.suite import run_suite

pytestmark = [pytest.mark.root]
CASES = [all_cases()[0], all_cases()[5]]
ANSWER_CHECKS = [n for n in IMAGE_CHECKS if n.startswith("answer-")]


def _failed(target) -> set[str]:
    result = run_suite([target], cases=CASES, with_timeout=False, quiet=True)
    return {c.id for c in result.failures}


@pytest.mark.parametrize(("fault", "must_fail", "must_pass"), [
    ("accepts-wrong", {f"{c.id}/wrong" for c in CASES}, {f"{c.id}/correct" for c in CASES}),
    ("follows-symlinks", {"image/answer-symlink"}, {"image/answer-fifo", *(f"{c.id}/correct" for c in CASES)}),
    ("no-output-cap", {"image/output-cap"}, {"image/uid", *(f"{c.id}/correct" for c in CASES)}),
    ("no-uid-drop", {"image/uid", "image/protected-server-code", "image/protected-task-module",
                     "image/protected-proc-environ", "image/protected-write"}, {"image/output-cap"}),
    ("reset-leaves-files", {"image/reset-isolation", *(f"{c.id}/reset" for c in CASES)}, {"image/uid"}),
    ("runs-after-done", {f"{c.id}/cached-terminal" for c in CASES}, {f"{c.id}/correct" for c in CASES}),
    ("two-sessions", {"image/one-session"}, {"image/reset-isolation"}),
    # The three witnesses that could not fail: each alone catches its broken server.
    ("runs-after-done-quietly", {f"{c.id}/cached-terminal" for c in CASES},
     {f"{c.id}/correct" for c in CASES}),
    ("grades-without-reason", {f"image/{n}" for n in ANSWER_CHECKS},
     {"image/final-action", *(f"{c.id}/correct" for c in CASES)}),
    ("loses-output-with-background", {"image/reset-isolation"},
     {"image/uid", "image/output-cap", *(f"{c.id}/correct" for c in CASES)}),
])
def test_broken_server_fails_the_right_checks(broken_server, fault, must_fail, must_pass):
    with broken_server(fault) as target:
        failed = _failed(target)
    assert must_fail <= failed, f"{fault}: these checks should have failed: {sorted(must_fail - failed)}"
    assert not (must_pass & failed), f"{fault}: collateral failures {sorted(must_pass & failed)}"
