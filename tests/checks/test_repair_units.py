"""The parts of the repair checks that need no image: the reference repair's one shell
action (run by a real bash), the other task's id, the external container limits, the
arena policy on checks that did not apply, the `repair-checks` command line."""

from __future__ import annotations

import hashlib
import subprocess

import pytest

from pipeline import cli, config
from pipeline.checks import external, repair
from pipeline.checks.results import CheckResult, SuiteResult
from pipeline.config import ExternalPolicy
from pipeline.errors import CheckFailure, ConfigError
from pipeline.runtime.limits import ExternalLimits

from .repair_standin import REFERENCE_SCRIPT

TASK = "format-code-task-000666"


def test_reference_action_is_exactly_the_seeds_heredoc():
    script = b"print('hi')\n"
    ref = repair.ReferenceRepair(script, "solutions/x.py")
    assert ref.action() == "python3 - <<'ARENA_REPAIR'\nprint('hi')\n\nARENA_REPAIR"
    assert ref.sha256 == hashlib.sha256(script).hexdigest()


def test_reference_action_runs_the_script_in_bash_with_quotes_and_dollars_kept(tmp_path):
    # A quoted heredoc: bash expands nothing in the script; python3 reads it from stdin.
    script = b"import pathlib\npathlib.Path('out.txt').write_text('$HOME `id` \"q\" \\\\n ' + str(6 * 7))\n"
    proc = subprocess.run(
        ["bash", "-c", repair.ReferenceRepair(script, "t").action()], cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out.txt").read_text() == '$HOME `id` "q" \\n 42'


def test_reference_that_cannot_travel_as_one_action_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="not UTF-8"):
        repair.ReferenceRepair(b"\xff\xfe", "bad")
    with pytest.raises(ConfigError, match="has a line `ARENA_REPAIR`"):
        repair.ReferenceRepair(b"x = 1\nARENA_REPAIR\ny = 2\n", "bad")
    with pytest.raises(ConfigError, match="does not fit in one shell action"):
        repair.ReferenceRepair(b"#" * 16_000, "big")
    with pytest.raises(ConfigError, match="cannot read the reference repair"):
        repair.ReferenceRepair.read(tmp_path / "missing.py")
    read = repair.ReferenceRepair.read(REFERENCE_SCRIPT)
    assert read.script == REFERENCE_SCRIPT.read_bytes() and read.source == str(REFERENCE_SCRIPT)


def test_another_task_id_keeps_the_shape_and_differs():
    assert repair.another_task_id("format-code-task-000666") == "format-code-task-000667"
    assert repair.another_task_id("format-code-task-999999") == "format-code-task-000000"
    assert repair.another_task_id("task") == "task-other"


def test_seed_checks_come_first_in_the_seeds_order_then_the_extras():
    assert repair.REPAIR_CHECKS[:12] == repair.SEED_CHECKS and len(set(repair.REPAIR_CHECKS)) == 16
    assert repair.SEED_CHECKS[0] == "health_within_120_seconds"
    assert repair.SEED_CHECKS[-1] == "reset_restores_unsolved_task"
    assert repair.EXTRA_CHECKS == ("schema", "metadata", "other-task-refused", "one-session")


def test_external_budget_is_two_cpus_and_sixteen_gib_without_swap():
    limits = ExternalLimits.from_budgets(config.load().budgets["external"])
    assert limits.run_args() == ["--memory", str(16 << 30), "--memory-swap", str(16 << 30), "--cpus", "2"]


def _result(*checks: CheckResult) -> external.ExternalResult:
    return external.ExternalResult(
        task_id=TASK, image="x@sha256:" + "0" * 64, checks=checks, writable_layer_peak_bytes=123
    )


def test_not_applicable_reference_checks_are_refused_by_arena_and_warned_by_local(capsys):
    na = _result(
        CheckResult(f"{TASK}/reset_task_identity", True, 0.1),
        CheckResult(f"{TASK}/reference_terminal_reward_one", False, 0.0, not_applicable="no script"),
    )
    assert na.verified and not na.fully_checked
    with pytest.raises(CheckFailure, match="not applicable: reference_terminal_reward_one"):
        external.enforce([na], ExternalPolicy(required=True, profile="arena"))
    external.enforce([na], ExternalPolicy(required=False, profile="local"))
    assert "NOT VERIFIED" in capsys.readouterr().err
    done = _result(CheckResult(f"{TASK}/reset_task_identity", True, 0.1))
    assert done.fully_checked
    external.enforce([done], ExternalPolicy(required=True, profile="arena"))
    assert external.ExternalResult.from_json(na.to_json()) == na


def test_not_applicable_is_neither_passed_nor_failed_in_the_signed_test_result():
    from pipeline.records.attest import checks_predicate

    checks = (
        CheckResult(f"{TASK}/unsolved_terminal_reward_zero", True, 0.1),
        CheckResult(f"{TASK}/reference_terminal_reward_one", False, 0.0, not_applicable="no script"),
    )
    suite = SuiteResult(image="x@sha256:" + "0" * 64, targets=(), checks=checks, seconds=1.0)
    loaded = SuiteResult.from_json(suite.to_json())
    assert loaded.checks[1].not_applicable == "no script" and loaded.ok
    predicate = checks_predicate(loaded, checks_sha256="0" * 64)
    assert predicate["result"] == "PASSED"
    assert predicate["passedTests"] == [f"{TASK}/unsolved_terminal_reward_zero"]
    assert predicate["failedTests"] == [] and predicate["warnedTests"] == [f"{TASK}/reference_terminal_reward_one"]
    only_na = SuiteResult(image="x", targets=(), checks=checks[1:], seconds=1.0)
    assert not only_na.ok  # nothing passed: not a verified run


def test_repair_checks_command_line_requires_task_and_reference(capsys):
    with pytest.raises(SystemExit) as helped:
        cli.main(["repair-checks", "--help"])
    out = capsys.readouterr().out
    assert helped.value.code == 0 and "--reference" in out and "--task" in out and "--out" in out
    with pytest.raises(SystemExit) as missing:
        cli.main(["repair-checks", "h/r@sha256:" + "0" * 64, "--reference", str(REFERENCE_SCRIPT)])
    assert missing.value.code == 2 and "--task" in capsys.readouterr().err
