"""Offline audit of a release's records: `python -m pipeline audit [--key FILE | --identity X --issuer Y]`.

The trust root never comes from the records: release.toml's `[trust.<profile>]`
pins (pipeline.trust), or the auditor's own `--key` / `--identity` + `--issuer`.
Every record is bound to a signature by the release statement
(pipeline.release_statement); a missing statement, layout or link fails, never skips.

Each check has a stable ID (one row of the table, one entry of `--json` and of the
VSA). A check that cannot run fails ("not checked: ..."), unless the auditor names it
with `--skip ID`; it is then reported as skipped, and the verification summary says
it was not verified.

    config/load, provenance/load, submission/format, submission/image   the records parse
    trust/pins              release.toml's [trust.<profile>] is well formed
    trust/root              which trust root was used (information)
    release/present         exactly one release statement (DSSE or sigstore bundle)
    release/signature       the release statement, signed by the trust root
    release/subjects        every record re-hashed against the statement; none unbound
    release/image           the statement's image = submission.json's image
    release/profile         the profile it names is in release.toml
    {provenance,sbom,checks}/signature   each statement, signed by the same signer
    {provenance,sbom,checks}/subject     each statement is about the submission image
    readme                  attestations/README.md = regenerated
    intoto/links            layout + stage links: in-toto rules, records = last products
    intoto/expiry           the layout's expiry (information: it was valid at release)
    submission/tasks        task ids in request order (blocks, external tasks per after_block)
    submission/budgets      each task's budgets and split = release.toml
    submission/images       procedural tasks on the built image, external tasks on their pinned images
    provenance/record       provenance.json = the bytes the provenance statement binds
    provenance/statement    resolvedDependencies, profile, revision, build level = provenance.json
    provenance/profile      provenance.json's profile = the release statement's
    provenance/image        provenance.json's image = the submission image
    provenance/wheel-lock   locks/runtime.txt = its pinned hash
    provenance/base         base = release.toml's pin (or locks/base.json)
    provenance/sources      sources = release.toml's [[sources]] pins
    vendor/files            vendored files and licences re-hashed
    external/records        stored external records re-hashed and = release.toml pins
    sbom/schema             CycloneDX 1.6 strict
    sbom/attested           the SBOM file = the SBOM statement's predicate
    sbom/image              the SBOM describes the submission image
    sbom/layers             the SBOM's layer list = provenance.json's image layers
    sbom/components         the SBOM regenerated from the image's layer blobs = the file
                            (dist/oci holding the image, or --registry: pulled blobs)
    checks/record           attestations/checks.json = the checks statement's digest
    checks/results          checks.json's results = the statement's passed/failed lists
    checks/passed           every check passed
    checks/image            the checks ran on the submission image
    registry/*              (--registry) pushed manifest and .att/.sbom tags = the records

It writes a SLSA Verification Summary Attestation (pipeline.vsa) for the image.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from . import attest, config as config_mod, external, intoto_links, provenance as provenance_mod
from . import release_statement, sbom as sbom_mod, signing, sources, submission as submission_mod, trust
from ._io import canonical_json, sha256_bytes, sha256_file
from .config import BUDGET_FIELDS
from .errors import ReleaseError, VerificationError

T = TypeVar("T")
BASE_LOCK = "locks/base.json"
PASS, FAIL, INFO, SKIPPED = "pass", "fail", "info", "skipped"


@dataclass(frozen=True)
class Check:
    """One row of the audit: a stable check ID, the record it is about, the outcome."""

    id: str
    record: str
    status: str
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status != FAIL

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "record": self.record, "status": self.status, "detail": self.detail}


class _Rows:
    """Collects rows; `run` turns a ReleaseError into a failed row instead of stopping."""

    def __init__(self, skip: frozenset[str] = frozenset()) -> None:
        self.rows: list[Check] = []
        self.skip = skip

    def run(self, cid: str, record: str, fn: Callable[[], T], *, info: bool = False) -> T | None:
        if cid in self.skip:
            self.rows.append(Check(cid, record, SKIPPED, "skipped by the auditor (--skip)"))
            return None
        try:
            value = fn()
        except ReleaseError as exc:
            self.rows.append(Check(cid, record, FAIL, exc.one_line()))
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.rows.append(Check(cid, record, FAIL, f"{type(exc).__name__}: {exc}"))
            return None
        detail = value if info and isinstance(value, str) else ""
        self.rows.append(Check(cid, record, INFO if info else PASS, detail))
        return value

    def not_checked(self, cid: str, record: str, why: str) -> None:
        if cid in self.skip:
            self.rows.append(Check(cid, record, SKIPPED, f"skipped by the auditor (--skip); {why}"))
        else:
            self.rows.append(Check(cid, record, FAIL, f"not checked: {why}"))


def _equal(what: str, expected: Any, actual: Any, *, hint: str | None = None) -> None:
    if expected != actual:
        raise VerificationError(what, expected=expected, actual=actual, hint=hint)


def _first_difference(expected: list[dict], actual: list[dict]) -> str | None:
    """The first resource descriptor (by name) that differs, with both sides."""
    e, a = ({d.get("name"): d for d in deps} for deps in (expected, actual))
    for name in sorted(set(e) | set(a), key=str):
        if e.get(name) != a.get(name):
            return f"{name}: expected {json.dumps(e.get(name), sort_keys=True)}, got {json.dumps(a.get(name), sort_keys=True)}"
    return "same entries in a different order" if expected != actual else None


def _subject_digest(stmt: dict[str, Any]) -> str:
    subjects = stmt.get("subject") or []
    if len(subjects) != 1:
        raise VerificationError("statement must have exactly one subject", expected=1, actual=len(subjects))
    return "sha256:" + str(subjects[0].get("digest", {}).get("sha256"))


@dataclass
class _State:
    """What the checks have established so far (None: not established)."""

    root: Path
    att_dir: Path
    cfg: Any = None
    profile: Any = None
    trust_root: trust.TrustRoot | None = None
    suffix: str | None = None
    signer: trust.Verified | None = None
    release: dict[str, Any] | None = None
    image: attest.Subject | None = None
    sub: Any = None
    prov: Any = None
    statements: dict[str, dict[str, Any]] | None = None


def _peek_profile(path: Path) -> str | None:
    """The profile an (unverified) release statement names: only to choose which pins apply."""
    try:
        doc = json.loads(path.read_bytes())
        env = doc.get("dsseEnvelope", doc)
        return json.loads(base64.b64decode(env["payload"]))["predicate"]["profile"]
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _release_file(att_dir: Path) -> Path:
    found = [release_statement.path(att_dir, s) for s in (signing.DSSE_SUFFIX, signing.BUNDLE_SUFFIX)
             if release_statement.path(att_dir, s).is_file()]
    if len(found) != 1:
        raise VerificationError(
            "attestations/release.dsse.json or release.sigstore.json is missing" if not found
            else "both a DSSE and a sigstore release statement are present",
            expected="exactly one release statement", actual=", ".join(p.name for p in found) or "none",
            hint="every release writes one; records without it are incomplete or tampered with")
    return found[0]


def audit(root: Path, *, trust_root: trust.TrustRoot | None = None, registry: bool = False,
          skip: frozenset[str] = frozenset(), now: datetime | None = None) -> list[Check]:
    """Run every check on the records under `root`; return the rows (failures included)."""
    root = Path(root)
    s = _State(root=root, att_dir=root / "attestations")
    r = _Rows(skip)
    s.cfg = r.run("config/load", "release.toml", lambda: config_mod.load(root / "release.toml"))
    s.prov = r.run("provenance/load", "provenance.json", lambda: provenance_mod.load(root / "provenance.json"))
    s.sub = r.run("submission/format", "submission.json", lambda: submission_mod.load(root / "submission.json"))
    if s.sub is not None:
        s.image = r.run("submission/image", "submission.json", lambda: attest.Subject.from_image_ref(s.sub.image))
    _audit_release(r, s, trust_root)
    _audit_statements(r, s)
    _audit_intoto(r, s, now)
    _audit_submission(r, s)
    _audit_provenance(r, s)
    _audit_external(r, s)
    _audit_sbom(r, s, registry)
    _audit_checks(r, s)
    if registry and s.image is not None:
        _audit_registry(r, s)
    return r.rows


def _audit_release(r: _Rows, s: _State, auditor: trust.TrustRoot | None) -> None:
    rel_path = r.run("release/present", "attestations/release.*", lambda: _release_file(s.att_dir))
    profile_name = (_peek_profile(rel_path) if rel_path else None) or (s.prov.profile if s.prov else None) or "local"
    if auditor is not None:
        s.trust_root = auditor
    elif s.cfg is not None:
        s.trust_root = r.run("trust/pins", "release.toml", lambda: trust.pins(s.cfg, profile_name))
    if s.trust_root is not None:
        r.run("trust/root", "release.toml" if auditor is None else "(auditor)", s.trust_root.describe, info=True)
    if rel_path is None or s.trust_root is None:
        r.not_checked("release/signature", "attestations/release.*", "no release statement or no trust root")
        return
    rec = f"attestations/{rel_path.name}"
    s.suffix = signing.BUNDLE_SUFFIX if rel_path.name.endswith(signing.BUNDLE_SUFFIX) else signing.DSSE_SUFFIX

    def verified() -> dict[str, Any]:
        v = trust.verify(rel_path.read_bytes(), s.trust_root, what=rec, att_dir=s.att_dir)
        stmt = attest.load_statement(v.payload, what=rec)
        if s.cfg is not None:
            _equal(f"{rec}: predicateType", release_statement.predicate_type(s.cfg.source_url),
                   stmt.get("predicateType"))
        s.signer = v
        return stmt

    s.release = r.run("release/signature", rec, verified)
    if s.release is None:
        return
    r.run("release/subjects", rec, lambda: release_statement.check_subjects(s.root, s.release))
    if s.image is not None:
        r.run("release/image", rec, lambda: _equal(
            "the release statement's image differs from submission.json's",
            s.image.to_json(), (s.release.get("subject") or [{}])[0]))
    if s.cfg is not None:
        s.profile = r.run("release/profile", rec, lambda: s.cfg.profile(s.release["predicate"]["profile"]))


def _audit_statements(r: _Rows, s: _State) -> None:
    s.statements = {}
    for kind, predicate_type in attest.PREDICATES.items():
        suffix = s.suffix or signing.DSSE_SUFFIX
        path = attest.attestation_path(s.att_dir, kind, suffix)
        rec = f"attestations/{path.name}"
        if s.signer is None:
            r.not_checked(f"{kind}/signature", rec, "the release statement did not verify")
            continue

        def verified(path: Path = path, rec: str = rec, pt: str = predicate_type) -> dict[str, Any]:
            if not path.is_file():
                raise VerificationError(f"{rec} is missing", hint="every release signs it; the records are incomplete")
            v = trust.verify(path.read_bytes(), s.trust_root, what=rec, att_dir=s.att_dir)
            _equal(f"{rec} is signed by another signer than the release statement", s.signer.signer, v.signer)
            stmt = attest.load_statement(v.payload, what=rec)
            _equal(f"{rec}: predicateType", pt, stmt.get("predicateType"))
            return stmt

        stmt = r.run(f"{kind}/signature", rec, verified)
        if stmt is None:
            continue
        s.statements[kind] = stmt
        if s.image is not None:
            r.run(f"{kind}/subject", rec, lambda stmt=stmt: _equal(
                "subject digest differs from the image in submission.json", s.image.digest, _subject_digest(stmt)))
    if s.signer is not None and s.cfg is not None and set(s.statements) == set(attest.PREDICATES):
        r.run("readme", f"attestations/{attest.README_FILE}", lambda: _readme_matches(s))


def _readme_matches(s: _State) -> None:
    subj = s.statements["provenance"]["subject"][0]
    files = [attest.AttestationFile(kind, attest.attestation_path(s.att_dir, kind, s.suffix), stmt["predicateType"],
                                    sha256_bytes(canonical_json(stmt)))
             for kind, stmt in s.statements.items()]
    subject = attest.Subject(subj["name"], "sha256:" + subj["digest"]["sha256"])
    if s.suffix == signing.DSSE_SUFFIX:
        expected = attest.readme(subject, "key", files, signer_id=s.signer.signer.removeprefix("key "),
                                 source_url=s.cfg.source_url)
    else:
        san, _, issuer = s.signer.signer.partition(" (")
        expected = attest.readme(subject, "sigstore", files, signer_id=san, issuer=issuer.rstrip(")"),
                                 source_url=s.cfg.source_url)
    _equal(f"sha256 of attestations/{attest.README_FILE}", sha256_bytes(expected),
           sha256_file(s.att_dir / attest.README_FILE), hint="the README was edited; a release regenerates it")


def _trusted_key(s: _State):
    if s.trust_root.key is not None:
        return s.trust_root.key
    return signing.load_published_key(s.att_dir)  # its keyid was checked against the pins already


def _audit_intoto(r: _Rows, s: _State, now: datetime | None) -> None:
    rec = f"attestations/{intoto_links.LAYOUT_FILE}"
    if s.release is None or s.signer is None:
        r.not_checked("intoto/links", rec, "the release statement did not verify")
        return
    key = _trusted_key(s) if s.suffix == signing.DSSE_SUFFIX else None
    identity = None if key is not None else s.signer.signer.partition(" (")[0]
    note = r.run("intoto/links", rec, lambda: intoto_links.verify(
        s.root, key=key, released_on=release_statement.released_on(s.release), now=now, identity=identity))
    if note is not None:
        r.run("intoto/expiry", rec, lambda: note, info=True)


def expected_task_order(cfg) -> list[tuple[str, str]]:
    """(task id, kind) in request order: each block of cases, then the external tasks after it."""
    from .checks.cases import blocks

    order = []
    for number, block in enumerate(blocks(), start=1):
        order += [(c.id, "procedural") for c in block]
        order += [(t.task_id, "external") for t in cfg.external.tasks if t.after_block == number]
    return order


def _audit_submission(r: _Rows, s: _State) -> None:
    if s.sub is None or s.cfg is None:
        return
    order = expected_task_order(s.cfg)
    kinds = dict(order)
    r.run("submission/tasks", "submission.json", lambda: _equal(
        "task ids of submission.json, in request order", [t for t, _ in order], [t.task_id for t in s.sub.tasks]))

    def budgets() -> None:
        for t in s.sub.tasks:
            pinned = s.cfg.budgets.get(kinds.get(t.task_id, "procedural"))
            if pinned is None:
                raise VerificationError(f"release.toml has no [budgets.{kinds.get(t.task_id)}]")
            diff = sorted(k for k in BUDGET_FIELDS if t.budgets.get(k) != pinned.values[k])
            _equal(f"budgets of task {t.task_id} ({', '.join(diff) or 'split'}) vs release.toml",
                   {**{k: pinned.values[k] for k in diff}, "split": pinned.split},
                   {**{k: t.budgets.get(k) for k in diff}, "split": t.split})

    r.run("submission/budgets", "submission.json", budgets)

    def images() -> None:
        pinned = {t.task_id: t.image for t in s.cfg.external.tasks}
        built = s.sub.image
        if s.prov is not None and s.prov.image is not None:
            _equal("submission.json's image vs the image provenance.json records",
                   f"{s.prov.image.name}@{s.prov.image.digest}", built)
        for t in s.sub.tasks:
            _equal(f"image of task {t.task_id}", pinned.get(t.task_id, built), t.image)

    r.run("submission/images", "submission.json", images)


def _base_pin(root: Path, profile) -> str:
    """The base the release config pins: release.toml, or locks/base.json for a local base."""
    if profile.base != "local":
        return profile.base
    from .base import load_record

    record = load_record(root / BASE_LOCK)
    if record is None:
        raise VerificationError(f"{BASE_LOCK} is missing", hint="a local-base release records its base there")
    return record.reference


def _audit_provenance(r: _Rows, s: _State) -> None:
    prov, cfg, root = s.prov, s.cfg, s.root
    if prov is None or cfg is None:
        return
    stmt = (s.statements or {}).get("provenance")
    rec = f"attestations/provenance{s.suffix or signing.DSSE_SUFFIX}"
    if s.profile is not None:
        r.run("provenance/profile", "provenance.json", lambda: _equal(
            "profile of provenance.json vs the release statement", s.profile.name, prov.profile))
    if s.image is not None:
        r.run("provenance/image", "provenance.json", lambda: _equal(
            "image digest of provenance.json vs submission.json", s.image.digest,
            prov.image.digest if prov.image else None))
    lock_text = r.run("provenance/wheel-lock", prov.wheel_lock.path, lambda: _lock_text(root, prov))
    if stmt is None:
        r.not_checked("provenance/record", "provenance.json", "the provenance statement did not verify")
    else:
        pred = stmt.get("predicate", {})
        bd = pred.get("buildDefinition", {})
        byproducts = {b.get("name"): b for b in pred.get("runDetails", {}).get("byproducts", [])}
        r.run("provenance/record", "provenance.json", lambda: _equal(
            "sha256 of provenance.json vs the provenance statement's byproduct",
            byproducts.get(attest.PROVENANCE_RECORD, {}).get("digest", {}).get("sha256"),
            sha256_file(root / "provenance.json"), hint="provenance.json was edited after signing"))
        if lock_text is not None:
            def consistent() -> None:
                expected = attest.resolved_dependencies(prov, project_repository=cfg.source_url, lock_text=lock_text)
                diff = _first_difference(expected, bd.get("resolvedDependencies", []))
                if diff:
                    raise VerificationError(f"attested resolvedDependencies differ from provenance.json: {diff}")
                ext = bd.get("externalParameters", {})
                _equal("externalParameters profile/revision", (prov.profile, prov.project.commit),
                       (ext.get("profile"), ext.get("source", {}).get("revision")))
                _equal("internalParameters.slsaBuildLevel", attest.SLSA_BUILD_LEVEL,
                       bd.get("internalParameters", {}).get("slsaBuildLevel"))

            r.run("provenance/statement", rec, consistent)
    try:
        profile = cfg.profile(prov.profile)
    except ReleaseError as exc:
        r.rows.append(Check("provenance/sources", "provenance.json", FAIL, exc.one_line()))
        return
    r.run("provenance/base", "provenance.json", lambda: _equal(
        "base image of provenance.json vs the release.toml pin", _base_pin(root, profile),
        f"{prov.base.name}@{prov.base.digest}"))
    r.run("provenance/sources", "provenance.json", lambda: _sources_match(cfg, profile, prov))
    recorded = {v.source: v for v in prov.sources}

    def vendored() -> None:
        for source in cfg.sources_for(profile):
            lic = recorded[source.name].license_sha256 if source.name in recorded else None
            sources.check_vendored(source, root / "vendor", license_sha256=lic)

    r.run("vendor/files", "vendor/", vendored)


def _sources_match(cfg, profile, prov) -> None:
    wanted = {x.name: x for x in cfg.sources_for(profile)}
    recorded = {x.source: x for x in prov.sources}
    _equal("source names of provenance.json vs release.toml", sorted(wanted), sorted(recorded))
    fields = ("repository", "revision", "path", "sha256", "size", "license", "license_file")
    for name in sorted(wanted):
        pin, got = wanted[name], recorded[name]
        diff = sorted(f for f in fields if getattr(pin, f) != getattr(got, f))
        _equal(f"source {name} in provenance.json ({', '.join(diff)}) vs release.toml",
               {f: getattr(pin, f) for f in diff}, {f: getattr(got, f) for f in diff})
        if pin.license_sha256:
            _equal(f"licence sha256 of source {name} vs release.toml", pin.license_sha256, got.license_sha256)


def _lock_text(root: Path, prov) -> str:
    data = (root / prov.wheel_lock.path).read_bytes()
    _equal(f"sha256 of {prov.wheel_lock.path} vs provenance.json", prov.wheel_lock.sha256, sha256_bytes(data),
           hint="the wheel lock changed after the release")
    return data.decode()


def _audit_external(r: _Rows, s: _State) -> None:
    if s.prov is None or s.cfg is None:
        return

    def records() -> None:
        pinned = {t.task_id: t for t in s.cfg.external.tasks}
        _equal("external task ids of provenance.json vs release.toml", list(pinned),
               [e.task_id for e in s.prov.external])
        for rec in s.prov.external:
            task = pinned[rec.task_id]
            _equal(f"image of external task {rec.task_id} vs release.toml", task.image, rec.image)
            if rec.status != external.NOT_FETCHED and task.record_sha256:
                _equal(f"sha256 of external record {rec.task_id} vs release.toml", task.record_sha256, rec.sha256)
            if s.profile is not None and s.profile.external_tasks_required:
                _equal(f"status of external record {rec.task_id} (profile {s.profile.name} requires it)",
                       external.VERIFIED, rec.status)
            external.check_stored(rec, s.root / "vendor")

    r.run("external/records", "vendor/external/", records)


def _audit_sbom(r: _Rows, s: _State, registry: bool) -> None:
    path = s.att_dir / attest.SBOM_FILE
    rec = f"attestations/{attest.SBOM_FILE}"

    def valid() -> dict:
        data = path.read_bytes()
        sbom_mod.validate(data)
        return json.loads(data)

    doc = r.run("sbom/schema", rec, valid)
    if doc is None:
        return
    stmt = (s.statements or {}).get("sbom")
    if stmt is None:
        r.not_checked("sbom/attested", rec, "the SBOM statement did not verify")
    else:
        r.run("sbom/attested", rec, lambda: _equal(
            f"{rec} vs the SBOM in the signed SBOM statement (canonical JSON sha256)",
            sha256_bytes(canonical_json(stmt.get("predicate"))), sha256_bytes(canonical_json(doc)),
            hint="the SBOM file was replaced or edited after signing"))
    if s.image is None:
        return
    r.run("sbom/image", rec, lambda: _equal(
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
    _equal("number of image layers the SBOM lists vs provenance.json", image.layer_count, len(layers))
    app = [l.digest for l in image.app_layers]
    _equal("application layers the SBOM lists vs provenance.json", app, layers[len(layers) - len(app):])


def _sbom_components(r: _Rows, s: _State, doc: dict, rec: str, registry: bool) -> None:
    layout = s.root / "dist" / "oci"
    if s.cfg is None or s.prov is None or s.profile is None:
        r.not_checked("sbom/components", rec, "release.toml, provenance.json or the release statement did not load")
        return
    has_image = (layout / "blobs" / "sha256" / s.image.digest.split(":", 1)[1]).is_file()
    if not has_image and not registry:
        r.not_checked("sbom/components", rec,
                      f"the image's layers are not here (no dist/oci holding {s.image.digest}); "
                      "audit after `nox -s build`, or with --registry to pull them")
        return

    def regenerate(layout: Path) -> None:
        image = sbom_mod.open_image_by_digest(layout, s.image.digest)
        view = sbom_mod.read_view(image, s.cfg.app_dir)
        lock = s.root / s.prov.wheel_lock.path
        bom = sbom_mod.build_bom(image, view, name=s.image.name, app_dir=s.cfg.app_dir,
                                 epoch=s.prov.source_date_epoch, sources=s.cfg.sources_for(s.profile),
                                 first_party_license=sbom_mod.project_license(s.root),
                                 lock_text=lock.read_text() if lock.is_file() else "")
        regenerated = json.loads(sbom_mod.render(bom))
        _component_difference(regenerated, doc)

    if has_image:
        r.run("sbom/components", rec, lambda: regenerate(layout))
        return
    with tempfile.TemporaryDirectory(prefix="audit-pull-") as tmp:
        def pulled() -> None:
            from . import pull

            pull.pull(f"{s.image.name}@{s.image.digest}", Path(tmp) / "oci")
            regenerate(Path(tmp) / "oci")

        r.run("sbom/components", rec, pulled)


def _component_difference(expected: dict, actual: dict) -> None:
    """Name the first component that the image's layers and the SBOM file disagree on."""
    def by_ref(doc: dict) -> dict[str, str]:
        return {c.get("bom-ref"): json.dumps(c, sort_keys=True) for c in doc.get("components", [])}

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
    _equal("SBOM regenerated from the image's layers (canonical JSON sha256)",
           sha256_bytes(canonical_json(expected)), sha256_bytes(canonical_json(actual)))


