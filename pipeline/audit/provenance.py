"""Audit checks of content: submission.json's tasks, provenance against the pins, vendored files
and external records, the SBOM against the image, checks.json against its statement (the
registry's referrers: pipeline.audit.registry)."""

from __future__ import annotations

import functools
import json
import tempfile
from dataclasses import asdict
from pathlib import Path

from pipeline import plan
from pipeline._io import canonical_json, sha256_bytes, sha256_file
from pipeline.audit import sbom_checks
from pipeline.audit.rows import FAIL, Check, Rows, State, equal, first_difference, first_path_difference
from pipeline.config import REQUEST_BUDGET_FIELDS
from pipeline.errors import ReleaseError, VerificationError
from pipeline.image.base import BASE_LOCK_FILE as BASE_LOCK
from pipeline.records import attest, sbom_licenses, signing
from pipeline.records import provenance as provenance_mod
from pipeline.records import sbom as sbom_mod
from pipeline.records import statement as release_statement
from pipeline.sources import dataset as external
from pipeline.sources import git, toolchain
from pipeline.sources import vendor as sources


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
    r.run("submission/tasks", "submission.json", lambda: equal(
        "task ids of submission.json, in request order", [t for t, _ in order], [t.task_id for t in s.sub.tasks]))

    def budgets() -> None:
        for t in s.sub.tasks:
            pinned = s.cfg.budgets.get(kinds.get(t.task_id, "procedural"))
            if pinned is None:
                raise VerificationError(f"release.toml has no [budgets.{kinds.get(t.task_id)}]")
            diff = sorted(k for k in REQUEST_BUDGET_FIELDS if t.budgets.get(k) != pinned.values[k])
            equal(f"budgets of task {t.task_id} ({', '.join(diff) or 'split'}) vs release.toml",
                   {**{k: pinned.values[k] for k in diff}, "split": pinned.split},
                   {**{k: t.budgets.get(k) for k in diff}, "split": t.split})

    r.run("submission/budgets", "submission.json", budgets)

    def images() -> None:
        pinned = {t.task_id: t.image for t in s.cfg.external.tasks}
        built = s.sub.image
        if s.prov is not None and s.prov.image is not None:
            equal("submission.json's image vs the image provenance.json records",
                   f"{s.prov.image.name}@{s.prov.image.digest}", built)
        for t in s.sub.tasks:
            equal(f"image of task {t.task_id}", pinned.get(t.task_id, built), t.image)

    r.run("submission/images", "submission.json", images)
    if s.plan is None or s.prov is None:
        r.not_checked("submission/request", "submission.json",
                      "provenance.json or the release statement's profile did not load")
        return
    r.run("submission/request", "submission.json", lambda: _request_matches(s))


def _request_matches(s: State) -> None:
    """Everything else of the request = what release.toml, the released profile and provenance.json give:
    submission_id, dataset, name, source (the recorded commit), the one schema and the actions."""
    from pipeline.checks import schema as release_schema
    from pipeline.records import submission as submission_mod

    want = {"submission_id": s.plan.request.submission_id, "dataset": s.plan.request.dataset,
            "name": s.cfg.name, "source": submission_mod.source_at(s.cfg.source_url, s.prov.project.commit),
            "schema": release_schema.declared(), "example_actions": release_schema.example_actions(),
            "finish_action": release_schema.finish_action()}
    got = {k: getattr(s.sub, k) for k in want}
    diff = [k for k in want if want[k] != got[k]]
    equal(f"{', '.join(diff) or 'fields'} of submission.json vs release.toml (profile {s.plan.profile}) and "
          "provenance.json's project commit", {k: want[k] for k in diff}, {k: got[k] for k in diff})


