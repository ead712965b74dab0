"""submission.json: request order, budgets, sizes with shared layers once, refusal on failure."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import pytest

from pipeline import config, plan
from pipeline.records import submission
from pipeline.checks import schema
from pipeline.checks.cases import all_cases
from pipeline.checks.external import ExternalResult
from pipeline.checks.results import CheckResult, SuiteResult
from pipeline.errors import CheckFailure

IMAGE = "127.0.0.1:5000/arena/openenv-data-workflows@sha256:" + "ab" * 32
# The seed's published figures (pipeline.md): 000666 is 6 layers and 573,951,843 bytes,
# 001926 is 911,121,444 bytes; the derived image reuses all of 000666's layers.
BASE_BYTES, BASE_LAYERS = 573_951_843, 6
OTHER_BYTES, OTHER_LAYERS = 911_121_444, 9
DERIVED_NEW_BYTES = 16_854


def _layers(tag: str, total: int, count: int) -> list[tuple[str, int]]:
    """`count` made-up layers summing to `total` (the real per-layer split is not known)."""
    sizes = [total // count] * count
    sizes[-1] += total - sum(sizes)
    return [("sha256:" + hashlib.sha256(f"{tag}-{i}".encode()).hexdigest(), s) for i, s in enumerate(sizes)]


BASE = _layers("000666", BASE_BYTES, BASE_LAYERS)
OTHER = _layers("001926", OTHER_BYTES, OTHER_LAYERS)
DERIVED = BASE + _layers("derived", DERIVED_NEW_BYTES, 3)


def test_release_total_reproduces_the_seed_figure():
    total = submission.release_total([DERIVED, BASE, OTHER])
    assert total == 1_485_090_141
    # Counting every image on its own would count the shared base twice.
    assert sum(s for layers in (DERIVED, BASE, OTHER) for _, s in layers) == total + BASE_BYTES


def test_release_total_refuses_one_digest_with_two_sizes():
    digest = BASE[0][0]
    with pytest.raises(Exception, match="two sizes"):
        submission.release_total([[(digest, 1)], [(digest, 2)]])


def _checks(*, fail: str | None = None, external=True) -> SuiteResult:
    names = ["reset", "identity-across-seeds", "correct", "partial-x", "all-but-one", "wrong",
             "unknown-key", "edited-inputs", "cached-terminal"]
    checks = [CheckResult(f"image/{n}", True, 0.1) for n in ("health", "schema", "uid", "timeout")]
    checks += [CheckResult(f"{c.id}/{n}", f"{c.id}/{n}" != fail, 0.1) for c in all_cases() for n in names]
    cfg = config.load()
    ext = []
    if external:
        by_id = {t.task_id: t for t in cfg.external.tasks}
        ext = [ExternalResult(task_id=t, image=by_id[t].image, layers=tuple(layers)).to_json()
               for t, layers in (("format-code-task-000666", BASE), ("format-code-task-001926", OTHER))]
    return SuiteResult(image=IMAGE, targets=("http://127.0.0.1:1",), checks=tuple(checks), seconds=1.0,
                       schema=schema.declared(), external=tuple(ext), layers=tuple(DERIVED))


def test_tasks_in_request_order_with_budgets_and_sizes(tmp_path):
    cfg = config.load()
    sub = submission.build(cfg, plan.resolve(cfg, "local").external, _checks(), image=IMAGE, source_revision="c" * 40)
    ids = [t.task_id for t in sub.tasks]
    cases = [c.id for c in all_cases()]
    assert len(ids) == 34
    assert ids == cases[:8] + ["format-code-task-000666"] + cases[8:24] + ["format-code-task-001926"] + cases[24:]
    first, ext = sub.tasks[0], sub.tasks[8]
    assert first.image == IMAGE and first.split == "train" and first.verification.status == "verified"
    assert first.budgets["tool_calls_total"] == 16 and first.budgets["workspace_gib"] == 10
    assert ext.image.startswith("ghcr.io/") and ext.budgets["rollout_wall_s"] == 1200
    assert ext.budgets["workspace_gib"] == 44 and ext.verification.status == "verified"
    # The request's split is the budgets table's, not the dataset split of the record ("code").
    assert ext.split == "train" and config.load().external.tasks[0].split == "code"
    assert sub.total_compressed_bytes == 1_485_090_141
    assert [(i.compressed_bytes, i.layers) for i in sub.images] == [
        (BASE_BYTES + DERIVED_NEW_BYTES, 9), (BASE_BYTES, 6), (OTHER_BYTES, 9)]

    path = tmp_path / "submission.json"
    submission.write_submission(path, sub)
    data = json.loads(path.read_text())
    published = {"task_id", "image", "split", *config.BUDGET_FIELDS, "verification"}
    assert set(data["tasks"][0]) == published
    assert data["finish_action"] == {"operation": "finish"}
    assert data["schema"]["action"]["properties"]["operation"]["enum"] == ["shell", "finish"]
    assert submission.load(path) == sub


def test_a_single_failed_check_stops_the_release(tmp_path):
    cfg = config.load()
    failing = _checks(fail="math_route-d2-s307/wrong")
    with pytest.raises(CheckFailure, match="math_route-d2-s307/wrong"):
        submission.build(cfg, plan.resolve(cfg, "local").external, failing, image=IMAGE, source_revision="c" * 40)
    # Even a record assembled by other means is refused at the writer.
    good = submission.build(cfg, plan.resolve(cfg, "local").external, _checks(), image=IMAGE, source_revision="c" * 40)
    bad_task = good.tasks[3].__class__(**{**good.tasks[3].__dict__,
                                          "verification": submission.Verification("failed", 10, 1)})
    forged = submission.Submission(**{**good.__dict__, "tasks": (bad_task, *good.tasks[4:])})
    path = tmp_path / "submission.json"
    with pytest.raises(CheckFailure):
        submission.write_submission(path, forged)
    assert not path.exists()


def test_a_case_whose_own_checks_did_not_run_is_not_verified():
    """The image's checks alone say nothing about a case: a run that skipped it fails it."""
    cfg = config.load()
    whole = _checks()
    skipped = replace(whole, checks=tuple(c for c in whole.checks if not c.id.startswith("math_route-d2-s307/")))
    with pytest.raises(CheckFailure, match="math_route-d2-s307"):
        submission.build(cfg, plan.resolve(cfg, "local").external, skipped, image=IMAGE, source_revision="c" * 40)


def test_unverified_external_tasks_local_carries_on_arena_refuses():
    cfg = config.load()
    offline = _checks(external=False)
    sub = submission.build(cfg, plan.resolve(cfg, "local").external, offline, image=IMAGE, source_revision="c" * 40)
    ext = [t for t in sub.tasks if t.task_id.startswith("format-code")]
    assert all(t.verification.status.startswith("not verified") for t in ext)
    # Without layer lists nothing can be deduplicated: declared sizes are added.
    assert sub.total_compressed_bytes == BASE_BYTES + DERIVED_NEW_BYTES + BASE_BYTES + OTHER_BYTES
    with pytest.raises(CheckFailure, match="requires every external task verified"):
        submission.build(cfg, plan.resolve(cfg, "arena").external, offline, image=IMAGE, source_revision="c" * 40)