def _audit_checks(r: _Rows, s: _State) -> None:
    stmt = (s.statements or {}).get("checks")
    rec = f"attestations/{attest.CHECKS_FILE}"
    if stmt is None:
        r.not_checked("checks/record", rec, "the checks statement did not verify")
        return
    pred = stmt.get("predicate", {})
    conf = (pred.get("configuration") or [{}])[0]
    r.run("checks/record", rec, lambda: _equal(
        f"sha256 of {rec} vs the checks statement", conf.get("digest", {}).get("sha256"),
        sha256_file(s.att_dir / attest.CHECKS_FILE), hint="checks.json was edited after signing"))

    def results() -> None:
        from .checks import results as results_mod

        suite = results_mod.load(s.att_dir / attest.CHECKS_FILE)
        _equal(f"passed checks of {rec} vs the statement", pred.get("passedTests"),
               sorted(c.id for c in suite.checks if c.passed))
        _equal(f"failed checks of {rec} vs the statement", pred.get("failedTests"),
               sorted(c.id for c in suite.failures))

    r.run("checks/results", rec, results)
    srec = f"attestations/checks{s.suffix}"
    r.run("checks/passed", srec, lambda: _equal(
        f"check suite result (failed: {', '.join(pred.get('failedTests', [])[:5]) or 'none'})",
        "PASSED", pred.get("result")))
    if s.image is not None:
        ran_on = str(conf.get("annotations", {}).get("image", ""))
        r.run("checks/image", srec, lambda: _equal(
            "digest of the image the check suite ran on", s.image.digest, ran_on.rpartition("@")[2]))