def audit_request_records(r: Rows, s: State) -> None:
    """What the request leaves out, in provenance.json: each task's verification and both size
    measures rebuilt from checks.json, the budgets = release.toml's tables."""
    if s.prov is None or s.cfg is None:
        return
    r.run("provenance/budgets", "provenance.json", lambda: equal(
        "budgets of provenance.json vs release.toml's [budgets.*] tables",
        json.loads(json.dumps(provenance_mod.budgets_record(s.cfg.budgets))), s.prov.budgets))
    if s.plan is None or s.sub is None:
        for cid in ("provenance/tasks", "provenance/sizes"):
            r.not_checked(cid, "provenance.json", "submission.json or the release statement's profile did not load")
        return
    r.run("provenance/tasks", "provenance.json", lambda: _tasks_match(s))
    r.run("provenance/sizes", "provenance.json", lambda: _sizes_match(s))


def _suite(s: State):
    from pipeline.checks import results as results_mod

    return results_mod.load(s.att_dir / attest.CHECKS_FILE)


def _tasks_match(s: State) -> None:
    """provenance.json's per-task verification = rebuilt from checks.json, for submission.json's tasks."""
    from pipeline.records import verification

    rebuilt = verification.build(s.cfg, s.plan.external, _suite(s), image=s.sub.image)
    equal("tasks of provenance.json vs submission.json's (id and image, in request order)",
          [(t.task_id, t.image) for t in s.sub.tasks], [(t.task_id, t.image) for t in s.prov.tasks])
    equal("tasks of provenance.json vs release.toml's (id, image and kind, in request order)",
          [(t.task_id, t.image, t.kind) for t in rebuilt], [(t.task_id, t.image, t.kind) for t in s.prov.tasks])
    for want, got in zip(rebuilt, s.prov.tasks):
        equal(f"verification of task {got.task_id} in provenance.json vs checks.json",
              want.verification.to_json(), got.verification.to_json(),
              hint="provenance.json claims what the checks did not show")


def _sizes_match(s: State) -> None:
    """provenance.json's sizes = both measures of the manifests checks.json recorded."""
    from pipeline.records import sizes as sizes_mod

    rebuilt = sizes_mod.measure(sizes_mod.descriptors(_suite(s), s.sub.image, s.cfg.external.tasks))
    equal("sizes of provenance.json vs the manifests checks.json recorded",
          json.loads(json.dumps(rebuilt.to_json())),
          json.loads(json.dumps(s.prov.sizes.to_json())) if s.prov.sizes is not None else None)


def _base_pin(root: Path, base: plan.BaseChoice) -> str:
    """The base the release config pins: release.toml, or the records' locks/base.json for a local base."""
    if base.pinned is not None:
        return base.pinned
    from pipeline.image.base import load_record

    record = load_record(root / BASE_LOCK)
    if record is None:
        raise VerificationError(f"{BASE_LOCK} is missing", hint="a local-base release records its base there")
    return record.reference


def _base_recorded(root: Path, base: plan.BaseChoice, prov) -> None:
    """provenance.json's base = release.toml's pin (a base pulled by digest: name and digest, nothing
    more is known of it), or the records' locks/base.json: the digest, and what the local base was
    built from (the lock's sha256, suite, snapshot, number of .debs and mirror)."""
    equal("base image of provenance.json vs the release.toml pin", _base_pin(root, base),
          f"{prov.base.name}@{prov.base.digest}")
    origin = prov.base.built_from
    if base.pinned is not None:
        equal("what provenance.json says a base pulled by digest was built from", None,
              asdict(origin) if origin is not None else None, hint="only its name and digest are known")
        return
    from pipeline.image.base import load_record

    path = root / BASE_LOCK
    expected = provenance_mod.BaseOrigin.of(load_record(path), lock=BASE_LOCK, lock_sha256=sha256_file(path))
    want, got = asdict(expected), asdict(origin) if origin is not None else {}
    diff = sorted(k for k in want if want[k] != got.get(k))
    equal(f"what provenance.json says the local base was built from ({', '.join(diff)}) vs {BASE_LOCK}",
          {k: want[k] for k in diff}, {k: got.get(k) for k in diff},
          hint=f"{BASE_LOCK} is not the lock of the base the records name, or provenance.json was edited"
          if origin is not None else "the record does not say what the local base was built from")


