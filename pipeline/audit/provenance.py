"""Audit checks of provenance.json: against its signed statement, the release.toml pins (base,
sources, the vendored files), the wheel lock and the toolchain uv.lock pinned."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from pipeline import plan
from pipeline._io import sha256_bytes, sha256_file
from pipeline.audit.rows import FAIL, Check, Rows, State, equal, first_difference, first_path_difference
from pipeline.errors import ReleaseError, VerificationError
from pipeline.image.base import BASE_LOCK_FILE as BASE_LOCK
from pipeline.records import attest, signing
from pipeline.records import provenance as provenance_mod
from pipeline.records import statement as release_statement
from pipeline.sources import git, toolchain
from pipeline.sources import vendor as sources


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
    equal(
        "base image of provenance.json vs the release.toml pin",
        _base_pin(root, base),
        f"{prov.base.name}@{prov.base.digest}",
    )
    origin = prov.base.built_from
    if base.pinned is not None:
        equal(
            "what provenance.json says a base pulled by digest was built from",
            None,
            asdict(origin) if origin is not None else None,
            hint="only its name and digest are known",
        )
        return
    from pipeline.image.base import load_record

    path = root / BASE_LOCK
    record = load_record(path)
    if record is None:
        raise VerificationError(f"{BASE_LOCK} is missing", hint="a local-base release records its base there")
    expected = provenance_mod.BaseOrigin.of(record, lock=BASE_LOCK, lock_sha256=sha256_file(path))
    want, got = asdict(expected), asdict(origin) if origin is not None else {}
    diff = sorted(k for k in want if want[k] != got.get(k))
    equal(
        f"what provenance.json says the local base was built from ({', '.join(diff)}) vs {BASE_LOCK}",
        {k: want[k] for k in diff},
        {k: got.get(k) for k in diff},
        hint=f"{BASE_LOCK} is not the lock of the base the records name, or provenance.json was edited"
        if origin is not None
        else "the record does not say what the local base was built from",
    )


def audit_provenance(r: Rows, s: State) -> None:
    prov, cfg, root = s.prov, s.cfg, s.root
    if prov is None or cfg is None:
        return
    stmt = (s.statements or {}).get("provenance")
    rec = f"attestations/provenance{s.suffix or signing.DSSE_SUFFIX}"
    if s.plan is not None:
        r.run(
            "provenance/profile",
            "provenance.json",
            lambda: equal("profile of provenance.json vs the release statement", s.plan.profile, prov.profile),
        )
    image = s.image
    if image is not None:
        r.run(
            "provenance/image",
            "provenance.json",
            lambda: equal(
                "image digest of provenance.json vs submission.json",
                image.digest,
                prov.image.digest if prov.image else None,
            ),
        )
    lock_text = r.run("provenance/wheel-lock", prov.wheel_lock.path, lambda: _lock_text(root, prov))
    if stmt is None:
        r.not_checked("provenance/record", "provenance.json", "the provenance statement did not verify")
    else:
        pred = stmt["predicate"]  # an object (audit_statements); what is inside is read under r.run

        def bound_digest() -> str | None:
            byproducts = {b.get("name"): b for b in pred.get("runDetails", {}).get("byproducts", [])}
            return byproducts.get(attest.PROVENANCE_RECORD, {}).get("digest", {}).get("sha256")

        r.run(
            "provenance/record",
            "provenance.json",
            lambda: equal(
                "sha256 of provenance.json vs the provenance statement's byproduct",
                bound_digest(),
                sha256_file(root / "provenance.json"),
                hint="provenance.json was edited after signing",
            ),
        )
        if lock_text is not None:

            def consistent() -> None:
                bd = pred.get("buildDefinition", {})
                expected = attest.resolved_dependencies(prov, project_repository=cfg.source_url, lock_text=lock_text)
                diff = first_difference(expected, bd.get("resolvedDependencies", []))
                if diff:
                    raise VerificationError(f"attested resolvedDependencies differ from provenance.json: {diff}")
                ext = bd.get("externalParameters", {})
                equal(
                    "externalParameters profile/revision",
                    (prov.profile, prov.project.commit),
                    (ext.get("profile"), ext.get("source", {}).get("revision")),
                )
                equal(
                    "internalParameters.slsaBuildLevel",
                    attest.SLSA_BUILD_LEVEL,
                    bd.get("internalParameters", {}).get("slsaBuildLevel"),
                )
                _whole_predicate(s, pred, lock_text)

            r.run("provenance/statement", rec, consistent)
    try:
        if not isinstance(prov.profile, str):  # a list or an object cannot name a profile (nor be looked up)
            raise VerificationError(
                "provenance.json's profile is not a profile name", expected="a string", actual=json.dumps(prov.profile)
            )
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
        s.cfg,
        s.prov,
        parameters=plan.resolve(s.cfg, s.prov.profile).parameters,
        lock_text=lock_text,
        signing=signing.signing_kind(s.suffix),
        started=release_statement.parse_time(meta.get("startedOn"), what="runDetails.metadata.startedOn"),
        finished=release_statement.parse_time(meta.get("finishedOn"), what="runDetails.metadata.finishedOn"),
        invocation_id=str(meta.get("invocationId")),
    )
    where = first_path_difference(json.loads(json.dumps(expected)), pred, "predicate")
    if where is not None:
        path, want, got = where
        raise VerificationError(
            f"provenance statement {path} vs the one release.toml, provenance.json and the signature give",
            expected=json.dumps(want, sort_keys=True),
            actual=json.dumps(got, sort_keys=True),
            hint="the builder, build type, signing and parameters are not the release's",
        )


def _sources_match(pinned, prov) -> None:
    wanted = {x.name: x for x in pinned}
    recorded = {x.source: x for x in prov.sources}
    equal("source names of provenance.json vs release.toml", sorted(wanted), sorted(recorded))
    fields = ("repository", "revision", "path", "sha256", "size", "license", "license_file")
    for name in sorted(wanted):
        pin, got = wanted[name], recorded[name]
        diff = sorted(f for f in fields if getattr(pin, f) != getattr(got, f))
        equal(
            f"source {name} in provenance.json ({', '.join(diff)}) vs release.toml",
            {f: getattr(pin, f) for f in diff},
            {f: getattr(got, f) for f in diff},
        )
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
        where = (
            f"{toolchain.LOCK_FILE} beside the records (commit {commit} is not in a repository here; "
            "audit a clone that has it to check the lock of the release itself)"
        )
        text = (root / toolchain.LOCK_FILE).read_text(encoding="utf-8")
    toolchain.verify(prov.builder.toolchain, toolchain.parse_lock(text, where=where), where=where)


def _lock_text(root: Path, prov) -> str:
    data = (root / prov.wheel_lock.path).read_bytes()
    equal(
        f"sha256 of {prov.wheel_lock.path} vs provenance.json",
        prov.wheel_lock.sha256,
        sha256_bytes(data),
        hint="the wheel lock changed after the release",
    )
    return data.decode()
