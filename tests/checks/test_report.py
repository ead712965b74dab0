"""The per-family table and the results record, from synthetic results."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipeline.checks import report
from pipeline.checks import results as results_mod
from pipeline.checks.results import CheckResult, SuiteResult
from pipeline.curriculum import Case
from pipeline.errors import VerificationError
from tests.curriculum import all_cases


def _result(failing: str | None = None) -> SuiteResult:
    checks = [CheckResult("image/uid", failing != "image/uid", 0.1, observed="0", expected="2000")]
    for case in all_cases():
        for name in ("reset", "correct", "partial-a", "partial-b", "wrong"):
            cid = f"{case.id}/{name}"
            checks.append(CheckResult(cid, cid != failing, 0.01, observed=0.8, expected=0.0))
    return SuiteResult(image="x@sha256:" + "0" * 64, targets=("u",), checks=tuple(checks), seconds=3.0)


def test_table_counts_cases_per_family_and_marks_failures():
    table = report.family_table(_result("math_route-d2-s101/wrong"))
    row = next(line for line in table.splitlines() if line.startswith("math_route"))
    assert "3/4 X" in row and "8/8" in row
    assert "image checks: 1/1 passed" in table
    text = report.summary(_result("image/uid"))
    assert "FAILED: uid" in text and "FAIL image/uid: observed '0' expected '2000'" in text


def test_results_round_trip_and_failures_keep_observed_vs_expected(tmp_path):
    result = _result("software_change-d1-s101/correct")
    path = tmp_path / "checks.json"
    results_mod.write(path, result)
    loaded = results_mod.load(path)
    assert loaded.counts() == {"total": 161, "passed": 160, "failed": 1}
    (failure,) = loaded.failures
    assert (failure.id, failure.observed, failure.expected) == ("software_change-d1-s101/correct", 0.8, 0.0)
    assert not loaded.ok


def test_loader_refuses_other_records(tmp_path):
    path = tmp_path / "checks.json"
    path.write_text('{"format": "something-else"}')
    with pytest.raises(VerificationError):
        results_mod.load(path)


def test_case_ids_in_request_order():
    cases = all_cases()
    assert len(cases) == 32 and cases[0].id == "software_change-d1-s101"
    assert cases[8].id == "software_change-d1-s307" and cases[-1].id == "media_timeline-d2-s307"
    assert Case.parse("math_route-d2-s307") == Case("math_route", 2, 307)
    with pytest.raises(ValueError):
        Case.parse("math_route-d4-s1")


def test_external_repair_table_marks_failed_and_not_applicable_checks():
    from pipeline.checks.repair import REPAIR_CHECKS

    task = "format-code-task-000666"
    unsolved, reference = "unsolved_terminal_reward_zero", "reference_repair_applied_through_action"
    checks = [
        CheckResult(f"{task}/{n}", n != unsolved, 0.1, observed=1.0, expected=0.0)
        for n in REPAIR_CHECKS
        if n != reference
    ]
    checks.insert(
        REPAIR_CHECKS.index(reference), CheckResult(f"{task}/{reference}", False, 0.0, not_applicable="no script")
    )
    ext = {
        "task_id": task,
        "image": "ghcr.io/x@sha256:" + "0" * 64,
        "status": f"not verified: repair check(s) failed: {unsolved}",
        "checks": [c.to_json() for c in checks],
        "writable_layer_peak_bytes": 7282688,
    }
    offline = {"task_id": "format-code-task-001926", "status": "not verified: unreachable", "checks": []}
    result = SuiteResult(image="x", targets=(), checks=tuple(checks), seconds=1.0, external=(ext, offline))
    table = report.external_markdown(result)
    cells = next(l for l in table.splitlines() if l.startswith(f"| {task} |")).split(" | ")[1:]
    assert dict(zip(REPAIR_CHECKS, (c.strip(" |") for c in cells))) == {
        **{n: "ok" for n in REPAIR_CHECKS},
        unsolved: "FAIL",
        reference: "n/a",
    }
    assert "| format-code-task-001926 | " + " | ".join(["-"] * len(REPAIR_CHECKS)) + " |" in table
    assert f"{reference}: not applicable: no script" in table
    total = len(REPAIR_CHECKS)
    assert result.counts() == {"total": total, "passed": total - 2, "failed": 1, "not_applicable": 1}
    assert f"{total - 2} passed, 1 not applicable: 1 FAILED" in report.summary(result)
    lines = report.repair_table(replace(result, external=(ext,))).splitlines()
    assert [l.split()[0] for l in lines[1:-1]] == list(REPAIR_CHECKS)
    assert lines[1 + REPAIR_CHECKS.index(unsolved)].split()[1] == "FAIL"
    assert lines[1 + REPAIR_CHECKS.index(reference)].split()[1:3] == ["n/a", "0.0"]
    assert lines[-1].endswith("writable layer peak 7,282,688 bytes")


def test_each_runtime_s_checks_count_in_one_cell_and_the_runtimes_are_named():
    from pipeline.checks.report import family_table
    from pipeline.checks.results import CheckResult, SuiteResult

    case = "software_change-d1-s101"
    checks = tuple(CheckResult(f"{case}/correct{s}", True, 0.1) for s in ("", "@docker")) + (
        CheckResult("image/isolation-mode@docker", False, 0.1),
    )
    runtimes = tuple(
        {
            "name": n,
            "suffix": s,
            "engine": {"version": "1"},
            "isolation": m,
            "container_security": {"seccomp": "default", "cap_add": [], "security_opt": []},
            "summary": {"passed": 1, "total": 1},
        }
        for n, s, m in (("podman", "", "namespaces"), ("docker", "@docker", None))
    )
    table = family_table(SuiteResult(image="x", targets=(), checks=checks, seconds=1.0, runtimes=runtimes))
    assert "2/2" in table.splitlines()[1] and "other" not in table
    assert "FAILED: isolation-mode@docker" in table
    assert "runtime docker 1 (check ids ...@docker): seccomp default, nothing loosened" in table
    assert "isolation NOT REPORTED" in table and "isolation namespaces" in table