def audit_provenance(r: Rows, s: State) -> None:
    prov, cfg, root = s.prov, s.cfg, s.root
    if prov is None or cfg is None:
        return
    stmt = (s.statements or {}).get("provenance")
    rec = f"attestations/provenance{s.suffix or signing.DSSE_SUFFIX}"
    if s.plan is not None:
        r.run("provenance/profile", "provenance.json", lambda: equal(
            "profile of provenance.json vs the release statement", s.plan.profile, prov.profile))
    if s.image is not None:
        r.run("provenance/image", "provenance.json", lambda: equal(
            "image digest of provenance.json vs submission.json", s.image.digest,
            prov.image.digest if prov.image else None))
    lock_text = r.run("provenance/wheel-lock", prov.wheel_lock.path, lambda: _lock_text(root, prov))
    if stmt is None:
        r.not_checked("provenance/record", "provenance.json", "the provenance statement did not verify")
    else:
        pred = stmt["predicate"]  # an object (audit_statements); what is inside is read under r.run

        def bound_digest() -> str | None:
            byproducts = {b.get("name"): b for b in pred.get("runDetails", {}).get("byproducts", [])}
            return byproducts.get(attest.PROVENANCE_RECORD, {}).get("digest", {}).get("sha256")

        r.run("provenance/record", "provenance.json", lambda: equal(
            "sha256 of provenance.json vs the provenance statement's byproduct", bound_digest(),
            sha256_file(root / "provenance.json"), hint="provenance.json was edited after signing"))
        if lock_text is not None:
            def consistent() -> None:
                bd = pred.get("buildDefinition", {})
                expected = attest.resolved_dependencies(prov, project_repository=cfg.source_url, lock_text=lock_text)
                diff = first_difference(expected, bd.get("resolvedDependencies", []))
                if diff:
                    raise VerificationError(f"attested resolvedDependencies differ from provenance.json: {diff}")
                ext = bd.get("externalParameters", {})
                equal("externalParameters profile/revision", (prov.profile, prov.project.commit),
                       (ext.get("profile"), ext.get("source", {}).get("revision")))
                equal("internalParameters.slsaBuildLevel", attest.SLSA_BUILD_LEVEL,
                       bd.get("internalParameters", {}).get("slsaBuildLevel"))
                _whole_predicate(s, pred, lock_text)

            r.run("provenance/statement", rec, consistent)
    try:
        if not isinstance(prov.profile, str):  # a list or an object cannot name a profile (nor be looked up)
            raise VerificationError("provenance.json's profile is not a profile name", expected="a string",
                                    actual=json.dumps(prov.profile))
        recorded_plan = plan.resolve(cfg, prov.profile)
    except ReleaseError as exc:
        r.rows.append(Check("provenance/sources", "provenance.json", FAIL, exc.one_line()))
        return
    r.run("provenance/base", "provenance.json", lambda: _base_recorded(root, recorded_plan.base, prov))
    r.run("provenance/sources", "provenance.json", lambda: _sources_match(recorded_plan.sources, prov))
    r.run("provenance/toolchain", "provenance.json", lambda: _toolchain_locked(root, prov))
    recorded = {v.source: v for v in prov.sources}

    def vendored() -> None:
        for source in recorded_plan.sources:
            lic = recorded[source.name].license_sha256 if source.name in recorded else None
            sources.check_vendored(source, root / "vendor", license_sha256=lic)

    r.run("vendor/files", "vendor/", vendored)