def _audit_registry(r: _Rows, s: _State) -> None:
    from . import publish
    from .oci import digest as oci_digest
    from .oci.registry import Reference, RegistryClient

    ref = r.run("registry/reference", "submission.json", lambda: Reference.parse(s.image.name))
    if ref is None:
        return
    client = RegistryClient(ref.registry)  # anonymous: an auditor has no credentials

    def manifest() -> None:
        fetched = client.get_manifest(ref.repository, s.image.digest)
        _equal(f"digest of the manifest served for {ref.name}@{s.image.digest}", s.image.digest,
               oci_digest.of_bytes(fetched.raw))

    r.run("registry/manifest", f"{ref.name}@{s.image.digest}", manifest)
    if s.suffix is None:
        return
    for kind, expected in (("att", lambda: attest.attestation_bundle(s.att_dir, s.suffix)),
                           ("sbom", lambda: (s.att_dir / attest.SBOM_FILE).read_bytes())):
        tag = publish.attachment_tag(s.image.digest, kind)

        def attached(kind=kind, expected=expected, tag=tag) -> None:
            payload = publish.fetch_attachment(client, ref.repository, s.image.digest, kind)
            if payload is None:
                raise VerificationError(f"tag {tag} is missing from {ref.name}")
            _equal(f"sha256 of the {tag} payload vs the records", sha256_bytes(expected()), sha256_bytes(payload))

        r.run(f"registry/{kind}", f"{ref.name}:{tag}", attached)


