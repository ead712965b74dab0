"""The six grading rules of docs/spec/families.md, exercised with crafted answers."""

from __future__ import annotations

import copy
import math

import pytest

from env.families import TASK_IDS, grade, make_task
from env.families.grading import MAX_DEPTH, MAX_NODES, equal, substantive, well_formed

# A synthetic task: grade() reads only task["expected"].
TASK = {"expected": {"ids": ["a_1", "b_2"], "total": 7, "name": "ok", "map": {"x": [1, 2]}, "count": 0}}


def answer(**changes):
    result = copy.deepcopy(TASK["expected"])
    result.update(changes)
    return result


def nested(levels: int):
    """A value whose subtree is `levels` deep (a scalar is 1 deep)."""
    value = 1
    for _ in range(levels - 1):
        value = [value]
    return value


def test_exact_answer_scores_one():
    assert grade(TASK, answer()) == 1.0


@pytest.mark.parametrize("poison", [True, False, None])
@pytest.mark.parametrize(
    "where",
    [
        lambda a, p: a.update(total=p),
        lambda a, p: a["ids"].append(p),
        lambda a, p: a["map"].update(y=p),
        lambda a, p: a["map"]["x"].append([[p]]),
        lambda a, p: a.update(count=[{"deep": [p]}]),
    ],
    ids=["top", "in-list", "in-object", "deep-list", "in-wrong-component"],
)
def test_bool_or_null_anywhere_scores_zero(poison, where):
    a = answer()
    where(a, poison)
    assert grade(TASK, a) == 0.0


def test_bool_never_equals_a_number():
    assert not equal(True, 1) and not equal(1, True) and not equal(False, 0) and not equal(0.0, False)
    bool_task = {"expected": {"n": 1, "s": "x"}}
    assert grade(bool_task, {"n": True, "s": "x"}) == 0.0


def test_unknown_top_level_key_scores_zero():
    assert grade(TASK, answer(extra="x")) == 0.0
    assert grade(TASK, {"ids": ["a_1", "b_2"], "Total": 7}) == 0.0


@pytest.mark.parametrize("value", [[], "answer", 1, 1.5, None, True, [{"ids": ["a_1", "b_2"]}], {}])
def test_non_object_or_empty_answer_scores_zero(value):
    assert grade(TASK, value) == 0.0


def test_non_string_key_scores_zero():
    a = answer()
    a["map"] = {1: [1, 2]}
    assert grade(TASK, a) == 0.0
    assert grade(TASK, {**answer(), 5: "x"}) == 0.0


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_floats_score_zero(bad):
    assert grade(TASK, answer(count=bad)) == 0.0


def test_integral_float_equals_int_and_fraction_does_not():
    assert grade(TASK, answer(total=7.0)) == 1.0
    assert grade(TASK, answer(map={"x": [1.0, 2.0]})) == 1.0
    assert grade(TASK, answer(total=7.5)) == 0.8
    assert not equal(2.5, 2) and equal(2.0, 2) and equal(2, 2.0)
    assert not equal(2**53 + 1, float(2**53))


def test_objects_need_equal_key_sets_and_arrays_are_ordered():
    assert grade(TASK, answer(map={"x": [1, 2], "y": 0})) == 0.8
    assert grade(TASK, answer(map={})) == 0.8
    assert grade(TASK, answer(ids=["b_2", "a_1"])) == 0.8
    assert grade(TASK, answer(name="OK")) == 0.8
    assert grade(TASK, answer(total="7")) == 0.8


def test_partial_credit_is_fraction_capped_at_point_eight():
    # 4 of 5 correct -> 0.8; 2 of 5 -> 0.4; missing components count as wrong.
    assert grade(TASK, answer(total=8)) == pytest.approx(0.8)
    assert grade(TASK, {"ids": ["a_1", "b_2"], "total": 7}) == pytest.approx(0.4)
    wide = {"expected": {f"k{i}": i + 1 for i in range(10)}}
    nine = {f"k{i}": i + 1 for i in range(9)}
    assert grade(wide, nine) == 0.8
    assert grade(wide, {"k0": 1}) == pytest.approx(0.1)