def _whole_predicate(s: State, pred: dict, lock_text: str) -> None:
    """The provenance predicate = the one a release writes from provenance.json, release.toml and how
    the records are signed; only the run's times and id come from the statement itself."""
    meta = pred.get("runDetails", {}).get("metadata", {})
    expected = attest.provenance_predicate(
        s.cfg, s.prov, parameters=plan.resolve(s.cfg, s.prov.profile).parameters, lock_text=lock_text,
        signing=signing.signing_kind(s.suffix),
        started=release_statement.parse_time(meta.get("startedOn"), what="runDetails.metadata.startedOn"),
        finished=release_statement.parse_time(meta.get("finishedOn"), what="runDetails.metadata.finishedOn"),
        invocation_id=str(meta.get("invocationId")))
    where = first_path_difference(json.loads(json.dumps(expected)), pred, "predicate")
    if where is not None:
        path, want, got = where
        raise VerificationError(f"provenance statement {path} vs the one release.toml, provenance.json and the "
                                "signature give", expected=json.dumps(want, sort_keys=True),
                                actual=json.dumps(got, sort_keys=True),
                                hint="the builder, build type, signing and parameters are not the release's")


def _sources_match(pinned, prov) -> None:
    wanted = {x.name: x for x in pinned}
    recorded = {x.source: x for x in prov.sources}
    equal("source names of provenance.json vs release.toml", sorted(wanted), sorted(recorded))
    fields = ("repository", "revision", "path", "sha256", "size", "license", "license_file")
    for name in sorted(wanted):
        pin, got = wanted[name], recorded[name]
        diff = sorted(f for f in fields if getattr(pin, f) != getattr(got, f))
        equal(f"source {name} in provenance.json ({', '.join(diff)}) vs release.toml",
               {f: getattr(pin, f) for f in diff}, {f: getattr(got, f) for f in diff})
        if pin.license_sha256:
            equal(f"licence sha256 of source {name} vs release.toml", pin.license_sha256, got.license_sha256)


def _toolchain_locked(root: Path, prov) -> None:
    """The builder's toolchain is what uv.lock pinned at the recorded commit: every distribution,
    version and file hash, and every member of the pipeline group. Records audited without their
    repository's history are checked against the uv.lock beside them, and the row says so."""
    commit = prov.project.commit
    if git.commit_of(root, commit) == commit and git.object_type(root, commit, toolchain.LOCK_FILE) == "blob":
        where = f"{toolchain.LOCK_FILE} at commit {commit}"
        text = git.read_file(root, commit, toolchain.LOCK_FILE).decode()
    else:
        where = (f"{toolchain.LOCK_FILE} beside the records (commit {commit} is not in a repository here; "
                 "audit a clone that has it to check the lock of the release itself)")
        text = (root / toolchain.LOCK_FILE).read_text(encoding="utf-8")
    toolchain.verify(prov.builder.toolchain, toolchain.parse_lock(text, where=where), where=where)


def _lock_text(root: Path, prov) -> str:
    data = (root / prov.wheel_lock.path).read_bytes()
    equal(f"sha256 of {prov.wheel_lock.path} vs provenance.json", prov.wheel_lock.sha256, sha256_bytes(data),
           hint="the wheel lock changed after the release")
    return data.decode()


def audit_external(r: Rows, s: State) -> None:
    if s.prov is None or s.cfg is None:
        return

    def records() -> None:
        pinned = {t.task_id: t for t in s.cfg.external.tasks}
        equal("external task ids of provenance.json vs release.toml", list(pinned),
               [e.task_id for e in s.prov.external])
        for rec in s.prov.external:
            task = pinned[rec.task_id]
            equal(f"image of external task {rec.task_id} vs release.toml", task.image, rec.image)
            _external_fields(s.cfg, task, rec)
            if rec.status == external.VERIFIED and not task.record_sha256:
                raise VerificationError(f"external record {rec.task_id} is marked verified, but release.toml "
                                        "pins no record_sha256 to verify it against",
                                        expected="record_sha256 pinned", actual=repr(task.record_sha256))
            if rec.status != external.NOT_FETCHED and task.record_sha256:
                equal(f"sha256 of external record {rec.task_id} vs release.toml", task.record_sha256, rec.sha256)
                equal(f"row of external record {rec.task_id} vs release.toml", task.row, rec.row)
            if s.plan is not None and s.plan.external.required:
                equal(f"status of external record {rec.task_id} (profile {s.plan.profile} requires it)",
                       external.VERIFIED, rec.status)
            external.check_stored(rec, s.root / "vendor")

    r.run("external/records", "vendor/external/", records)


