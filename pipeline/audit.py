"""Offline audit of a release's records: `python -m pipeline audit [--records DIR] [--registry]`.

From the committed records alone (release.toml, provenance.json, submission.json,
locks/, vendor/, attestations/) and no network, it checks:

- every attestation's signature, against the published key (DSSE) or an identity
  and issuer policy with sigstore's embedded production trust root (bundles);
- every statement's subject = the image digest in submission.json;
- the attested SBOM = attestations/sbom.cdx.json (canonical JSON) and that SBOM
  describes the image;
- the provenance's resolvedDependencies = those re-derived from provenance.json and
  the wheel lock, and provenance.json = release.toml (base, sources, wheel lock);
- vendored files and licences re-hashed from vendor/;
- the attested check results passed.

`--registry` also fetches the pushed manifest and the `.att` / `.sbom` tags
anonymously and compares them with the records. Every check is one row of a
pass/fail table; any failure exits non-zero.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from . import attest, config as config_mod, intoto_links, provenance as provenance_mod, sbom as sbom_mod, signing, sources
from ._io import canonical_json, read_json, sha256_bytes
from .errors import ReleaseError, VerificationError

T = TypeVar("T")
BASE_LOCK = "locks/base.json"


@dataclass(frozen=True)
class Check:
    """One row of the audit: what was checked, in which record, and the outcome."""

    name: str
    record: str
    ok: bool
    detail: str = ""


class _Rows:
    """Collects rows; `run` turns a ReleaseError into a failed row instead of stopping."""

    def __init__(self) -> None:
        self.rows: list[Check] = []

    def run(self, name: str, record: str, fn: Callable[[], T]) -> T | None:
        try:
            value = fn()
        except ReleaseError as exc:
            self.rows.append(Check(name, record, False, exc.one_line()))
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.rows.append(Check(name, record, False, f"{type(exc).__name__}: {exc}"))
            return None
        self.rows.append(Check(name, record, True))
        return value

    def skip(self, name: str, record: str, why: str) -> None:
        self.rows.append(Check(name, record, False, f"not checked: {why}"))


def _equal(what: str, expected: Any, actual: Any, *, hint: str | None = None) -> None:
    if expected != actual:
        raise VerificationError(what, expected=expected, actual=actual, hint=hint)


def _by_name(deps: list[dict]) -> dict[Any, dict]:
    return {d.get("name"): d for d in deps}


def _first_difference(expected: list[dict], actual: list[dict]) -> str | None:
    """The first resource descriptor (by name) that differs, with both sides."""
    e, a = _by_name(expected), _by_name(actual)
    for name in sorted(set(e) | set(a), key=str):
        if e.get(name) != a.get(name):
            return f"{name}: expected {json.dumps(e.get(name), sort_keys=True)}, got {json.dumps(a.get(name), sort_keys=True)}"
    if expected != actual:
        return "same entries in a different order"
    return None


@dataclass(frozen=True)
class Trust:
    """How attestations are verified: the published key, or a sigstore identity policy."""

    kind: str
    suffix: str
    verify: Callable[[bytes, str], bytes]


def _trust(att_dir: Path) -> Trust:
    if (att_dir / signing.PUBLIC_KEY_FILE).exists():
        key = signing.load_published_key(att_dir)
        return Trust("key", signing.DSSE_SUFFIX, lambda data, what: signing.dsse_verify(data, key, what=what))
    if (att_dir / signing.IDENTITY_FILE).exists():
        policy = signing.SigstorePolicy.load(att_dir / signing.IDENTITY_FILE)
        return Trust("sigstore", signing.BUNDLE_SUFFIX,
                     lambda data, what: signing.sigstore_verify(data, policy, what=what))
    raise VerificationError(f"{att_dir} publishes no verification material",
                            expected=f"{signing.PUBLIC_KEY_FILE} + {signing.KEYID_FILE} or {signing.IDENTITY_FILE}",
                            actual="neither")


def _subject_digest(stmt: dict[str, Any]) -> str:
    subjects = stmt.get("subject") or []
    if len(subjects) != 1:
        raise VerificationError("statement must have exactly one subject", expected=1, actual=len(subjects))
    return "sha256:" + str(subjects[0].get("digest", {}).get("sha256"))


def _rel(root: Path, path: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def audit(root: Path, *, registry: bool = False) -> list[Check]:
    """Run every check on the records under `root`; return the rows (failures included)."""
    root = Path(root)
    att_dir = root / "attestations"
    r = _Rows()

    cfg = r.run("release config loads", "release.toml", lambda: config_mod.load(root / "release.toml"))
    prov = r.run("provenance record loads", "provenance.json",
                 lambda: provenance_mod.load(root / "provenance.json"))
    image = r.run("submission names the image by digest", "submission.json",
                  lambda: attest.Subject.from_image_ref(read_json(root / "submission.json")["image"]))
    trust = r.run("verification material published", "attestations/", lambda: _trust(att_dir))

    statements: dict[str, dict[str, Any]] = {}
    for kind, predicate_type in attest.PREDICATES.items():
        if trust is None:
            r.skip(f"{kind} signature", f"attestations/{kind}.*", "no verification material")
            continue
        path = attest.attestation_path(att_dir, kind, trust.suffix)
        rec = _rel(root, path)

        def verified(path: Path = path, rec: str = rec) -> dict[str, Any]:
            if not path.is_file():
                raise VerificationError(f"attestation {rec} is missing", hint="re-run the attest stage")
            payload = trust.verify(path.read_bytes(), rec)
            return attest.load_statement(payload, what=rec)

        stmt = r.run(f"{kind} signature ({trust.kind})", rec, verified)
        if stmt is None:
            continue
        statements[kind] = stmt
        r.run(f"{kind} predicate type", rec, lambda stmt=stmt, pt=predicate_type: _equal(
            "predicateType", pt, stmt.get("predicateType")))
        if image is not None:
            r.run(f"{kind} subject = submission image", rec, lambda stmt=stmt: _equal(
                "subject digest differs from the image in submission.json", image.digest, _subject_digest(stmt)))

    _audit_sbom(r, root, att_dir, image, statements.get("sbom"))
    if trust is not None and set(statements) == set(attest.PREDICATES):
        r.run("README = regenerated from the statements", f"attestations/{attest.README_FILE}",
              lambda: _readme_matches(att_dir, trust, statements))
    if cfg is not None and prov is not None:
        prov_rec = _rel(root, attest.attestation_path(att_dir, "provenance", trust.suffix if trust else ""))
        _audit_provenance(r, root, cfg, prov, statements.get("provenance"), prov_rec)
        _audit_vendor(r, root, cfg, prov)
    checks = statements.get("checks")
    if checks is not None:
        pred = checks.get("predicate", {})
        rec = _rel(root, attest.attestation_path(att_dir, "checks", trust.suffix if trust else ""))
        r.run("check results passed", rec, lambda: _equal(
            f"check suite result (failed: {', '.join(pred.get('failedTests', [])[:5]) or 'none'})",
            "PASSED", pred.get("result")))
        if image is not None:
            ran_on = str((pred.get("configuration") or [{}])[0].get("annotations", {}).get("image", ""))
            r.run("checks ran on the submission image", rec, lambda: _equal(
                "digest of the image the check suite ran on", image.digest, ran_on.rpartition("@")[2]))
    if trust is not None and trust.kind == "key" and (att_dir / intoto_links.LAYOUT_FILE).exists():
        r.run("in-toto layout and stage links", f"attestations/{intoto_links.LAYOUT_FILE}",
              lambda: intoto_links.verify(root, signing.load_published_key(att_dir)))
    if registry and image is not None:
        _audit_registry(r, root, att_dir, image, trust)
    return r.rows


def _audit_sbom(r: _Rows, root: Path, att_dir: Path, image, stmt: dict[str, Any] | None) -> None:
    sbom_path = att_dir / attest.SBOM_FILE
    rec = _rel(root, sbom_path)
    data = r.run("SBOM file is CycloneDX 1.6 (strict)", rec, lambda: _validated(sbom_path))
    if data is None:
        return
    doc = json.loads(data)
    if stmt is not None:
        attested = canonical_json(stmt.get("predicate"))
        r.run("attested SBOM = SBOM file", rec, lambda: _equal(
            f"{rec} differs from the SBOM in the signed sbom attestation (canonical JSON sha256)",
            sha256_bytes(attested), sha256_bytes(canonical_json(doc)),
            hint="the SBOM file was replaced or edited after signing"))
    if image is not None:
        r.run("SBOM describes the image", rec, lambda: _equal(
            "metadata.component.version and serialNumber of the SBOM",
            (image.digest, f"urn:uuid:{sbom_mod.serial_number(image.digest)}"),
            (doc.get("metadata", {}).get("component", {}).get("version"), doc.get("serialNumber"))))


def _readme_matches(att_dir: Path, trust: Trust, statements: dict[str, dict[str, Any]]) -> None:
    subj = statements["provenance"]["subject"][0]
    files = [attest.AttestationFile(kind, attest.attestation_path(att_dir, kind, trust.suffix), stmt["predicateType"],
                                    sha256_bytes(canonical_json(stmt)))
             for kind, stmt in statements.items()]
    expected = attest.readme(attest.Subject(subj["name"], "sha256:" + subj["digest"]["sha256"]), trust.kind, files)
    actual = (att_dir / attest.README_FILE).read_bytes()
    _equal(f"sha256 of attestations/{attest.README_FILE}", sha256_bytes(expected), sha256_bytes(actual),
           hint="the README was edited; regenerate it with the attest stage")


def _validated(path: Path) -> bytes:
    data = path.read_bytes()
    sbom_mod.validate(data)
    return data


def _base_pin(root: Path, cfg, profile) -> str:
    """The base the release config pins: release.toml, or locks/base.json for a local base."""
    if profile.base != "local":
        return profile.base
    from .base import load_record

    record = load_record(root / BASE_LOCK)
    if record is None:
        raise VerificationError(f"{BASE_LOCK} is missing", hint="a local-base release records its base there")
    return record.reference


def _audit_provenance(r: _Rows, root: Path, cfg, prov, stmt: dict[str, Any] | None, rec: str) -> None:
    profile = r.run("provenance profile is in release.toml", "provenance.json", lambda: cfg.profile(prov.profile))
    lock_path = root / prov.wheel_lock.path
    lock_text = r.run("wheel lock hash = provenance.json", prov.wheel_lock.path, lambda: _lock_text(lock_path, prov))
    if stmt is not None and lock_text is not None:
        pred = stmt.get("predicate", {})
        bd = pred.get("buildDefinition", {})
        expected = attest.resolved_dependencies(prov, project_repository=cfg.source_url, lock_text=lock_text)

        def deps_match() -> None:
            diff = _first_difference(expected, bd.get("resolvedDependencies", []))
            if diff:
                raise VerificationError(f"attested resolvedDependencies differ from provenance.json: {diff}")

        r.run("provenance resolvedDependencies = provenance.json", rec, deps_match)
        r.run("provenance profile and revision = provenance.json", rec, lambda: _equal(
            "externalParameters profile/revision", (prov.profile, prov.project.commit),
            (bd.get("externalParameters", {}).get("profile"),
             bd.get("externalParameters", {}).get("source", {}).get("revision"))))
        byproducts = {b.get("name"): b for b in pred.get("runDetails", {}).get("byproducts", [])}
        r.run("provenance.json = attested bytes", "provenance.json", lambda: _equal(
            "sha256 of provenance.json vs the provenance attestation's byproduct",
            byproducts.get(attest.PROVENANCE_RECORD, {}).get("digest", {}).get("sha256"),
            sha256_bytes((root / "provenance.json").read_bytes()), hint="provenance.json was edited after signing"))
        r.run("SLSA build level stated", rec, lambda: _equal(
            "internalParameters.slsaBuildLevel", attest.SLSA_BUILD_LEVEL,
            bd.get("internalParameters", {}).get("slsaBuildLevel")))
    if profile is None:
        return
    r.run("base = release.toml pin", "provenance.json", lambda: _equal(
        "base image of provenance.json", _base_pin(root, cfg, profile), f"{prov.base.name}@{prov.base.digest}"))
    wanted = {s.name: s for s in cfg.sources_for(profile)}
    recorded = {s.source: s for s in prov.sources}
    r.run("sources = release.toml", "provenance.json", lambda: _equal(
        "source names of provenance.json", sorted(wanted), sorted(recorded)))
    for name in sorted(set(wanted) & set(recorded)):
        pin, got = wanted[name], recorded[name]
        fields = ("repository", "revision", "path", "sha256", "size", "license", "license_file")

        def same(pin=pin, got=got, name=name) -> None:
            exp = {f: getattr(pin, f) for f in fields}
            act = {f: getattr(got, f) for f in fields}
            diff = {f for f in fields if exp[f] != act[f]}
            _equal(f"source {name} in provenance.json ({', '.join(sorted(diff))})",
                   {f: exp[f] for f in sorted(diff)}, {f: act[f] for f in sorted(diff)})
            if getattr(pin, "license_sha256", None):
                _equal(f"licence sha256 of source {name}", pin.license_sha256, got.license_sha256)

        r.run(f"source {name} = release.toml", "provenance.json", same)


def _lock_text(path: Path, prov) -> str:
    data = path.read_bytes()
    _equal(f"sha256 of {prov.wheel_lock.path}", prov.wheel_lock.sha256, sha256_bytes(data),
           hint="the wheel lock changed after the release")
    return data.decode()


def _audit_vendor(r: _Rows, root: Path, cfg, prov) -> None:
    try:
        profile = cfg.profile(prov.profile)
    except ReleaseError:
        return
    recorded = {s.source: s for s in prov.sources}
    for source in cfg.sources_for(profile):
        file_rel, license_rel = sources.vendor_paths(source)
        rec = f"vendor/{file_rel} + {Path(license_rel).name}"
        lic = recorded[source.name].license_sha256 if source.name in recorded else None
        r.run(f"vendored {source.name} re-hashed", rec,
              lambda source=source, lic=lic: sources.check_vendored(source, root / "vendor", license_sha256=lic))


def _audit_registry(r: _Rows, root: Path, att_dir: Path, image, trust: Trust | None) -> None:
    from . import publish
    from .oci import digest as oci_digest
    from .oci.registry import Reference, RegistryClient

    ref = r.run("image name is a registry reference", "submission.json", lambda: Reference.parse(image.name))
    if ref is None:
        return
    client = RegistryClient(ref.registry)  # anonymous: an auditor has no credentials

    def manifest() -> None:
        fetched = client.get_manifest(ref.repository, image.digest)
        _equal(f"digest of the manifest served for {ref.name}@{image.digest}", image.digest,
               oci_digest.of_bytes(fetched.raw))

    r.run("registry manifest = submission image", f"{ref.name}@{image.digest}", manifest)
    if trust is None:
        return
    for kind, expected in (("att", lambda: attest.attestation_bundle(att_dir, trust.suffix)),
                           ("sbom", lambda: (att_dir / attest.SBOM_FILE).read_bytes())):
        tag = publish.attachment_tag(image.digest, kind)

        def attached(kind=kind, expected=expected, tag=tag) -> None:
            payload = publish.fetch_attachment(client, ref.repository, image.digest, kind)
            if payload is None:
                raise VerificationError(f"tag {tag} is missing from {ref.name}")
            _equal(f"sha256 of the {tag} payload vs the records", sha256_bytes(expected()), sha256_bytes(payload))

        r.run(f"registry {kind} tag = records", f"{ref.name}:{tag}", attached)


def render_table(rows: list[Check]) -> str:
    """A fixed-width pass/fail table, one row per check, the reason under each failure."""
    w_name = max((len(c.name) for c in rows), default=5)
    w_rec = max((len(c.record) for c in rows), default=6)
    lines = [f"{'':4}  {'check':<{w_name}}  {'record':<{w_rec}}", "-" * (8 + w_name + w_rec)]
    for c in rows:
        lines.append(f"{'PASS' if c.ok else 'FAIL':4}  {c.name:<{w_name}}  {c.record:<{w_rec}}")
        if not c.ok:
            lines.append(f"      -> {c.detail}")
    failed = sum(not c.ok for c in rows)
    lines.append(f"{len(rows) - failed} passed, {failed} failed")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipeline audit",
                                 description="verify a release's records offline")
    ap.add_argument("--records", type=Path, default=config_mod.REPO_ROOT,
                    help="directory holding release.toml, provenance.json, submission.json, locks/, "
                         "vendor/, attestations/ (default: this checkout)")
    ap.add_argument("--registry", action="store_true",
                    help="also fetch the pushed manifest and the .att/.sbom tags anonymously")
    args = ap.parse_args(argv)
    rows = audit(args.records, registry=args.registry)
    print(render_table(rows))
    if any(not c.ok for c in rows):
        print(f"audit: FAILED ({sum(not c.ok for c in rows)} check(s))", file=sys.stderr)
        return 1
    return 0
