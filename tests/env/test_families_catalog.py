"""The 32-case curriculum (docs/spec/families.md, "The curriculum") and its case IDs."""

from __future__ import annotations

import types

import pytest

from env import catalog, families
from env.catalog import CASE_IDS, CASES, Case, case_id, make_case, parse_case_id


def test_thirty_two_cases_in_four_blocks_of_eight():
    assert len(CASES) == 32 and len(set(CASE_IDS)) == 32
    blocks = [CASES[i : i + 8] for i in range(0, 32, 8)]
    for block, (difficulty, seed) in zip(blocks, [(1, 101), (1, 307), (2, 101), (2, 307)]):
        assert [c.family for c in block] == families.TASK_IDS
        assert {(c.difficulty, c.seed) for c in block} == {(difficulty, seed)}


def test_family_order_is_the_spec_order_of_the_module():
    assert list(catalog.FAMILY_ORDER) == families.TASK_IDS


def test_case_id_format_and_round_trip():
    assert case_id("software_change", 1, 101) == "software_change-d1-s101"
    assert CASE_IDS[0] == "software_change-d1-s101" and CASE_IDS[-1] == "media_timeline-d2-s307"
    for case in CASES:
        assert parse_case_id(case.id) == case
        assert case.id == f"{case.family}-d{case.difficulty}-s{case.seed}"


@pytest.mark.parametrize("bad", ["software_change-d3-s101", "software_change-d1-s102", "nope-d1-s101", "", None,
                                 "software_change"])
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