def verdict(rows: list[Check]) -> str:
    return "PASSED" if rows and all(c.ok for c in rows) else "FAILED"


def render_table(rows: list[Check], *, image: str | None = None, verbose: bool = False) -> str:
    """The verdict, the trust root, then one line per area (every check ID with `verbose`);
    the reason under each failed, skipped or informational check."""
    failed = [c for c in rows if not c.ok]
    skipped = [c for c in rows if c.status == SKIPPED]
    head = f"AUDIT {verdict(rows)}: {len(rows) - len(failed) - len(skipped)} ok, {len(failed)} failed"
    head += f", {len(skipped)} skipped ({', '.join(c.id for c in skipped)})" if skipped else ""
    lines = [head] + ([f"image {image}"] if image else []) + [""]
    if verbose:
        w_id = max((len(c.id) for c in rows), default=5)
        for c in rows:
            lines.append(f"{c.status.upper():7}  {c.id:<{w_id}}  {c.record}")
            if c.status != PASS and c.detail:
                lines.append(f"{'':9}-> {c.detail}")
        return "\n".join(lines)
    areas: dict[str, list[Check]] = {}
    for c in rows:
        areas.setdefault(c.id.split("/", 1)[0], []).append(c)
    for area, checks in areas.items():
        bad = [c for c in checks if c.status in (FAIL, SKIPPED)]
        state = "FAIL" if any(c.status == FAIL for c in bad) else "SKIPPED" if bad else "PASS"
        lines.append(f"{state:7}  {area:<11} {f'{len(checks) - len(bad)}/{len(checks)}':>5}  "
                     + " ".join(c.id.split("/", 1)[-1] for c in checks))
        for c in checks:
            if c.status != PASS and c.detail:
                lines.append(f"{'':9}{c.status.upper()} {c.id}: {c.detail}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    from . import vsa

    ap = argparse.ArgumentParser(prog="python -m pipeline audit",
                                 description="verify a release's records offline against a trust root")
    ap.add_argument("--records", type=Path, default=config_mod.REPO_ROOT,
                    help="directory holding release.toml, provenance.json, submission.json, locks/, "
                         "vendor/, attestations/ (default: this checkout)")
    ap.add_argument("--key", type=Path, help="trust this public key (PEM) instead of release.toml's pinned keyids")
    ap.add_argument("--identity", help="trust this sigstore certificate identity (exact, or a prefix ending in *)")
    ap.add_argument("--issuer", help="the OIDC issuer that goes with --identity")
    ap.add_argument("--registry", action="store_true",
                    help="also fetch the pushed manifest, the .att/.sbom tags and the layer blobs anonymously")
    ap.add_argument("--skip", action="append", default=[], metavar="ID",
                    help="do not run this check (reported as skipped; the VSA says it was not verified)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON instead of the table")
    ap.add_argument("--verbose", "-v", action="store_true", help="one table row per check instead of per area")
    ap.add_argument("--vsa", type=Path, help="where to write the verification summary (default: "
                                             "<records>/dist/vsa.dsse.json with --vsa-key, else dist/vsa.json)")
    ap.add_argument("--vsa-key", type=Path, help="sign the verification summary with this private key (PEM)")
    args = ap.parse_args(argv)
    auditor = trust.from_auditor(key_file=args.key, identity=args.identity, issuer=args.issuer)
    rows = audit(args.records, trust_root=auditor, registry=args.registry, skip=frozenset(args.skip))
    image = _image_ref(args.records)
    out = args.vsa or Path(args.records) / "dist" / ("vsa.dsse.json" if args.vsa_key else "vsa.json")
    written = vsa.write(out, rows, records=Path(args.records), image=image, key_path=args.vsa_key)
    if args.json:
        print(json.dumps({"result": verdict(rows), "image": image, "vsa": str(written),
                          "checks": [c.to_json() for c in rows]}, indent=2, sort_keys=True))
    else:
        print(render_table(rows, image=image, verbose=args.verbose))
        print(f"verification summary: {written}")
    if verdict(rows) != "PASSED":
        print(f"audit: FAILED ({sum(not c.ok for c in rows)} check(s))", file=sys.stderr)
        return 1
    return 0


def _image_ref(root: Path) -> str | None:
    try:
        return str(json.loads((Path(root) / "submission.json").read_text())["image"])
    except (OSError, ValueError, KeyError, TypeError):
        return None