def _external_fields(cfg, task, rec) -> None:
    """What an external record copies from release.toml (dataset, revision, split, budgets ...)."""
    ext, budgets = cfg.external, cfg.budgets["external"]
    want = {"dataset": ext.dataset, "revision": ext.revision, "subset": ext.subset, "split": task.split,
            "digest": task.digest, "compressed_bytes": task.compressed_bytes, "budget_split": budgets.split,
            "budgets": dict(budgets.values), "license": ext.license, "reference": task.reference}
    diff = sorted(k for k, v in want.items() if getattr(rec, k) != v)
    equal(f"external record {rec.task_id} in provenance.json ({', '.join(diff)}) vs release.toml",
          {k: want[k] for k in diff}, {k: getattr(rec, k) for k in diff})


def audit_sbom(r: Rows, s: State, registry: bool) -> None:
    path = s.att_dir / attest.SBOM_FILE
    rec = f"attestations/{attest.SBOM_FILE}"

    def valid() -> dict:
        data = path.read_bytes()
        sbom_mod.validate(data)
        return json.loads(data)

    doc = r.run("sbom/schema", rec, valid)
    if doc is None:
        return
    r.run("sbom/licenses", rec, lambda: sbom_checks.check_licences(doc))
    r.run("sbom/license-coverage", rec,
          lambda: sbom_licenses.coverage_line(doc.get("components") or []), info=True)
    stmt = (s.statements or {}).get("sbom")
    if stmt is None:
        r.not_checked("sbom/attested", rec, "the SBOM statement did not verify")
    else:
        r.run("sbom/attested", rec, lambda: equal(
            f"{rec} vs the SBOM in the signed SBOM statement (canonical JSON sha256)",
            sha256_bytes(canonical_json(stmt.get("predicate"))), sha256_bytes(canonical_json(doc)),
            hint="the SBOM file was replaced or edited after signing"))
    if s.image is None:
        return
    r.run("sbom/image", rec, lambda: equal(
        "metadata.component.version and serialNumber of the SBOM",
        (s.image.digest, f"urn:uuid:{sbom_mod.serial_number(s.image.digest)}"),
        (doc.get("metadata", {}).get("component", {}).get("version"), doc.get("serialNumber"))))
    if s.prov is not None and s.prov.image is not None:
        r.run("sbom/layers", rec, lambda: _layers_match(doc, s.prov.image))
    _sbom_components(r, s, doc, rec, registry)


def _sbom_layers(doc: dict) -> list[str]:
    props = doc.get("metadata", {}).get("component", {}).get("properties", [])
    layers = sorted((int(p["value"].split(":", 1)[0]), p["value"].split(":", 1)[1])
                    for p in props if p.get("name") == "arena:layer")
    return [d for _, d in layers]


def _layers_match(doc: dict, image) -> None:
    layers = _sbom_layers(doc)
    equal("number of image layers the SBOM lists vs provenance.json", image.layer_count, len(layers))
    app = [l.digest for l in image.app_layers]
    equal("application layers the SBOM lists vs provenance.json", app, layers[len(layers) - len(app):])


