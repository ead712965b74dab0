"""Audit checks of the external task records: provenance.json's against release.toml's pins,
and the records stored under vendor/external/ re-hashed."""

from __future__ import annotations

from pipeline.audit.rows import Rows, State, equal
from pipeline.errors import VerificationError
from pipeline.sources import dataset as external


def audit_external(r: Rows, s: State) -> None:
    if s.prov is None or s.cfg is None:
        return

    def records() -> None:
        pinned = {t.task_id: t for t in s.cfg.external.tasks}
        equal(
            "external task ids of provenance.json vs release.toml", list(pinned), [e.task_id for e in s.prov.external]
        )
        for rec in s.prov.external:
            task = pinned[rec.task_id]
            equal(f"image of external task {rec.task_id} vs release.toml", task.image, rec.image)
            _external_fields(s.cfg, task, rec)
            if rec.status == external.VERIFIED and not task.record_sha256:
                raise VerificationError(
                    f"external record {rec.task_id} is marked verified, but release.toml "
                    "pins no record_sha256 to verify it against",
                    expected="record_sha256 pinned",
                    actual=repr(task.record_sha256),
                )
            if rec.status != external.NOT_FETCHED and task.record_sha256:
                equal(f"sha256 of external record {rec.task_id} vs release.toml", task.record_sha256, rec.sha256)
                equal(f"row of external record {rec.task_id} vs release.toml", task.row, rec.row)
            if s.plan is not None and s.plan.external.required:
                equal(
                    f"status of external record {rec.task_id} (profile {s.plan.profile} requires it)",
                    external.VERIFIED,
                    rec.status,
                )
            external.check_stored(rec, s.root / "vendor")

    r.run("external/records", "vendor/external/", records)


def _external_fields(cfg, task, rec) -> None:
    """What an external record copies from release.toml (dataset, revision, split, budgets ...)."""
    ext, budgets = cfg.external, cfg.budgets["external"]
    want = {
        "dataset": ext.dataset,
        "revision": ext.revision,
        "subset": ext.subset,
        "split": task.split,
        "digest": task.digest,
        "compressed_bytes": task.compressed_bytes,
        "budget_split": budgets.split,
        "budgets": dict(budgets.values),
        "license": ext.license,
        "reference": task.reference,
    }
    diff = sorted(k for k, v in want.items() if getattr(rec, k) != v)
    equal(
        f"external record {rec.task_id} in provenance.json ({', '.join(diff)}) vs release.toml",
        {k: want[k] for k in diff},
        {k: getattr(rec, k) for k in diff},
    )
