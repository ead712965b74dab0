"""The curriculum the server serves (env/catalog.py): the cases of the curriculum file the
release writes from release.toml's [curriculum], and their IDs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from env import catalog, families
from env.catalog import CASE_IDS, CASES, Case, case_id, load_cases, make_case, parse_case_id
from pipeline.curriculum import Curriculum

REPO = Path(__file__).resolve().parents[2]


def test_the_default_curriculum_is_families_md_32_cases_in_four_blocks_of_eight():
    assert len(CASES) == 32 and len(set(CASE_IDS)) == 32
    blocks = [CASES[i : i + 8] for i in range(0, 32, 8)]
    for block, (difficulty, seed) in zip(blocks, [(1, 101), (1, 307), (2, 101), (2, 307)]):
        assert [c.family for c in block] == families.TASK_IDS
        assert {(c.difficulty, c.seed) for c in block} == {(difficulty, seed)}


def test_case_id_format_and_round_trip():
    assert case_id("software_change", 1, 101) == "software_change-d1-s101"
    assert CASE_IDS[0] == "software_change-d1-s101" and CASE_IDS[-1] == "media_timeline-d2-s307"
    for case in CASES:
        assert parse_case_id(case.id) == case
        assert case.id == f"{case.family}-d{case.difficulty}-s{case.seed}"


@pytest.mark.parametrize(
    "bad", ["software_change-d3-s101", "software_change-d1-s102", "nope-d1-s101", "", None, "software_change"]
)
def test_unknown_case_id_lists_valid_ids(bad):
    with pytest.raises(ValueError) as caught:
        parse_case_id(bad)
    assert all(valid in str(caught.value) for valid in CASE_IDS)


def test_make_case_uses_the_given_module():
    case = parse_case_id("math_route-d2-s307")
    assert make_case(families, case) == families.make_task("math_route", 307, 2)
    calls = []
    stub = types.SimpleNamespace(TASK_IDS=["math_route"], make_task=lambda *args: calls.append(args) or {"ok": 1})
    assert make_case(stub, case) == {"ok": 1} and calls == [("math_route", 307, 2)]
    with pytest.raises(ValueError):
        make_case(stub, Case("software_change", 1, 101))


def test_every_case_generates_and_its_oracle_scores_full():
    for case in CASES:
        task = make_case(families, case)
        assert families.grade(task, families.oracle_answer(task)) == 1.0


def test_the_first_party_families_serve_difficulty_3_as_the_upstream_generator_does():
    """[curriculum] may declare difficulty 3 (the upstream make_task accepts 1, 2, 3): the
    first-party module generates it and its oracle solves it; 4 is refused, as upstream."""
    for family in families.TASK_IDS:
        task = families.make_task(family, 202, 3)
        assert families.grade(task, families.oracle_answer(task)) == 1.0
    with pytest.raises(ValueError, match="1, 2 or 3"):
        families.make_task("math_route", 202, 4)


def test_the_file_the_release_writes_is_the_file_the_catalog_reads(tmp_path):
    declared = Curriculum(("math_route", "media_timeline"), (3, 1), (202,))
    path = tmp_path / "curriculum.json"
    path.write_bytes(declared.file_bytes())
    assert (
        [c.id for c in load_cases(path)]
        == [c.id for c in declared.cases]
        == ["math_route-d3-s202", "media_timeline-d3-s202", "math_route-d1-s202", "media_timeline-d1-s202"]
    )


@pytest.mark.parametrize(
    "text, says",
    [
        (None, "no curriculum file"),
        ("{", "not readable JSON"),
        ('{"cases": []}', "non-empty list"),
        ('{"case": [{"family": "math_route", "difficulty": 1, "seed": 1}]}', "non-empty list"),
        ('{"cases": [{"family": "math_route", "difficulty": "1", "seed": 1}]}', "exactly family"),
        ('{"cases": [{"family": "math_route", "difficulty": 1, "seed": true}]}', "exactly family"),
        ('{"cases": [{"family": "math_route", "difficulty": 1, "seed": 1, "x": 0}]}', "exactly family"),
        (
            '{"cases": [{"family": "math_route", "difficulty": 1, "seed": 1},'
            ' {"family": "math_route", "difficulty": 1, "seed": 1}]}',
            "repeats case(s) math_route-d1-s1",
        ),
    ],
)
def test_a_broken_curriculum_file_is_refused(tmp_path, text, says):
    path = tmp_path / "curriculum.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        load_cases(path)


def _served_ids(tmp_path: Path, environ: dict[str, str]) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", "import json, env.catalog as c; print(json.dumps(c.CASE_IDS))"],
        cwd=tmp_path,
        env={**environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_image_file_beside_the_catalog_wins_and_a_checkout_needs_one(tmp_path):
    """In the image, curriculum.json beside the catalog is what is served, whatever
    ARENA_CURRICULUM says; without it (a checkout) the variable's file is, and with
    neither the catalog refuses to load."""
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "catalog.py").write_bytes(Path(catalog.__file__).read_bytes())
    (tmp_path / "env" / "__init__.py").write_text("")
    other = tmp_path / "other.json"
    other.write_bytes(Curriculum(("finance_ledger",), (2,), (5,)).file_bytes())
    environ = {k: v for k, v in os.environ.items() if k != catalog.CURRICULUM_VARIABLE}
    assert _served_ids(tmp_path, {**environ, catalog.CURRICULUM_VARIABLE: str(other)}) == ["finance_ledger-d2-s5"]
    (tmp_path / "env" / "curriculum.json").write_bytes(Curriculum(("math_route",), (1,), (7,)).file_bytes())
    assert _served_ids(tmp_path, {**environ, catalog.CURRICULUM_VARIABLE: str(other)}) == ["math_route-d1-s7"]
    (tmp_path / "env" / "curriculum.json").unlink()
    proc = subprocess.run(
        [sys.executable, "-c", "import env.catalog"],
        cwd=tmp_path,
        env={**environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and "no curriculum file" in proc.stderr and "ARENA_CURRICULUM" in proc.stderr