def _sbom_components(r: Rows, s: State, doc: dict, rec: str, registry: bool) -> None:
    layout = s.root / "dist" / "oci"
    if s.cfg is None or s.prov is None or s.plan is None:
        for cid in ("sbom/components", "sbom/coverage"):
            r.not_checked(cid, rec, "release.toml, provenance.json or the release statement did not load")
        return
    has_image = (layout / "blobs" / "sha256" / s.image.digest.split(":", 1)[1]).is_file()
    if not has_image and not registry:
        for cid in ("sbom/components", "sbom/coverage"):
            r.not_checked(cid, rec,
                          f"the image's layers are not here (no dist/oci holding {s.image.digest}, and no "
                          "--registry to pull them); to rebuild the recorded image into dist/oci, run "
                          "`nox -s reproduce` first")
        return

    app_dir = s.cfg.app_dir
    rel_app, coverage_paths = app_dir.strip("/"), sbom_checks.coverage_paths(app_dir)

    def sbom_paths(path: str) -> bool:
        return sbom_mod.wanted(path, rel_app)

    @functools.cache
    def layers(layout: Path) -> tuple[sbom_mod.ImageRef, sbom_mod.FileView]:
        # Read (decompressed and parsed) once for both rows; each narrows the files to
        # the ones it reads, as its own reading would have kept them.
        image = sbom_mod.open_image_by_digest(layout, s.image.digest)
        return image, sbom_mod.read_view(image, app_dir, keep=lambda path: sbom_paths(path) or coverage_paths(path))

    def covered(layout: Path) -> None:
        image, files = layers(layout)
        sbom_checks.check_coverage(doc, image, app_dir, read=files)

    def regenerate(layout: Path) -> None:
        image, files = layers(layout)
        view = files.only(sbom_paths)
        lock = s.root / s.prov.wheel_lock.path
        # The licences a person read from free-form files: the audited checkout's own table.
        table = s.root / "pipeline" / "records" / sbom_licenses.REVIEWED.name
        bom = sbom_mod.build_bom(image, view, name=s.image.name, app_dir=s.cfg.app_dir,
                                 epoch=s.prov.source_date_epoch, sources=s.plan.sources,
                                 first_party_license=sbom_mod.project_license(s.root),
                                 lock_text=lock.read_text() if lock.is_file() else "",
                                 reviewed=sbom_licenses.reviewed_table(table, s.root) if table.is_file() else None)
        regenerated = json.loads(sbom_mod.render(bom))
        _component_difference(regenerated, doc)

    if has_image:
        r.run("sbom/components", rec, lambda: regenerate(layout))
        r.run("sbom/coverage", rec, lambda: covered(layout))
        return
    with tempfile.TemporaryDirectory(prefix="audit-pull-") as tmp:
        pulled_to = Path(tmp) / "oci"

        def pulled() -> None:
            from pipeline.registry import pull

            if s.registry is None:
                raise VerificationError("no registry to pull the image from", hint="see registry/reference")
            pull.pull(f"{s.registry.name}@{s.image.digest}", pulled_to)
            regenerate(pulled_to)

        r.run("sbom/components", rec, pulled)
        if pulled_to.is_dir():
            r.run("sbom/coverage", rec, lambda: covered(pulled_to))
        else:
            r.not_checked("sbom/coverage", rec, f"the image could not be pulled from {s.image.name} "
                          "(sbom/components says why)")


def _component_difference(expected: dict, actual: dict) -> None:
    """Name the first component that the image's layers and the SBOM file disagree on."""
    def by_ref(doc: dict) -> dict[str, str]:
        return {c.get("bom-ref"): json.dumps(c, sort_keys=True) for c in doc.get("components", [])}

    refs = [c.get("bom-ref") for c in actual.get("components", [])]
    repeated = sorted({str(ref) for ref in refs if refs.count(ref) > 1})
    if repeated:
        raise VerificationError("the SBOM lists a component more than once", expected="each bom-ref once",
                                actual=", ".join(repeated[:3]))
    e, a = by_ref(expected), by_ref(actual)
    missing, extra = sorted(set(e) - set(a)), sorted(set(a) - set(e))
    changed = sorted(k for k in set(e) & set(a) if e[k] != a[k])
    if missing or extra or changed:
        raise VerificationError(
            "SBOM components differ from the image's layers",
            expected="the components read from the layer blobs",
            actual="; ".join(x for x in (f"missing {', '.join(missing[:3])}" if missing else "",
                                         f"not in the image {', '.join(extra[:3])}" if extra else "",
                                         f"changed {', '.join(changed[:3])}" if changed else "") if x))
    equal("SBOM regenerated from the image's layers (canonical JSON sha256)",
           sha256_bytes(canonical_json(expected)), sha256_bytes(canonical_json(actual)))


