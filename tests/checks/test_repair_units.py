"""The parts of the repair checks that need no image: the
[external.repair] conventions, the patch applier shipped into images."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import config
from pipeline.checks import repair
from pipeline.errors import ConfigError

from .repair_standin import REFERENCE_PATCH

APPLIER = Path(repair.__file__).with_name("apply_patch.py")
BUGGY = (Path(__file__).parent / "repair_standin" / "project" / "calc.py").read_text()


def test_repair_conventions_are_read_from_release_toml(tmp_path):
    text = config.DEFAULT_CONFIG.read_text()
    cfg = config.load()
    assert cfg.external.repair == config.RepairConventions()
    changed = tmp_path / "release.toml"
    changed.write_text(text.replace('reset_id_field = "task_id"', 'reset_id_field = "instance_id"'))
    assert config.load(changed).external.repair.reset_id_field == "instance_id"
    changed.write_text(text.replace('reset_id_field = "task_id"', 'reference_field = "patch"'))
    with pytest.raises(ConfigError, match="unknown key"):
        config.load(changed)
    changed.write_text(text.replace('grader_paths = ["/opt/arena"]', 'grader_paths = ["opt"]'))
    with pytest.raises(ConfigError, match="grader_paths"):
        config.load(changed)


def _apply(tmp_path: Path, files: dict[str, str], patch: str) -> subprocess.CompletedProcess:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "p.diff").write_text(patch)
    return subprocess.run([sys.executable, str(APPLIER), "p.diff"], cwd=tmp_path,
                          capture_output=True, text=True)


def test_applier_applies_the_reference_patch_also_at_an_offset(tmp_path):
    shifted = '"""Moved down."""\n\n' + BUGGY
    assert _apply(tmp_path, {"calc.py": shifted}, REFERENCE_PATCH).returncode == 0
    assert (tmp_path / "calc.py").read_text() == shifted.replace("(len(values) + 1)", "len(values)")


def test_applier_creates_and_deletes_files(tmp_path):
    patch = ("--- /dev/null\n+++ b/new.py\n@@ -0,0 +1,2 @@\n+a = 1\n+b = 2\n"
             "--- a/old.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-gone\n")
    assert _apply(tmp_path, {"old.py": "gone\n"}, patch).returncode == 0
    assert (tmp_path / "new.py").read_text() == "a = 1\nb = 2\n" and not (tmp_path / "old.py").exists()


def test_applier_refuses_a_hunk_whose_context_does_not_match(tmp_path):
    proc = _apply(tmp_path, {"calc.py": BUGGY.replace("(len(values) + 1)", "(len(values) - 1)")},
                  REFERENCE_PATCH)
    assert proc.returncode != 0 and "does not apply" in proc.stderr
    assert "(len(values) - 1)" in (tmp_path / "calc.py").read_text()


def test_not_applicable_is_neither_passed_nor_failed_in_the_signed_test_result():
    from pipeline.records.attest import checks_predicate
    from pipeline.checks.results import CheckResult, SuiteResult

    task = "format-code-task-000666"
    checks = (CheckResult(f"{task}/unsolved", True, 0.1),
              CheckResult(f"{task}/reference-repair", False, 0.0, not_applicable="no patch"))
    suite = SuiteResult(image="x@sha256:" + "0" * 64, targets=(), checks=checks, seconds=1.0)
    loaded = SuiteResult.from_json(suite.to_json())
    assert loaded.checks[1].not_applicable == "no patch" and loaded.ok
    predicate = checks_predicate(loaded, checks_sha256="0" * 64)
    assert predicate["result"] == "PASSED"
    assert predicate["passedTests"] == [f"{task}/unsolved"] and predicate["failedTests"] == []
    assert predicate["warnedTests"] == [f"{task}/reference-repair"]
    only_na = SuiteResult(image="x", targets=(), checks=checks[1:], seconds=1.0)
    assert not only_na.ok  # nothing passed: not a verified run
