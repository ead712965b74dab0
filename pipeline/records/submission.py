"""submission.json: the release request (pipeline.md stage 8).

Every task in request order (block 1, the first external task, block 2, block 3, the
second external task, block 4 — as `after_block` in release.toml says) with its image
by digest, split, declared budgets and verification status; the schema, example and
finish actions, the source revision; each image's compressed bytes and layer count and
the release total with layers shared between images counted once. Built only from
check results without a single failure: a failed check stops the release here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pipeline._io import pretty_json, write_atomic
from pipeline.checks import schema as release_schema
from pipeline.checks.cases import blocks
from pipeline.checks.external import ExternalResult
from pipeline.checks.results import SuiteResult
from pipeline.config import BUDGET_FIELDS, ExternalPolicy, ReleaseConfig
from pipeline.errors import CheckFailure, ConfigError, VerificationError

FORMAT = "openenv-arena-submission/v1"


@dataclass(frozen=True)
class Verification:
    status: str
    passed: int
    failed: int
    # External tasks whose image was started: the repair checks by outcome,
    # {"passed": [...], "failed": [...], "not_applicable": {check: reason}}.
    checks: dict[str, Any] | None = None


@dataclass(frozen=True)
class TaskEntry:
    task_id: str
    image: str
    split: str
    budgets: dict[str, int]
    verification: Verification


@dataclass(frozen=True)
class ImageEntry:
    image: str
    compressed_bytes: int
    layers: int | None  # None: the layer list could not be read (registry unreachable)
    layer_sizes_known: bool


@dataclass(frozen=True)
class Submission:
    name: str
    image: str
    schema: dict[str, Any]
    example_actions: list[dict[str, Any]]
    finish_action: dict[str, Any]
    source_revision: str
    tasks: tuple[TaskEntry, ...]
    images: tuple[ImageEntry, ...]
    total_compressed_bytes: int


def release_total(images: Iterable[Sequence[tuple[str, int]]]) -> int:
    """Compressed bytes of several images, each distinct layer digest counted once."""
    sizes: dict[str, int] = {}
    for layers in images:
        for digest, size in layers:
            if sizes.setdefault(digest, size) != size:
                raise VerificationError(f"layer {digest} is listed with two sizes",
                                        expected=sizes[digest], actual=size)
    return sum(sizes.values())


def _case_verification(checks: SuiteResult, case_id: str) -> Verification:
    """A case is verified by its own checks and the image's; the image's alone prove nothing
    about the case (a run that skipped it is not a pass)."""
    own = checks.for_prefix(case_id + "/")
    mine = own + checks.for_prefix("image/")
    failed = sum(not c.passed for c in mine)
    status = "verified" if own and not failed else "failed"
    return Verification(status, len(mine) - failed, failed)


def build(cfg: ReleaseConfig, policy: ExternalPolicy, checks: SuiteResult, *, image: str,
          source_revision: str) -> Submission:
    """Assemble the record; CheckFailure when any check failed or is missing."""
    if not checks.ok:
        failed = [c.id for c in checks.failures]
        raise CheckFailure("the check suite has failures: the release stops before submission.json",
                           expected="0 failed checks", actual=f"{len(failed)} failed: {', '.join(failed[:8])}",
                           hint="fix the image and run `python -m pipeline verify` again")
    if "@sha256:" not in image:
        raise ConfigError("the submitted image must be pinned by digest", actual=image)
    externals = {e["task_id"]: ExternalResult.from_json(e) for e in checks.external}
    unverified = [t.task_id for t in cfg.external.tasks
                  if t.task_id not in externals or not externals[t.task_id].fully_checked]
    if policy.required and unverified:
        raise CheckFailure(f"profile {policy.profile} requires every external task verified",
                           expected="verified", actual=f"not verified: {', '.join(unverified)}")
    procedural = cfg.budgets["procedural"]
    external_budgets = cfg.budgets["external"]
    tasks: list[TaskEntry] = []
    for number, block in enumerate(blocks(), start=1):
        for case in block:
            tasks.append(TaskEntry(case.id, image, procedural.split,
                                   {k: procedural.values[k] for k in BUDGET_FIELDS},
                                   _case_verification(checks, case.id)))
        for ext in (t for t in cfg.external.tasks if t.after_block == number):
            result = externals.get(ext.task_id)
            status = result.status if result else "not verified: not checked in this run"
            ran = result.outcomes() if result and result.checks else None
            verification = (Verification(status, len(ran["passed"]), len(ran["failed"]), ran) if ran
                            else Verification(status, 0, 0))
            # The request's split is the budgets table's: `ext.split` is the dataset split
            # that holds the task's record, which the platform never sees.
            tasks.append(TaskEntry(ext.task_id, ext.image, external_budgets.split,
                                   {k: external_budgets.values[k] for k in BUDGET_FIELDS}, verification))
    unchecked = [t.task_id for t in tasks if t.image == image and t.verification.status != "verified"]
    if unchecked:
        raise CheckFailure("some procedural cases have no checks of their own in this run",
                           expected="every case checked", actual=", ".join(unchecked[:8]),
                           hint="run the whole suite (a shard's record must be merged first)")
    images = [ImageEntry(image, sum(n for _, n in checks.layers), len(checks.layers), bool(checks.layers))]
    layer_lists: list[Sequence[tuple[str, int]]] = [checks.layers]
    unknown_sizes = 0
    for ext in cfg.external.tasks:
        result = externals.get(ext.task_id)
        if result and result.layers:
            images.append(ImageEntry(ext.image, result.compressed_bytes, len(result.layers), True))
            layer_lists.append(result.layers)
        else:
            # Without the layer list the declared size stands in; nothing can be deduplicated.
            images.append(ImageEntry(ext.image, ext.compressed_bytes, None, False))
            unknown_sizes += ext.compressed_bytes
    return Submission(
        name=cfg.name, image=image, schema=checks.schema or release_schema.declared(),
        example_actions=release_schema.example_actions(), finish_action=release_schema.finish_action(),
        source_revision=source_revision, tasks=tuple(tasks), images=tuple(images),
        total_compressed_bytes=release_total(layer_lists) + unknown_sizes,
    )


def to_json(sub: Submission) -> dict[str, Any]:
    out = asdict(sub)
    out["format"] = FORMAT
    out["tasks"] = [{**{k: v for k, v in asdict(t).items() if k != "budgets"}, **t.budgets}
                    for t in sub.tasks]
    for task in out["tasks"]:
        if task["verification"]["checks"] is None:
            # Procedural cases (and externals never started) carry counts only.
            del task["verification"]["checks"]
    return out


def write_submission(path: Path | str, sub: Submission) -> None:
    """Write submission.json atomically; refuses a record carrying any failed check."""
    bad = [t.task_id for t in sub.tasks if t.verification.failed or t.verification.status == "failed"]
    if bad:
        raise CheckFailure("refusing to write submission.json with failed checks",
                           expected="no failed checks", actual=", ".join(bad))
    write_atomic(Path(path), pretty_json(to_json(sub)))


def load(path: Path | str) -> Submission:
    """Read submission.json back into the typed record."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise VerificationError(f"{path} not found") from None
    if data.get("format") != FORMAT:
        raise VerificationError("not a submission record", expected=FORMAT, actual=data.get("format"))
    tasks = []
    for t in data["tasks"]:
        v = t["verification"]
        tasks.append(TaskEntry(t["task_id"], t["image"], t["split"], {k: t[k] for k in BUDGET_FIELDS},
                               Verification(v["status"], v["passed"], v["failed"], v.get("checks"))))
    return Submission(
        name=data["name"], image=data["image"], schema=data["schema"],
        example_actions=data["example_actions"], finish_action=data["finish_action"],
        source_revision=data["source_revision"], tasks=tuple(tasks),
        images=tuple(ImageEntry(**i) for i in data["images"]),
        total_compressed_bytes=data["total_compressed_bytes"],
    )
