"""submission.json is exactly the accepted request; the per-task verification it leaves out
(provenance.json) keeps request order and refuses a failed or missing check."""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import replace

import pytest

from pipeline import config, plan
from pipeline.checks import schema
from pipeline.checks.external import ExternalResult
from pipeline.checks.results import CheckResult, SuiteResult
from pipeline.errors import CheckFailure, VerificationError
from pipeline.records import submission, verification
from tests.curriculum import all_cases

IMAGE = "arena/openenv-data-workflows@sha256:" + "ab" * 32
COMMIT = "c" * 40
# The fields of the request the platform accepted (docs/spec/mimo.md), no more, no less.
REQUEST_KEYS = {
    "submission_id",
    "name",
    "image",
    "schema",
    "tasks",
    "example_actions",
    "finish_action",
    "dataset",
    "source",
}
TASK_KEYS = {
    "task_id",
    "image",
    "split",
    "reset_wall_s",
    "rollout_wall_s",
    "verifier_wall_s",
    "tool_wall_s",
    "tool_calls_total",
    "tool_calls_per_minute",
    "completion_tokens",
    "context_tokens",
    "memory_gib",
    "cpu_floor_vcpus",
    "workspace_gib",
}


def _layers(tag: str, count: int) -> tuple[tuple[str, int], ...]:
    return tuple(("sha256:" + hashlib.sha256(f"{tag}-{i}".encode()).hexdigest(), 1000 + i) for i in range(count))


def _checks(*, fail: str | None = None, external=True) -> SuiteResult:
    names = [
        "reset",
        "identity-across-seeds",
        "correct",
        "partial-x",
        "all-but-one",
        "wrong",
        "unknown-key",
        "edited-inputs",
        "cached-terminal",
    ]
    checks = [CheckResult(f"image/{n}", True, 0.1) for n in ("health", "schema", "openenv-validate", "uid")]
    checks += [CheckResult(f"{c.id}/{n}", f"{c.id}/{n}" != fail, 0.1) for c in all_cases() for n in names]
    cfg = config.load()
    ext = []
    if external:
        ext = [
            ExternalResult(
                task_id=t.task_id,
                image=t.image,
                config_digest="sha256:" + "c" * 64,
                config_size=900,
                layers=_layers(t.task_id, 6),
            ).to_json()
            for t in cfg.external.tasks
        ]
    return SuiteResult(
        image=IMAGE,
        targets=("http://127.0.0.1:1",),
        checks=tuple(checks),
        seconds=1.0,
        schema=schema.declared(),
        external=tuple(ext),
        layers=_layers("derived", 5),
        config=("sha256:" + "d" * 64, 800),
    )


def _request(profile: str = "local") -> submission.Request:
    cfg = config.load()
    # The local policy: the stand-in external results ran no repair checks.
    tasks = verification.build(cfg, plan.resolve(cfg, "local").external, _checks(), image=IMAGE)
    return submission.build(cfg, plan.resolve(cfg, profile).request, tasks, image=IMAGE, source_revision=COMMIT)


def test_the_request_has_exactly_the_accepted_fields(tmp_path):
    path = tmp_path / "submission.json"
    submission.write_submission(path, _request())
    data = json.loads(path.read_text())
    assert set(data) == REQUEST_KEYS
    assert all(set(t) == TASK_KEYS for t in data["tasks"])
    assert data["finish_action"] == {"operation": "finish"}
    assert data["schema"] == schema.declared()
    assert data["source"] == f"https://github.com/akseljoonas/openenv-arena-release/tree/{COMMIT}"
    assert (data["submission_id"], data["dataset"]) == ("openenv-data-workflows-local", "arena/openenv-data-workflows")
    assert submission.load(path) == _request()


def test_the_arena_request_names_the_seeds_dataset():
    arena = _request("arena")
    assert (arena.submission_id, arena.dataset) == ("openenv-data-workflows-v1", "akseljoonas/mimo-openenv-software")


