"""Audit checks of the request: submission.json's tasks, budgets, images and fields against
release.toml and provenance.json, and what the request leaves out, in provenance.json (each
task's verification and both size measures, rebuilt from checks.json)."""

from __future__ import annotations

import json

from pipeline.audit.checks import load_suite
from pipeline.audit.rows import Rows, State, equal
from pipeline.config import REQUEST_BUDGET_FIELDS
from pipeline.errors import VerificationError
from pipeline.records import provenance as provenance_mod


def expected_task_order(cfg) -> list[tuple[str, str]]:
    """(task id, kind) in request order: each block of cases, then the external tasks after it."""
    order = []
    for number, block in enumerate(cfg.curriculum.blocks(), start=1):
        order += [(c.id, "procedural") for c in block]
        order += [(t.task_id, "external") for t in cfg.external.tasks if t.after_block == number]
    return order


def audit_submission(r: Rows, s: State) -> None:
    if s.sub is None or s.cfg is None:
        return
    order = expected_task_order(s.cfg)
    kinds = dict(order)
    r.run(
        "submission/tasks",
        "submission.json",
        lambda: equal(
            "task ids of submission.json, in request order", [t for t, _ in order], [t.task_id for t in s.sub.tasks]
        ),
    )

    def budgets() -> None:
        for t in s.sub.tasks:
            pinned = s.cfg.budgets.get(kinds.get(t.task_id, "procedural"))
            if pinned is None:
                raise VerificationError(f"release.toml has no [budgets.{kinds.get(t.task_id)}]")
            diff = sorted(k for k in REQUEST_BUDGET_FIELDS if t.budgets.get(k) != pinned.values[k])
            equal(
                f"budgets of task {t.task_id} ({', '.join(diff) or 'split'}) vs release.toml",
                {**{k: pinned.values[k] for k in diff}, "split": pinned.split},
                {**{k: t.budgets.get(k) for k in diff}, "split": t.split},
            )

    r.run("submission/budgets", "submission.json", budgets)

    def images() -> None:
        pinned = {t.task_id: t.image for t in s.cfg.external.tasks}
        built = s.sub.image
        if s.prov is not None and s.prov.image is not None:
            equal(
                "submission.json's image vs the image provenance.json records",
                f"{s.prov.image.name}@{s.prov.image.digest}",
                built,
            )
        for t in s.sub.tasks:
            equal(f"image of task {t.task_id}", pinned.get(t.task_id, built), t.image)

    r.run("submission/images", "submission.json", images)
    if s.plan is None or s.prov is None:
        r.not_checked(
            "submission/request", "submission.json", "provenance.json or the release statement's profile did not load"
        )
        return
    r.run("submission/request", "submission.json", lambda: _request_matches(s))


def _request_matches(s: State) -> None:
    """Everything else of the request = what release.toml, the released profile and provenance.json give:
    submission_id, dataset, name, source (the recorded commit), the one schema and the actions."""
    from pipeline.checks import schema as release_schema
    from pipeline.records import submission as submission_mod

    want = {
        "submission_id": s.plan.request.submission_id,
        "dataset": s.plan.request.dataset,
        "name": s.cfg.name,
        "source": submission_mod.source_at(s.cfg.source_url, s.prov.project.commit),
        "schema": release_schema.declared(),
        "example_actions": release_schema.example_actions(),
        "finish_action": release_schema.finish_action(),
    }
    got = {k: getattr(s.sub, k) for k in want}
    diff = [k for k in want if want[k] != got[k]]
    equal(
        f"{', '.join(diff) or 'fields'} of submission.json vs release.toml (profile {s.plan.profile}) and "
        "provenance.json's project commit",
        {k: want[k] for k in diff},
        {k: got[k] for k in diff},
    )


def audit_request_records(r: Rows, s: State) -> None:
    """What the request leaves out, in provenance.json: each task's verification and both size
    measures rebuilt from checks.json, the budgets = release.toml's tables."""
    if s.prov is None or s.cfg is None:
        return
    r.run(
        "provenance/budgets",
        "provenance.json",
        lambda: equal(
            "budgets of provenance.json vs release.toml's [budgets.*] tables",
            json.loads(json.dumps(provenance_mod.budgets_record(s.cfg.budgets))),
            s.prov.budgets,
        ),
    )
    if s.plan is None or s.sub is None:
        for cid in ("provenance/tasks", "provenance/sizes"):
            r.not_checked(cid, "provenance.json", "submission.json or the release statement's profile did not load")
        return
    r.run("provenance/tasks", "provenance.json", lambda: _tasks_match(s))
    r.run("provenance/sizes", "provenance.json", lambda: _sizes_match(s))


def _tasks_match(s: State) -> None:
    """provenance.json's per-task verification = rebuilt from checks.json, for submission.json's tasks."""
    from pipeline.records import verification

    rebuilt = verification.build(s.cfg, s.plan.external, load_suite(s), image=s.sub.image)
    equal(
        "tasks of provenance.json vs submission.json's (id and image, in request order)",
        [(t.task_id, t.image) for t in s.sub.tasks],
        [(t.task_id, t.image) for t in s.prov.tasks],
    )
    equal(
        "tasks of provenance.json vs release.toml's (id, image and kind, in request order)",
        [(t.task_id, t.image, t.kind) for t in rebuilt],
        [(t.task_id, t.image, t.kind) for t in s.prov.tasks],
    )
    for want, got in zip(rebuilt, s.prov.tasks):
        equal(
            f"verification of task {got.task_id} in provenance.json vs checks.json",
            want.verification.to_json(),
            got.verification.to_json(),
            hint="provenance.json claims what the checks did not show",
        )


def _sizes_match(s: State) -> None:
    """provenance.json's sizes = both measures of the manifests checks.json recorded."""
    from pipeline.records import sizes as sizes_mod

    rebuilt = sizes_mod.measure(sizes_mod.descriptors(load_suite(s), s.sub.image, s.cfg.external.tasks))
    equal(
        "sizes of provenance.json vs the manifests checks.json recorded",
        json.loads(json.dumps(rebuilt.to_json())),
        json.loads(json.dumps(s.prov.sizes.to_json())) if s.prov.sizes is not None else None,
    )