@pytest.mark.parametrize("anchor", [0, "", [], {}, [0, ""], {"a": 0}, 0.0])
def test_only_non_substantive_correct_components_score_zero(anchor):
    task = {"expected": {"anchor": anchor, "real": 5, "other": ["x"]}}
    assert grade(task, {"anchor": anchor, "real": 6, "other": ["y"]}) == 0.0
    # One substantive correct component restores partial credit.
    assert grade(task, {"anchor": anchor, "real": 5, "other": ["y"]}) == pytest.approx(2 / 3)
    # ... and an all-correct answer is full marks even when some components are empty.
    assert grade(task, {"anchor": anchor, "real": 5, "other": ["x"]}) == 1.0


def test_substantive_definition():
    assert substantive("x") and substantive(-1) and substantive(0.5)
    assert substantive([[0, "a"]]) and substantive({"k": {"j": 3}})
    assert not substantive("") and not substantive(0) and not substantive([]) and not substantive({"key": 0})
    assert not substantive([[], {}, "", 0])


def test_depth_bound_is_twenty():
    task = {"expected": {"a": "x", "deep": nested(MAX_DEPTH - 1)}}
    # Root object = level 1, so a value MAX_DEPTH - 1 deep makes the whole answer MAX_DEPTH deep.
    assert grade(task, {"a": "x", "deep": nested(MAX_DEPTH - 1)}) == 1.0
    assert grade(task, {"a": "x", "deep": nested(MAX_DEPTH)}) == 0.0
    assert well_formed({"d": nested(MAX_DEPTH - 1)}) and not well_formed({"d": nested(MAX_DEPTH)})
    # Depth counts objects too.
    obj = "leaf"
    for _ in range(MAX_DEPTH - 1):
        obj = {"k": obj}
    assert well_formed(obj) and not well_formed({"k": obj})


def test_node_bound_is_2048():
    task = {"expected": {"a": "x", "b": []}}
    # Nodes: the root, "a", the list "b" and its items.
    assert grade(task, {"a": "x", "b": [0] * (MAX_NODES - 3)}) == 0.5
    assert grade(task, {"a": "x", "b": [0] * (MAX_NODES - 2)}) == 0.0
    assert well_formed({"b": [{"c": 1}] * ((MAX_NODES - 2) // 2)})
    assert not well_formed({"b": [{"c": 1}] * ((MAX_NODES - 2) // 2 + 1)})


def test_self_referencing_structure_is_refused_not_looped():
    loop: list = []
    loop.append(loop)
    assert grade(TASK, answer(ids=loop)) == 0.0


def test_grade_never_mutates_arguments():
    a = answer(total=9, extra_missing=None)
    del a["extra_missing"]
    before_task, before_answer = copy.deepcopy(TASK), copy.deepcopy(a)
    grade(TASK, a)
    assert TASK == before_task and a == before_answer


def _perturb(value):
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return value + ["zz_extra"]
    return {**value, "zz_extra": 1}


@pytest.mark.parametrize("family", TASK_IDS)
def test_each_component_graded_separately_on_real_tasks(family):
    for seed in (101, 307):
        task = make_task(family, seed, 2)
        expected = task["expected"]
        total = len(expected)
        for key in expected:
            wrong = {**copy.deepcopy(expected), key: _perturb(expected[key])}
            rest_substantive = any(substantive(expected[k]) for k in expected if k != key)
            want = min(0.8, (total - 1) / total) if rest_substantive else 0.0
            assert grade(task, wrong) == pytest.approx(want), (family, key)
            dropped = {k: v for k, v in expected.items() if k != key}
            assert grade(task, dropped) == pytest.approx(want), (family, key)
