"""What the check suite showed about each task of the request, in request order.

Every task (block 1, the first external task, block 2, block 3, the second external
task, block 4, as `after_block` in release.toml says) with its image by digest and its
verification: a procedural case by its own checks and the image's, an external task by
the repair checks of its started image (or "not verified: <reason>"). The request
(submission.json) carries none of this; provenance.json and the report do, bound by the
signed release statement. Built only from check results without a single failure: a
failed check stops the release here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from pipeline.config import ExternalPolicy, ReleaseConfig
from pipeline.errors import CheckFailure, ConfigError
from pipeline.imageref import ImageRef

if TYPE_CHECKING:  # the check suite's modules load the OpenEnv client: only `build` needs them
    from pipeline.checks.external import ExternalResult
    from pipeline.checks.results import SuiteResult

PROCEDURAL, EXTERNAL = "procedural", "external"


@dataclass(frozen=True)
class Verification:
    status: str
    passed: int
    failed: int
    # External tasks whose image was started: the repair checks by outcome,
    # {"passed": [...], "failed": [...], "not_applicable": {check: reason}}.
    checks: dict[str, Any] | None = None

    @property
    def verified(self) -> bool:
        return self.status == "verified"

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if self.checks is None:
            # Procedural cases (and externals never started) carry counts only.
            del out["checks"]
        return out


@dataclass(frozen=True)
class TaskRecord:
    """One task of the request: its id, image, kind (`procedural` or `external`, the
    [budgets.<kind>] it takes) and verification."""

    task_id: str
    image: str
    kind: str
    verification: Verification

    def to_json(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "image": self.image,
            "kind": self.kind,
            "verification": self.verification.to_json(),
        }

    @classmethod
    def from_json(cls, data: Any) -> TaskRecord:
        if not isinstance(data, dict) or set(data) != {"task_id", "image", "kind", "verification"}:
            raise ConfigError(
                "a task record is malformed",
                expected=["image", "kind", "task_id", "verification"],
                actual=sorted(data) if isinstance(data, dict) else type(data).__name__,
            )
        v = data["verification"]
        return cls(
            data["task_id"],
            data["image"],
            data["kind"],
            Verification(v["status"], v["passed"], v["failed"], v.get("checks")),
        )


def _case_verification(checks: SuiteResult, case_id: str) -> Verification:
    """A case is verified by its own checks and the image's; the image's alone prove nothing
    about the case (a run that skipped it is not a pass)."""
    own = checks.for_prefix(case_id + "/")
    mine = own + checks.for_prefix("image/")
    failed = sum(not c.passed for c in mine)
    status = "verified" if own and not failed else "failed"
    return Verification(status, len(mine) - failed, failed)


def _external_verification(result: ExternalResult | None) -> Verification:
    status = result.status if result else "not verified: not checked in this run"
    ran = result.outcomes() if result and result.checks else None
    if ran:
        return Verification(status, len(ran["passed"]), len(ran["failed"]), ran)
    return Verification(status, 0, 0)


def build(cfg: ReleaseConfig, policy: ExternalPolicy, checks: SuiteResult, *, image: str) -> tuple[TaskRecord, ...]:
    """Every task in request order; CheckFailure when any check failed or is missing."""
    from pipeline.checks.external import ExternalResult

    if not checks.ok:
        failed = [c.id for c in checks.failures]
        raise CheckFailure(
            "the check suite has failures: the release stops before submission.json",
            expected="0 failed checks",
            actual=f"{len(failed)} failed: {', '.join(failed[:8])}",
            hint="fix the image and run `python -m pipeline verify` again",
        )
    ImageRef.parse(image, pinned=True)  # the submitted image is pinned by digest
    externals = {e["task_id"]: ExternalResult.from_json(e) for e in checks.external}
    unverified = [
        t.task_id for t in cfg.external.tasks if t.task_id not in externals or not externals[t.task_id].fully_checked
    ]
    if policy.required and unverified:
        raise CheckFailure(
            f"profile {policy.profile} requires every external task verified",
            expected="verified",
            actual=f"not verified: {', '.join(unverified)}",
        )
    tasks: list[TaskRecord] = []
    for number, block in enumerate(cfg.curriculum.blocks(), start=1):
        tasks += [TaskRecord(case.id, image, PROCEDURAL, _case_verification(checks, case.id)) for case in block]
        tasks += [
            TaskRecord(ext.task_id, ext.image, EXTERNAL, _external_verification(externals.get(ext.task_id)))
            for ext in cfg.external.tasks
            if ext.after_block == number
        ]
    unchecked = [t.task_id for t in tasks if t.kind == PROCEDURAL and not t.verification.verified]
    if unchecked:
        raise CheckFailure(
            "some procedural cases have no checks of their own in this run",
            expected="every case checked",
            actual=", ".join(unchecked[:8]),
            hint="run the whole suite (a shard's record must be merged first)",
        )
    failed = [t.task_id for t in tasks if t.verification.failed]
    if failed:
        raise CheckFailure(
            "tasks with failed checks cannot be requested", expected="no failed checks", actual=", ".join(failed)
        )
    return tuple(tasks)
