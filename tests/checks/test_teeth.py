"""Teeth: the suite against deliberately broken servers fails exactly where it should.

Each fault is a test-only launcher (tests/checks/broken/launch.py) around the real
server; the suite runs on two cases (the image checks use the first) without the
minute-long timeout check, which has its own test against the healthy server.
"""

from __future__ import annotations

import pytest

from pipeline.checks import isolation_checks
from pipeline.checks.image_checks import IMAGE_CHECKS
from pipeline.checks.isolation_checks import ISOLATION_CHECKS
from pipeline.checks.suite import run_suite
from tests.curriculum import all_cases

pytestmark = [pytest.mark.root, pytest.mark.slow]  # each runs the whole check suite against a server
CASES = [all_cases()[0], all_cases()[5]]
ANSWER_CHECKS = [n for n in IMAGE_CHECKS if n.startswith("answer-")]


def _failed(target) -> set[str]:
    result = run_suite([target], cases=CASES, with_timeout=False, quiet=True)
    return {c.id for c in result.failures}


@pytest.mark.parametrize(
    ("fault", "must_fail", "must_pass"),
    [
        ("accepts-wrong", {f"{c.id}/wrong" for c in CASES}, {f"{c.id}/correct" for c in CASES}),
        ("follows-symlinks", {"image/answer-symlink"}, {"image/answer-fifo", *(f"{c.id}/correct" for c in CASES)}),
        ("no-output-cap", {"image/output-cap"}, {"image/uid", *(f"{c.id}/correct" for c in CASES)}),
        (
            "no-uid-drop",
            {
                "image/uid",
                "image/protected-server-code",
                "image/protected-task-module",
                "image/protected-proc-environ",
                "image/protected-write",
                "image/isolation-writable",
            },
            {"image/output-cap"},
        ),
        ("reset-leaves-files", {"image/reset-isolation", *(f"{c.id}/reset" for c in CASES)}, {"image/uid"}),
        ("runs-after-done", {f"{c.id}/cached-terminal" for c in CASES}, {f"{c.id}/correct" for c in CASES}),
        ("two-sessions", {"image/one-session"}, {"image/reset-isolation"}),
        # The three witnesses that could not fail: each alone catches its broken server.
        ("runs-after-done-quietly", {f"{c.id}/cached-terminal" for c in CASES}, {f"{c.id}/correct" for c in CASES}),
        (
            "grades-without-reason",
            {f"image/{n}" for n in ANSWER_CHECKS},
            {"image/final-action", *(f"{c.id}/correct" for c in CASES)},
        ),
        (
            "loses-output-with-background",
            {"image/reset-isolation"},
            {"image/uid", "image/output-cap", *(f"{c.id}/correct" for c in CASES)},
        ),
    ],
)
def test_broken_server_fails_the_right_checks(broken_server, fault, must_fail, must_pass):
    with broken_server(fault) as target:
        failed = _failed(target)
    assert must_fail <= failed, f"{fault}: these checks should have failed: {sorted(must_fail - failed)}"
    assert not (must_pass & failed), f"{fault}: collateral failures {sorted(must_pass & failed)}"


