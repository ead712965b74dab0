"""The suite's solvers against the first-party oracle, and their independence from env/."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import env.families as families
from pipeline.checks import solvers
from pipeline.checks.answers import graded_variants, score, strict_equal, substantive, wrong

SOLVER_DIR = Path(solvers.__file__).resolve().parent
SEEDS = range(40)


@pytest.mark.parametrize("family", solvers.FAMILIES)
def test_solver_matches_oracle_and_grades_full(family):
    for difficulty in (1, 2, 3):
        for seed in SEEDS:
            task = families.make_task(family, seed, difficulty)
            answer = solvers.solve(family, task["files"])
            assert answer == families.oracle_answer(task), (family, difficulty, seed)
            assert families.grade(task, answer) == 1.0


@pytest.mark.parametrize("family", solvers.FAMILIES)
def test_variant_scores_agree_with_the_first_party_grader(family):
    # The suite's expected rewards are derived from the rules on its own; the
    # first-party grader must give exactly the same numbers.
    for seed in range(10):
        task = families.make_task(family, seed, 2)
        answer = solvers.solve(family, task["files"])
        for variant in graded_variants(answer):
            assert families.grade(task, variant.answer) == pytest.approx(variant.expected, abs=1e-12), (
                family,
                seed,
                variant.check,
            )


def test_solver_modules_import_only_the_standard_library():
    allowed = set(sys.stdlib_module_names)
    for path in SOLVER_DIR.glob("*.py"):
        if path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                top = name.split(".")[0]
                assert top in allowed, f"{path.name} imports {name}: solvers are stdlib-only programs"
                assert top not in ("env", "pipeline"), f"{path.name} imports {name}"


def test_the_solver_package_never_loads_env():
    code = (
        "import sys; import pipeline.checks.solvers as s; "
        "[s.program(f) for f in s.FAMILIES]; [s.module(f) for f in s.FAMILIES]; "
        "print(sorted(m for m in sys.modules if m == 'env' or m.startswith('env.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=SOLVER_DIR.parents[2]
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("family", solvers.FAMILIES)
def test_embedded_program_runs_on_real_files(family, tmp_path):
    task = families.make_task(family, 307, 2)
    for name, text in task["files"].items():
        (tmp_path / name).write_text(text)
    command = solvers.shell_command(family)
    assert len(command) <= solvers.MAX_COMMAND_CHARS
    out = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, check=True)
    printed = json.loads(out.stdout.strip().splitlines()[-1])
    assert printed == json.loads((tmp_path / "answer.json").read_text())
    assert families.grade(task, printed) == 1.0


def test_grading_rule_helpers():
    assert strict_equal(1, 1.0) and not strict_equal(True, 1) and not strict_equal([1, 2], [2, 1])
    assert not strict_equal({"a": 1}, {"a": 1, "b": 2}) and not strict_equal(float("nan"), float("nan"))
    assert substantive({"a": [0, "x"]}) and not substantive({"a": [0, ""]}) and not substantive([])
    correct = {"a": [], "b": 3, "c": "x"}
    assert score(correct, {"a": [], "b": 4, "c": "y"}) == 0.0  # only a non-substantive one right
    assert score(correct, {"a": ["q"], "b": 3, "c": "y"}) == pytest.approx(1 / 3)
    assert score(correct, {**correct, "d": 1}) == 0.0
    for value in (0, 5, "", "s", [], ["a", "b"], {}, {"k": [1]}, [{"id": "c", "start": 0}]):
        changed = wrong(value)
        assert not strict_equal(changed, value)
        assert "true" not in json.dumps(changed) and "null" not in json.dumps(changed)


def test_suite_curriculum_matches_the_environment_catalog():
    from env.catalog import CASE_IDS
    from tests.curriculum import all_cases

    assert [c.id for c in all_cases()] == list(CASE_IDS)
    assert list(solvers.FAMILIES) == list(families.TASK_IDS)
