"""release.toml's [curriculum] (pipeline/curriculum.py): the default is the seed's 32 cases in
the seed's order; anything the task modules cannot serve is refused with what is valid and
where the limit comes from; the image's env layer carries the declared cases, never a
checkout's own file."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from pipeline import config
from pipeline.curriculum import CURRICULUM_PATH, TASK_FAMILIES, Case, Curriculum
from pipeline.errors import ConfigError
from pipeline.image import payload

REPO = Path(__file__).resolve().parents[1]
TEXT = (REPO / "release.toml").read_text()
DEFAULT_TABLE = re.search(r"(?ms)^\[curriculum\]\n.*?^blocks = .*?\n", TEXT)[0]


def with_curriculum(tmp_path: Path, table: str, text: str = TEXT) -> Path:
    path = tmp_path / "release.toml"
    path.write_text(text.replace(DEFAULT_TABLE, table, 1))
    return path


def table(families=TASK_FAMILIES, difficulties=(1, 2), seeds=(101, 307), blocks="difficulty-seed") -> str:
    return (
        f"[curriculum]\nfamilies = {json.dumps(list(families))}\ndifficulties = {list(difficulties)}\n"
        f"seeds = {list(seeds)}\nblocks = {json.dumps(blocks)}\n"
    )


def refused(tmp_path: Path, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        config.load(with_curriculum(tmp_path, text))
    return err.value


def test_the_default_is_the_seed_requests_32_cases_and_34_tasks_in_its_order():
    cfg = config.load()
    cases = [c.id for c in cfg.curriculum.cases]
    assert len(cases) == 32 and cases[:2] == ["software_change-d1-s101", "industrial_schedule-d1-s101"]
    assert cases[-1] == "media_timeline-d2-s307"
    # The request's order: each block, then the external tasks after it (verification.build's,
    # the audit's): the committed submission.json's order, task for task.
    from pipeline.audit.submission import expected_task_order

    committed = [t["task_id"] for t in json.loads((REPO / "submission.json").read_text())["tasks"]]
    assert [task for task, _ in expected_task_order(cfg)] == committed and len(committed) == 34


def test_a_block_is_one_case_per_family_in_the_declared_order():
    declared = Curriculum(("math_route", "finance_ledger"), (3, 1), (202, 5))
    assert [[c.id for c in b] for b in declared.blocks()] == [
        ["math_route-d3-s202", "finance_ledger-d3-s202"],
        ["math_route-d3-s5", "finance_ledger-d3-s5"],
        ["math_route-d1-s202", "finance_ledger-d1-s202"],
        ["math_route-d1-s5", "finance_ledger-d1-s5"],
    ]
    assert Case.parse("math_route-d3-s202") == Case("math_route", 3, 202)


def test_difficulty_3_is_accepted_as_both_task_modules_serve_it(tmp_path):
    cfg = config.load(with_curriculum(tmp_path, table(("math_route",), (1, 2, 3), (101, 202))))
    assert [c.id for c in cfg.curriculum.cases][-1] == "math_route-d3-s202"


def test_an_unknown_family_is_refused_listing_the_eight(tmp_path):
    err = refused(tmp_path, table(("math_route", "math_routes")))
    # The message names the file it read (the one given, never a hard-coded release.toml).
    assert (
        err.what == f"{tmp_path / 'release.toml'}: curriculum.families holds 'math_routes', which no task module serves"
    )
    assert err.expected == "one of " + ", ".join(TASK_FAMILIES) and err.actual == "math_routes"
    assert err.hint.startswith("did you mean 'math_route'? ")
    assert "vendored under vendor/" in err.hint and "env/families" in err.hint


@pytest.mark.parametrize("difficulty", [0, 4])
def test_an_unsupported_difficulty_is_refused_saying_where_the_limit_comes_from(tmp_path, difficulty):
    err = refused(tmp_path, table(difficulties=(1, difficulty)))
    assert err.expected == "one of 1, 2, 3" and err.actual == difficulty
    assert "upstream task generator vendored under vendor/" in err.hint
    assert "first-party families in env/families" in err.hint and "1, 2 and 3" in err.hint


@pytest.mark.parametrize(
    "key, values, repeated",
    [
        ("families", ("math_route", "finance_ledger", "math_route"), "'math_route'"),
        ("difficulties", (2, 2), "2"),
        ("seeds", (101, 307, 101), "101"),
    ],
)
def test_a_repeated_case_is_refused(tmp_path, key, values, repeated):
    err = refused(tmp_path, table(**{key: values}))
    assert err.what.startswith(
        f"{tmp_path / 'release.toml'}: curriculum.{key} repeats {repeated}, which would repeat its cases"
    )
    assert err.actual == list(values)


@pytest.mark.parametrize(
    "text, says",
    [
        (table(seeds=(101, -1)), "a negative seed"),
        (table(families=()), "curriculum.families is empty"),
        (table(blocks="seed-difficulty"), "names no block order"),
        (table(difficulties=("1",)), "an array of whole numbers"),
    ],
)
def test_other_bad_values_are_refused(tmp_path, text, says):
    assert says in refused(tmp_path, text).one_line()


def test_an_after_block_past_the_last_block_is_refused(tmp_path):
    # 2 blocks: the second external task (after block 3) follows none.
    err = refused(tmp_path, table(seeds=(101,)))
    assert err.what.startswith(
        f"{tmp_path / 'release.toml'}: external.tasks[1].after_block "
        "(format-code-task-001926) names no block of the curriculum, which has 2"
    )
    assert err.expected == "a block from 1 to 2" and err.actual == 3
    assert config.load(with_curriculum(tmp_path, table(seeds=(101, 202)))).curriculum.blocks()[3]


def test_without_curriculum_the_file_loads_and_a_release_is_refused(tmp_path):
    """An older commit's release.toml (reproduce reads it) has none: it loads, serves no file."""
    cfg = config.load(with_curriculum(tmp_path, ""))
    assert cfg.declared_curriculum is None and config.curriculum_file(cfg) is None
    with pytest.raises(ConfigError, match=r"has no \[curriculum\]"):
        cfg.curriculum  # noqa: B018


def test_the_env_layer_carries_the_declared_cases_and_never_a_checkouts_file(tmp_path):
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO / "env", checkout / "env", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "LICENSE", checkout / "LICENSE")
    (checkout / CURRICULUM_PATH).write_bytes(Curriculum(("finance_ledger",), (1,), (1,)).file_bytes())
    declared = Curriculum(("math_route",), (3,), (202,))
    layers = payload.app_layers(checkout, "/opt/arena", None, declared.file_bytes())
    entries = {e.path: e for e in layers[0].entries}
    assert layers[0].name == "env"
    assert entries[f"opt/arena/{CURRICULUM_PATH}"].source == declared.file_bytes()
    assert not payload.packed(CURRICULUM_PATH, first_party_tasks=True)
    # An older commit's release.toml: no file, as its image had none.
    older = payload.app_layers(checkout, "/opt/arena", None, None)
    assert f"opt/arena/{CURRICULUM_PATH}" not in {e.path for e in older[0].entries}
