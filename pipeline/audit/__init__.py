"""Offline audit of a release's records: `python -m pipeline audit [--key FILE | --identity X --issuer Y]`.

The trust root never comes from the records: trust.toml's `[trust.<profile>]`
pins (pipeline.records.trust), or the auditor's own `--key` / `--identity` + `--issuer`.
Every record is bound to a signature by the release statement
(pipeline.records.statement); a missing statement, layout or link fails, never skips.

Each check has a stable ID (one row of the table, one entry of `--json` and of the
VSA). A check that cannot run fails ("not checked: ..."), unless the auditor names it
with `--skip ID`; it is then reported as skipped, and the verification summary says
it was not verified.

    records/files           the records (and pyproject.toml, dist/oci) are regular files, no links or
                            pipes (else nothing else runs)
    config/load, provenance/load, submission/format, submission/image   the records parse (submission.json
                            validates against the request's JSON Schema, pipeline/records/request.schema.json)
    trust/pins              trust.toml's [trust.<profile>] is well formed
    trust/root              which trust root was used (information)
    release/present         exactly one release statement (DSSE or sigstore bundle)
    release/signature       the release statement, signed by the trust root (as its predicate says)
    release/subjects        every record re-hashed against the statement; none unbound
    release/image           the statement's image = submission.json's image
    release/profile         the profile it names is in release.toml (and is the one whose pins verified it)
    {provenance,sbom,checks}/signature   each statement, signed by the same signer
    {provenance,sbom,checks}/subject     each statement is about the submission image
    readme                  attestations/README.md = regenerated
    intoto/links            layout + stage links: the release's own steps and rules (no inspections, no
                            sublayouts: the audit runs nothing it reads), in-toto rules,
                            records = last products
    intoto/expiry           the layout's expiry (information: it was valid at release)
    submission/tasks        task ids in request order (blocks, external tasks per after_block)
    submission/budgets      each task's budgets and split = release.toml's [budgets.*]
    submission/images       procedural tasks on the built image, external tasks on their pinned images
    submission/request      submission_id, dataset = the released profile's; source = the repository at
                            provenance.json's project commit; name, schema, example and finish actions
    provenance/record       provenance.json = the bytes the provenance statement binds
    provenance/statement    resolvedDependencies, profile, revision, build level = provenance.json;
                            the whole predicate (builder, buildType, signing, release parameters)
                            = the one release.toml, provenance.json and the signature give
    provenance/profile      provenance.json's profile = the release statement's
    provenance/image        provenance.json's image = the submission image
    provenance/wheel-lock   locks/runtime.txt = its pinned hash
    provenance/base         base = release.toml's pin (name, digest), or locks/base.json: digest and what
                            the local base was built from (lock sha256, suite, snapshot, .debs, mirror)
    provenance/sources      sources = release.toml's [[sources]] pins
    provenance/toolchain    the builder's toolchain = uv.lock at the recorded commit (each distribution's
                            version, file and sha256; every member of the pipeline group); the uv.lock
                            beside the records when the commit is not in a repository here
    provenance/budgets      budgets (the request's and the environment's limits) = release.toml
    provenance/tasks        each task's verification = rebuilt from checks.json (what the request leaves out)
    provenance/sizes        both size measures of every image and the release = rebuilt from the manifests
                            checks.json recorded (and release.toml's declared sizes)
    vendor/files            vendored files and licences re-hashed
    external/records        stored external records re-hashed and = release.toml pins (dataset, revision,
                            row, sha256, budgets); "verified" only against a pin
    sbom/schema             CycloneDX 1.6 strict
    sbom/attested           the SBOM file = the SBOM statement's predicate
    sbom/image              the SBOM describes the submission image
    sbom/layers             the SBOM's layer list = provenance.json's image layers
    sbom/components         the SBOM regenerated from the image's layer blobs = the file
                            (dist/oci holding the image, or --registry: pulled blobs)
    sbom/licenses           every licence valid SPDX by the license-expression library (an id, an
                            expression of SPDX ids and LicenseRef-s, or a named licence), not by the
                            SBOM code
    sbom/license-coverage   how many components carry a licence (information)
    sbom/coverage           a component for every package dpkg lists as installed, every Python
                            distribution's metadata and every application file in the image's layers,
                            and none for what the image does not hold (read apart from the SBOM writer)
    checks/record           attestations/checks.json = the checks statement's digest
    checks/results          checks.json's results = the statement's passed/failed lists (and the whole predicate)
    checks/passed           the statement says PASSED, and checks.json has passed checks and no failure
    checks/image            the checks ran on the submission image
    checks/runtimes         checks.json names every engine of [runtime] verify, each with the whole suite, the
                            isolation mode its server reported (read from its own check) and Docker's or
                            podman's defaults; provenance.json's runtimes say the same
    dataset/subjects        the statement binds exactly the dataset folder's files (card, tasks.jsonl,
                            openenv.yaml, vendored files = their pins, copies of the records = the records)
    dataset/card, dataset/tasks   README.md and tasks.jsonl regenerated from the records = the bound sha256
    dataset/manifest        the bound openenv.yaml = env/openenv.yaml of the checkout = the image's (SBOM)
    dataset/publication     provenance.json's dataset: the profile's repository; a published revision
                            exactly when the profile publishes
    dataset/folder          dist/dataset/ re-hashed file by file, nothing else in it (information when
                            it is not here: dist/ is not committed)
    registry/reference      (--registry) where the image is: the registry submission.json's image names,
                            or, for a name without one (the local profile), the running local registry
    registry/manifest       the registry serves the image manifest by its digest (anonymously)
    registry/referrers      the image's referrers, found from its digest alone (the referrers API, else
                            the `sha256-<hex>` tag index): every Sigstore bundle among them is an artifact
                            whose subject is the image; every one that claims the trust root as its signer
                            (key hint or envelope keyid; certificate identity) verifies against it (key:
                            the DSSE signature and the key hint; keyless: sigstore) and attests the image,
                            with its predicateType annotation = its statement's; at least one does
    registry/listed         the bundles the trust root signed, by predicate type, and those naming another
                            signer (another auditor's VSA): listed, not judged (information)
    registry/vsa            a verification summary (the release's self-check) signed by the trust root is
                            among them, and every such summary says PASSED
    registry/records        the bundles of the records' signed statements can be made (pipeline.records.bundles)
    registry/{release,provenance,sbom,checks}   the records' signed statement is one of those bundles

It writes a SLSA Verification Summary Attestation (pipeline.records.vsa) for the image. A release
runs this audit on its own records and attaches the summary it signs (pipeline.audit.selfcheck).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from pipeline import config as config_mod
from pipeline.audit.checks import audit_checks
from pipeline.audit.dataset import audit_dataset
from pipeline.audit.external import audit_external
from pipeline.audit.provenance import audit_provenance
from pipeline.audit.registry import audit_registry, image_location
from pipeline.audit.rows import FAIL, INFO, PASS, SKIPPED, Check, Rows, State
from pipeline.audit.sbom import audit_sbom
from pipeline.audit.signatures import audit_intoto, audit_release, audit_statements
from pipeline.audit.submission import audit_request_records, audit_submission
from pipeline.errors import ReleaseError
from pipeline.records import attest, trust
from pipeline.records import provenance as provenance_mod
from pipeline.records import statement as release_statement
from pipeline.records import submission as submission_mod

__all__ = ["Check", "INFO", "SKIPPED", "audit", "main", "render_table", "verdict"]


def audit(
    root: Path,
    *,
    trust_root: trust.TrustRoot | None = None,
    registry: bool = False,
    skip: frozenset[str] = frozenset(),
    now: datetime | None = None,
) -> list[Check]:
    """Run every check on the records under `root`; return the rows (failures included)."""
    root = Path(root)
    s = State(root=root, att_dir=root / "attestations")
    r = Rows(skip)
    r.run("records/files", "records", lambda: release_statement.check_regular(root))
    if r.rows[-1].status == FAIL:
        return r.rows  # nothing else is read: a link to /dev/zero or a pipe would hang the audit
    s.cfg = r.run("config/load", "release.toml", lambda: config_mod.load(root / "release.toml"))
    s.prov = r.run("provenance/load", "provenance.json", lambda: provenance_mod.load(root / "provenance.json"))
    s.sub = r.run("submission/format", "submission.json", lambda: submission_mod.load(root / "submission.json"))
    if s.sub is not None:
        s.image = r.run("submission/image", "submission.json", lambda: attest.Subject.from_image_ref(s.sub.image))
    audit_release(r, s, trust_root)
    audit_statements(r, s)
    audit_intoto(r, s, now)
    audit_submission(r, s)
    audit_provenance(r, s)
    audit_request_records(r, s)
    audit_external(r, s)
    image = s.image
    if registry and image is not None:
        s.registry = r.run("registry/reference", "submission.json", lambda: image_location(image.name))
    audit_sbom(r, s, registry)
    audit_checks(r, s)
    audit_dataset(r, s)
    if s.registry is not None:
        audit_registry(r, s)
    return r.rows


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
        lines.append(
            f"{state:7}  {area:<11} {f'{len(checks) - len(bad)}/{len(checks)}':>5}  "
            + " ".join(c.id.split("/", 1)[-1] for c in checks)
        )
        for c in checks:
            if c.status != PASS and c.detail:
                lines.append(f"{'':9}{c.status.upper()} {c.id}: {c.detail}")
    return "\n".join(lines)


def image_ref(root: Path) -> str | None:
    """submission.json's image for the table and the VSA subject; None when it is not a pinned
    reference (the audit rows say why), so a forged record fails the audit, not the CLI."""
    try:
        ref = str(json.loads((Path(root) / "submission.json").read_text())["image"])
        attest.Subject.from_image_ref(ref)
    except (OSError, ValueError, KeyError, TypeError, RecursionError, ReleaseError):
        return None
    return ref