def test_tasks_in_request_order_with_the_budgets_tables_split_and_workspace_10():
    req = _request()
    ids = [t.task_id for t in req.tasks]
    cases = [c.id for c in all_cases()]
    assert ids == cases[:8] + ["format-code-task-000666"] + cases[8:24] + ["format-code-task-001926"] + cases[24:]
    first, ext = req.tasks[0], req.tasks[8]
    assert first.image == IMAGE and ext.image.startswith("ghcr.io/")
    assert first.budgets["tool_calls_total"] == 16 and ext.budgets["rollout_wall_s"] == 1200
    # 10 GiB everywhere: the platform refused 44 with 422 ENVIRONMENT_TOO_LARGE_FOR_SANDBOX.
    assert {t.budgets["workspace_gib"] for t in req.tasks} == {10}
    # The request's split is the budgets table's ("train"), never the dataset split of a record.
    cfg = config.load()
    assert {t.split for t in req.tasks} == {cfg.budgets["procedural"].split, cfg.budgets["external"].split} == {"train"}
    assert {t.split for t in cfg.external.tasks} == {"code"}
    assert "observation_tokens" not in first.budgets


@pytest.mark.parametrize(
    "forge",
    [
        lambda d: d.update(format="openenv-arena-submission/v1"),
        lambda d: d.pop("source"),
        lambda d: d["tasks"][8].update(observation_tokens=32768),
        lambda d: d["tasks"][8].pop("workspace_gib"),
        lambda d: d["tasks"][3].update(verification={"status": "verified"}),
        lambda d: d.update(finish_action={"operation": "finish", "command": ""}),
        lambda d: d.update(source="https://github.com/akseljoonas/openenv-arena-release"),
        lambda d: d.update(image="arena/openenv-data-workflows:latest"),
        lambda d: d["tasks"][0].update(workspace_gib="10"),
    ],
    ids=[
        "extra-field",
        "no-source",
        "task-extra-field",
        "task-missing-budget",
        "task-verification",
        "finish-with-command",
        "source-without-commit",
        "image-by-tag",
        "budget-as-string",
    ],
)
def test_the_contract_refuses_any_other_shape(tmp_path, forge):
    data = submission.to_json(_request())
    submission.validate(data)
    forged = copy.deepcopy(data)
    forge(forged)
    with pytest.raises(VerificationError, match="not the request the platform accepts"):
        submission.validate(forged)
    path = tmp_path / "submission.json"
    path.write_text(json.dumps(forged))
    with pytest.raises(VerificationError):
        submission.load(path)


def test_the_writer_refuses_a_request_that_breaks_the_contract(tmp_path):
    bad = replace(_request(), source="not a url")
    path = tmp_path / "submission.json"
    with pytest.raises(VerificationError, match="source"):
        submission.write_submission(path, bad)
    assert not path.exists()


def test_a_single_failed_check_stops_the_release():
    cfg = config.load()
    failing = _checks(fail="math_route-d2-s307/wrong")
    with pytest.raises(CheckFailure, match="math_route-d2-s307/wrong"):
        verification.build(cfg, plan.resolve(cfg, "local").external, failing, image=IMAGE)


def test_a_case_whose_own_checks_did_not_run_is_not_verified():
    """The image's checks alone say nothing about a case: a run that skipped it fails it."""
    cfg = config.load()
    whole = _checks()
    skipped = replace(whole, checks=tuple(c for c in whole.checks if not c.id.startswith("math_route-d2-s307/")))
    with pytest.raises(CheckFailure, match="math_route-d2-s307"):
        verification.build(cfg, plan.resolve(cfg, "local").external, skipped, image=IMAGE)


def test_unverified_external_tasks_local_carries_on_arena_refuses():
    cfg = config.load()
    offline = _checks(external=False)
    tasks = verification.build(cfg, plan.resolve(cfg, "local").external, offline, image=IMAGE)
    ext = [t for t in tasks if t.kind == verification.EXTERNAL]
    assert [t.task_id for t in ext] == ["format-code-task-000666", "format-code-task-001926"]
    assert all(t.verification.status.startswith("not verified") for t in ext)
    with pytest.raises(CheckFailure, match="requires every external task verified"):
        verification.build(cfg, plan.resolve(cfg, "arena").external, offline, image=IMAGE)


def test_task_records_round_trip():
    cfg = config.load()
    tasks = verification.build(cfg, plan.resolve(cfg, "local").external, _checks(), image=IMAGE)
    assert tuple(verification.TaskRecord.from_json(json.loads(json.dumps(t.to_json()))) for t in tasks) == tasks