@pytest.mark.parametrize(
    ("fault", "must_fail"),
    [
        # Without a PID namespace there is no /proc of the episode's own either.
        ("no-pid-namespace", {"image/isolation-hopper", "image/isolation-pid-counter"}),
        ("container-proc", {"image/isolation-pid-counter"}),
        ("oom-order-flat", {"image/isolation-oom-order"}),
        ("no-network-namespace", {"image/isolation-network"}),
        ("keyrings-allowed", {"image/isolation-keyring"}),
        # The hopper's marker files, and the planted ones, stay in the shared /tmp too.
        ("scratch-on-disk", {"image/isolation-scratch", "image/isolation-hopper", "image/isolation-leftovers"}),
        # Plain uvicorn keeps every trickling connection too.
        ("no-connection-guard", {"image/connection-flood", "image/slow-headers"}),
        ("slow-clients-unguarded", {"image/slow-headers"}),
        ("no-header-deadline", {"image/slow-headers"}),
        ("no-peer-limit", {"image/slow-headers"}),
        ("fragile-messages", {"image/malformed-input"}),
        ("escaped-packets", {"image/malformed-input"}),
        ("nested-namespaces-allowed", {"image/isolation-nested"}),
        # The unprivileged mode: whole, it passes every isolation check; without one defence,
        # that defence's check fails.
        ("unprivileged", set()),
        ("unprivileged-sockets-allowed", {"image/isolation-network"}),
        # The hopper outlives the reset, and its forks hold the UID's process limit, which the
        # next episodes share: what they run fails too.
        (
            "unprivileged-no-kill-by-uid",
            {
                "image/isolation-hopper",
                "image/isolation-keyring",
                "image/isolation-leftovers",
                "image/isolation-nested",
                "image/isolation-network",
                "image/isolation-scratch",
                "image/isolation-oom-order",
            },
        ),
        (
            "unprivileged-scratch-shared",
            {"image/isolation-leftovers", "image/isolation-scratch", "image/isolation-hopper"},
        ),
        ("unprivileged-ipc-allowed", {"image/isolation-leftovers"}),
    ],
)
def test_a_server_without_an_isolation_defence_fails_its_check(broken_server, fault, must_fail, monkeypatch):
    """Each defence of an episode against a hostile agent (docs/isolation.md), removed alone:
    its check fails, and the checks of the other defences still pass."""
    if fault == "no-connection-guard":
        # The flooded server without its guard never answers again, and spins on EMFILE
        # while the check waits: five seconds of that show it as well as the check's twenty.
        monkeypatch.setattr(isolation_checks, "FLOOD_HEALTHY_WITHIN_S", 5.0)
    with broken_server(fault) as target:
        result = run_suite([target], cases=CASES[:1], with_timeout=False, quiet=True)
    failed = {c.id for c in result.failures}
    others = {f"image/{n}" for n in ISOLATION_CHECKS} - must_fail
    if fault.startswith("unprivileged"):
        # Without namespaces the agent sees the filesystem the server runs on, here an
        # overlay of the test machine's (tests/contained.py), whose world-writable files an
        # image does not have: isolation-writable is judged against the image in a release.
        others.discard("image/isolation-writable")
        failed.discard("image/isolation-writable")
    assert must_fail <= failed, f"{fault}: these checks should have failed: {sorted(must_fail - failed)}"
    assert not (others & failed), f"{fault}: collateral failures {sorted(others & failed)}"


def _run(target):
    return run_suite([target], cases=CASES, with_timeout=False, quiet=True)


def test_a_server_without_mcp_fails_openenv_validate_and_only_it(broken_server):
    """openenv-core's own validator, run as image/openenv-validate, catches a server that does not
    answer POST /mcp; nothing else of the suite depends on it."""
    with broken_server("no-mcp") as target:
        result = _run(target)
    assert {c.id for c in result.failures} == {"image/openenv-validate"}
    check = next(c for c in result.checks if c.id == "image/openenv-validate")
    assert check.observed["criteria"]["mcp_endpoint"] is False and check.observed["exit_code"] != 0
    assert "mcp_endpoint" in check.detail


def test_a_drifted_schema_fails_image_schema_naming_the_first_difference(broken_server):
    with broken_server("schema-drift") as target:
        result = _run(target)
    assert {c.id for c in result.failures} == {"image/schema"}
    check = next(c for c in result.checks if c.id == "image/schema")
    assert check.observed["first_difference"] == (
        '/action/properties/command/description: expected "Bash command; each call starts in the task '
        'repository.", got "A bash command."'
    )


def test_the_route_attacks_catch_a_server_with_openenv_cores_own_routes(broken_server):
    """Teeth of tests/env/route_attacks.py: openenv-core's stateless routes answer and its /mcp
    offers tools; the battery says so. (Its stateless /reset makes an environment of its own,
    whose sandbox is not the live episode's: env/server/sandbox.py.)"""
    from urllib.parse import urlsplit

    from tests.env import route_attacks

    with broken_server("openenv-core-routes") as target:
        found = route_attacks.attack(target.url, CASES[0].id, port=urlsplit(target.url).port)
    text = "\n".join(found)
    assert "/reset answered HTTP 200" in text
    # Its /mcp answers tools/list with something other than an empty tool list, and its
    # OpenAPI paths are those of simulation mode.
    assert "/mcp tools/list offers something" in text
    assert (
        "/openapi.json: HTTP 200, paths ['/health', '/mcp', '/metadata', '/reset', '/schema', '/state', '/step']"
        in text
    )