def _runtimes_match(s: State) -> None:
    """checks.json names every engine of release.toml's [runtime] verify (the file, not the
    environment), each with the whole suite, a valid isolation mode read from its own check and
    no loosened security (pipeline/checks/runtimes.py); provenance.json says the same of them."""
    from pipeline.checks import runtimes as runtimes_mod

    suite = _suite(s)
    runtimes_mod.check(suite, s.cfg.runtime.verify, where=f"attestations/{attest.CHECKS_FILE}")
    if s.prov is not None:
        equal("runtimes of provenance.json vs checks.json",
              json.loads(json.dumps(runtimes_mod.provenance_runtimes(suite))),
              json.loads(json.dumps(list(s.prov.runtimes or ()))))


def audit_checks(r: Rows, s: State) -> None:
    stmt = (s.statements or {}).get("checks")
    rec = f"attestations/{attest.CHECKS_FILE}"
    if stmt is None:
        r.not_checked("checks/record", rec, "the checks statement did not verify")
        return
    pred = stmt["predicate"]  # an object (audit_statements); what is inside is read under r.run

    def conf() -> dict:
        return (pred.get("configuration") or [{}])[0]

    r.run("checks/record", rec, lambda: equal(
        f"sha256 of {rec} vs the checks statement", conf().get("digest", {}).get("sha256"),
        sha256_file(s.att_dir / attest.CHECKS_FILE), hint="checks.json was edited after signing"))

    def results() -> None:
        from pipeline.checks import results as results_mod

        suite = results_mod.load(s.att_dir / attest.CHECKS_FILE)
        equal(f"passed checks of {rec} vs the statement", pred.get("passedTests"),
               sorted(c.id for c in suite.checks if c.passed))
        equal(f"failed checks of {rec} vs the statement", pred.get("failedTests"),
               sorted(c.id for c in suite.failures))
        # Everything else the statement says (checks that could not apply, the counts, the image)
        # is a function of checks.json too; its digest is checks/record's to compare.
        expected = attest.checks_predicate(suite, checks_sha256=conf().get("digest", {}).get("sha256"))
        where = first_path_difference(json.loads(json.dumps(expected)), pred, "predicate")
        if where is not None:
            raise VerificationError(f"checks statement {where[0]} vs {rec}", expected=json.dumps(where[1]),
                                    actual=json.dumps(where[2]))

    r.run("checks/results", rec, results)
    srec = f"attestations/checks{s.suffix}"

    def passed() -> None:
        from pipeline.checks import results as results_mod

        equal(f"check suite result (failed: {', '.join(pred.get('failedTests', [])[:5]) or 'none'})",
              "PASSED", pred.get("result"))
        # The verdict is read from checks.json too: a statement saying PASSED over failed checks
        # (or over none) is not a passed suite.
        suite = results_mod.load(s.att_dir / attest.CHECKS_FILE)
        equal(f"failed checks in {rec} (the statement says PASSED)", [], sorted(c.id for c in suite.failures))
        if not suite.ok:
            raise VerificationError(f"{rec} holds no passed check", expected="a whole suite",
                                    actual=f"{len(suite.checks)} check(s)")

    r.run("checks/passed", srec, passed)
    if s.cfg is None:
        r.not_checked("checks/runtimes", rec, "release.toml did not load")
    else:
        r.run("checks/runtimes", rec, lambda: _runtimes_match(s))
    if s.image is not None:
        r.run("checks/image", srec, lambda: equal(
            "digest of the image the check suite ran on", s.image.digest,
            str(conf().get("annotations", {}).get("image", "")).rpartition("@")[2]))
