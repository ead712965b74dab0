"""in-toto Statements about the built image, signed into `attestations/`.

Three statements share one subject, the image manifest digest:

- `provenance`: SLSA provenance v1. Its resolvedDependencies are a pure function of
  provenance.json (`resolved_dependencies`), so the audit can re-derive and compare.
- `sbom`: the CycloneDX SBOM (the predicate is the SBOM document itself).
- `checks`: the check-suite results as an in-toto test-result predicate.

Each statement is serialized as canonical JSON and signed by the profile's signer
(DSSE with the release key, or a sigstore bundle). The honest SLSA level is stated
in the provenance and in `attestations/README.md`: a build on a workstation or CI
job that signs its own provenance is Build L1.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from pipeline._io import canonical_json, sha256_bytes, sha256_file, write_atomic
from pipeline.checks.results import SuiteResult
from pipeline.config import REPO_ROOT, ReleaseConfig
from pipeline.errors import VerificationError
from pipeline.formats import utc_time
from pipeline.image.oci import digest as oci_digest
from pipeline.imageref import ImageRef
from pipeline.records import provenance as provenance_record
from pipeline.records.provenance import Provenance
from pipeline.sources.lock import allowed_hashes

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
SLSA_PROVENANCE = "https://slsa.dev/provenance/v1"
CYCLONEDX_BOM = "https://cyclonedx.org/bom"
TEST_RESULT = "https://in-toto.io/attestation/test-result/v0.1"
PREDICATES: dict[str, str] = {"provenance": SLSA_PROVENANCE, "sbom": CYCLONEDX_BOM, "checks": TEST_RESULT}
SLSA_BUILD_LEVEL = "Build L1"
SLSA_LEVEL_REASON = (
    "provenance is generated and signed by the release pipeline itself, "
    "not by an isolated, hosted build platform (SLSA v1.0 Build L2 and up)"
)
DEFAULT_DIR = REPO_ROOT / "attestations"
SBOM_FILE = "sbom.cdx.json"
CHECKS_FILE = "checks.json"
# The contract the check suite implements, by its path in the repository: the signed
# test-result statement names it, so a reader of the statement can open it at the
# recorded commit.
CHECK_SUITE_SPEC = "docs/spec/verification.md"
PROVENANCE_RECORD = "provenance.json"
README_FILE = "README.md"


@dataclass(frozen=True)
class Subject:
    """What every statement is about: the image, by manifest digest."""

    name: str
    digest: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "digest": {"sha256": oci_digest.hex_of(self.digest)}}

    @classmethod
    def from_image_ref(cls, ref: str) -> Subject:
        """`name@sha256:<hex>` (the form submission.json uses)."""
        parsed = ImageRef.parse(ref, pinned=True)
        return cls(name=parsed.name, digest=str(parsed.digest))


def statement(subject: Subject, predicate_type: str, predicate: Mapping[str, Any]) -> bytes:
    """An in-toto Statement v1, as the canonical JSON bytes that get signed."""
    return canonical_json(
        {
            "_type": STATEMENT_TYPE,
            "subject": [subject.to_json()],
            "predicateType": predicate_type,
            "predicate": predicate,
        }
    )


def build_type(cfg: ReleaseConfig) -> str:
    """The URI naming how this project builds (versioned with the pipeline's major)."""
    return f"{cfg.source_url.rstrip('/')}/build-types/oci-image/v1"


def builder_id(cfg: ReleaseConfig, signing: str) -> str:
    where = "local-key" if signing == "key" else "ci-keyless"
    return f"{cfg.source_url.rstrip('/')}/builders/{where}@v1"


# ------------------------------------------------------------------ provenance


def _sha256_hex(value: str) -> str:
    return value.split(":", 1)[1] if value.startswith("sha256:") else value


def resolved_dependencies(prov: Provenance, *, project_repository: str, lock_text: str) -> list[dict[str, Any]]:
    """SLSA ResourceDescriptors of every build input, in a fixed order.

    A pure function of provenance.json and the wheel lock it pins (the audit
    re-derives it and compares): base image by digest (and, for the locally built base, the
    lock whose .deb list pins its packages), the project's own revision,
    each vendored git source (file and licence hashes, commit), the wheel lock, then
    each wheel the lock allows.
    """
    deps: list[dict[str, Any]] = [
        {"name": "base", "uri": f"oci://{prov.base.name}", "digest": {"sha256": _sha256_hex(prov.base.digest)}},
    ]
    origin = prov.base.built_from
    if origin is not None:  # the local base: the lock whose .deb list pins its packages
        deps.append(
            {
                "name": "base-lock",
                "uri": f"file:{origin.packages_pinned_by}",
                "digest": {"sha256": origin.lock_sha256},
                "annotations": {
                    "debs": origin.debs,
                    "debianSuite": origin.debian_suite,
                    "namedAfterSnapshot": origin.named_after_snapshot,
                    "packagesFrom": origin.packages_from,
                },
            }
        )
    deps += [
        {
            "name": "project",
            "uri": f"git+{project_repository}@{prov.project.commit}",
            "digest": {"gitCommit": prov.project.commit, "gitTree": prov.project.tree},
            "annotations": {"dirty": prov.project.dirty, "allowDirty": prov.project.allow_dirty},
        },
    ]
    for s in sorted(prov.sources, key=lambda s: s.source):
        deps.append(
            {
                "name": f"source:{s.source}",
                "uri": f"git+{s.repository}@{s.revision}#{s.path}",
                "digest": {"sha256": s.sha256, "gitCommit": s.revision},
                "annotations": {
                    "size": s.size,
                    "license": s.license,
                    "licenseFile": s.license_file,
                    "licenseSha256": s.license_sha256,
                },
            }
        )
    deps.append(
        {"name": "wheel-lock", "uri": f"file:{prov.wheel_lock.path}", "digest": {"sha256": prov.wheel_lock.sha256}}
    )
    for (name, version), hashes in sorted(allowed_hashes(lock_text).items()):
        deps += [
            {"name": f"wheel:{name}", "uri": f"pkg:pypi/{name}@{version}", "digest": {"sha256": h}} for h in hashes
        ]
    return deps


def builder_dependencies(prov: Provenance) -> list[dict[str, Any]]:
    """The pipeline's toolchain as SLSA ResourceDescriptors: each distribution of the environment
    that ran the release (the signer, the SBOM writer and all they use), named by the file it was
    installed from, with that file's sha256 as uv.lock pins it."""
    return [
        {"name": d.file, "uri": f"pkg:pypi/{d.name}@{d.version}", "digest": {"sha256": d.sha256}}
        for d in prov.builder.toolchain
    ]


def provenance_predicate(
    cfg: ReleaseConfig,
    prov: Provenance,
    *,
    parameters: Mapping[str, Any],
    lock_text: str,
    signing: str,
    started: datetime,
    finished: datetime,
    invocation_id: str,
) -> dict[str, Any]:
    """SLSA provenance v1 for the image, from provenance.json, its wheel lock and release.toml.

    `parameters` is the released profile's release.toml table (the resolved plan's), the
    build's external parameters as the release engineer wrote them."""
    return {
        "buildDefinition": {
            "buildType": build_type(cfg),
            "externalParameters": {
                "profile": prov.profile,
                "release": dict(sorted(parameters.items())),
                "source": {"repository": cfg.source_url, "revision": prov.project.commit},
            },
            "internalParameters": {
                "slsaBuildLevel": SLSA_BUILD_LEVEL,
                "slsaBuildLevelReason": SLSA_LEVEL_REASON,
                "signing": signing,
                "sourceDateEpoch": prov.source_date_epoch,
            },
            "resolvedDependencies": resolved_dependencies(prov, project_repository=cfg.source_url, lock_text=lock_text),
        },
        "runDetails": {
            "builder": {
                "id": builder_id(cfg, signing),
                "version": {
                    "pipeline": prov.builder.pipeline_version,
                    "python": prov.builder.python_version,
                    "zlib": prov.builder.zlib_version,
                },
                "builderDependencies": builder_dependencies(prov),
            },
            "metadata": {
                "invocationId": invocation_id,
                "startedOn": utc_time(started),
                "finishedOn": utc_time(finished),
            },
            # provenance.json's exact bytes are one function of the record: binding their
            # hash here makes any edit of it (not only of the pinned inputs) detectable.
            "byproducts": [
                {
                    "name": PROVENANCE_RECORD,
                    "mediaType": "application/json",
                    "digest": {"sha256": sha256_bytes(provenance_record.to_json(prov))},
                }
            ],
        },
    }


# ------------------------------------------------------------------ check results


def checks_predicate(result: SuiteResult, *, checks_sha256: str) -> dict[str, Any]:
    """The in-toto test-result predicate of a check-suite run (dist/checks.json)."""
    failed = sorted(c.id for c in result.failures)
    return {
        "result": "PASSED" if result.ok else "FAILED",
        "passedTests": sorted(c.id for c in result.checks if c.passed),
        "failedTests": failed,
        # Checks that could not apply (an external task without a reference solution).
        "warnedTests": sorted(c.id for c in result.not_applicable),
        "configuration": [
            {
                "name": "checks.json",
                "digest": {"sha256": checks_sha256},
                "annotations": {"suite": CHECK_SUITE_SPEC, "image": result.image, **result.counts()},
            }
        ],
    }


# ------------------------------------------------------------------ writing the set


@dataclass(frozen=True)
class AttestationFile:
    kind: str
    path: Path
    predicate_type: str
    statement_sha256: str


def attestation_path(out_dir: Path, kind: str, suffix: str) -> Path:
    return Path(out_dir) / f"{kind}{suffix}"


def readme(
    subject: Subject,
    signing: str,
    files: Iterable[AttestationFile],
    *,
    signer_id: str,
    issuer: str = "",
    source_url: str,
) -> bytes:
    """attestations/README.md: what is signed, by whom, and how to verify it with standard tools.

    `signer_id` is the release keyid (key signing) or the certificate identity (sigstore).
    """
    files = list(files)
    digest = subject.digest
    lines = [
        "# Release attestations",
        "",
        f"Subject: `{subject.name}@{digest}`",
        "",
        f"SLSA build level: **{SLSA_BUILD_LEVEL}** ({SLSA_LEVEL_REASON}).",
        "",
        "Signing: "
        + (
            f"DSSE envelopes signed with the release key, keyid `{signer_id}` "
            "(`release.pub.pem` is a copy for other tools; trust the keyid pinned in "
            "trust.toml `[trust.<profile>]`, not this copy)."
            if signing == "key"
            else f"sigstore keyless bundles signed by `{signer_id}` (issuer `{issuer}`); "
            "trust.toml `[trust.<profile>]` pins who may sign."
        ),
        "",
        "`release" + (".dsse.json" if signing == "key" else ".sigstore.json") + "` is the release statement: "
        "its subjects are the image and the sha256 of every record (provenance.json, submission.json, "
        "this directory's files) and of every file of the dataset folder (`dist/dataset/<path>`: the card, "
        "tasks.jsonl, the vendored files and its copies of the records), so every record is bound to the "
        "signature.",
        "",
        "| statement | predicate type | statement sha256 |",
        "| --- | --- | --- |",
    ]
    lines += [f"| `{f.path.name}` | `{f.predicate_type}` | `{f.statement_sha256}` |" for f in files]
    lines += [
        "",
        "## Verify",
        "",
        "From the repository root, offline, against the trust root pinned in "
        "trust.toml (or your own: `--key FILE`, `--identity X --issuer Y`):",
        "",
        "```sh",
        "python -m pipeline audit            # table; --json for machines; writes dist/vsa.json",
        "```",
        "",
        "### With other tools",
        "",
    ]
    if signing == "key":
        lines += [
            "DSSE envelopes, with securesystemslib and the published key (check its keyid first):",
            "",
            "```sh",
            "python - <<'EOF'",
            "import json, pathlib",
            "from cryptography.hazmat.primitives.serialization import load_pem_public_key",
            "from securesystemslib.dsse import Envelope",
            "from securesystemslib.signer import SSlibKey",
            'pem = pathlib.Path("attestations/release.pub.pem").read_bytes()',
            "key = SSlibKey.from_crypto(load_pem_public_key(pem))",
            f'assert key.keyid == "{signer_id}", key.keyid',
            'for name in ("release", "provenance", "sbom", "checks"):',
            '    env = Envelope.from_dict(json.loads(pathlib.Path(f"attestations/{name}.dsse.json").read_bytes()))',
            "    env.verify([key], 1)",
            '    print(name, "signature OK")',
            "EOF",
            "```",
            "",
            "The in-toto layout and stage links, with in-toto's CLI (it also refuses an expired layout, "
            "which `pipeline audit` reports as information only), once the published key is the release "
            "key (a forger re-signing the layout and links publishes their own):",
            "",
            "```sh",
            "python -c 'import pathlib; from cryptography.hazmat.primitives.serialization import "
            "load_pem_public_key; from securesystemslib.signer import SSlibKey; "
            'key = SSlibKey.from_crypto(load_pem_public_key(pathlib.Path("attestations/release.pub.pem")'
            ".read_bytes())); "
            f'assert key.keyid == "{signer_id}", key.keyid\' && \\',
            "in-toto-verify --layout attestations/layout.json --verification-keys attestations/release.pub.pem "
            "--link-dir attestations/links",
            "```",
            "",
        ]
    else:
        lines += [
            "sigstore bundles, with the `sigstore` CLI (offline: its trust root is embedded); the last "
            "argument is a subject (the image digest, or a record file for the release statement):",
            "",
            "```sh",
        ]
        lines += [
            f"sigstore verify identity --offline --cert-identity '{signer_id}' --cert-oidc-issuer "
            f"'{issuer}' --bundle attestations/{f.path.name} {digest}"
            for f in files
        ]
        lines += [
            f"sigstore verify identity --offline --cert-identity '{signer_id}' --cert-oidc-issuer "
            f"'{issuer}' --bundle attestations/release.sigstore.json submission.json",
            "```",
            "",
        ]
    lines += [
        "Then compare `sha256sum provenance.json submission.json attestations/*.json` with the "
        "release statement's subjects.",
        "",
    ]
    lines += [
        "## In the registry",
        "",
        "Each signed statement is also pushed beside the image as a Sigstore bundle v0.3, an OCI "
        "referrer of the image manifest (`artifactType` "
        "`application/vnd.dev.sigstore.bundle.v0.3+json`), with a fifth: the release's own audit "
        "of these records as a signed SLSA verification summary (a self-check, not an independent "
        "verifier's; it is not among the records here). They are found from the image digest "
        "alone: `GET /v2/<repository>/referrers/<digest>` where the registry has the referrers "
        "API, else the index tagged `sha256-<hex of the digest>`. `python -m pipeline audit "
        '--registry` checks every one; the repository\'s README ("With sigstore-js or cosign") '
        "shows how to verify them with other Sigstore tools.",
        "",
    ]
    if signing == "key":
        workflow = f"{source_url.rstrip('/')}/.github/workflows/release.yml@refs/tags/<tag>"
        lines += [
            "A keyless release (the arena profile, signed in CI) writes `*.sigstore.json` bundles instead; "
            "verify each with the `sigstore` CLI, offline, for the release workflow's identity at the "
            "released tag (trust.toml `[trust.arena]`):",
            "",
            "```sh",
            f"sigstore verify identity --offline --cert-identity '{workflow}' --cert-oidc-issuer "
            "'https://token.actions.githubusercontent.com' --bundle attestations/provenance.sigstore.json "
            "sha256:<image digest>",
            "```",
            "",
        ]
    return "\n".join(lines).encode()


def write_readme(out_dir: Path, subject: Subject, signer, files: Iterable[AttestationFile], *, source_url: str) -> Path:
    """Write attestations/README.md for the signer that signed `files`."""
    if signer.kind == "key":
        data = readme(subject, "key", files, signer_id=signer.keyid, source_url=source_url)
    else:
        policy = signer.policy()
        data = readme(
            subject, "sigstore", files, signer_id=policy.identity, issuer=policy.issuer, source_url=source_url
        )
    out = Path(out_dir) / README_FILE
    write_atomic(out, data)
    return out


@dataclass(frozen=True)
class Evidence:
    """What the three statements say about their subject: provenance.json's record, the wheel
    lock it names, the SBOM and, once the suite ran, its results (checks.json's bytes)."""

    subject: Subject
    provenance: Provenance
    lock_text: str
    sbom_bytes: bytes
    checks: SuiteResult | None = None
    checks_bytes: bytes | None = None


@dataclass(frozen=True)
class Invocation:
    """The run that made the image, as the SLSA provenance records it: the released profile's
    release.toml table, when it started and finished, and its id (default: a new UUID)."""

    parameters: Mapping[str, Any]
    started: datetime
    finished: datetime
    invocation_id: str | None = None


def write_attestations(
    cfg: ReleaseConfig, evidence: Evidence, invocation: Invocation, *, signer, out_dir: Path = DEFAULT_DIR
) -> list[AttestationFile]:
    """Sign the three statements (checks only when results exist) into `out_dir`.

    The SBOM and the check results are written next to them so that the audit can
    compare the attested SBOM with the file (as canonical JSON) and re-hash checks.json.
    """
    out_dir = Path(out_dir)
    predicates: dict[str, Mapping[str, Any]] = {
        "provenance": provenance_predicate(
            cfg,
            evidence.provenance,
            parameters=invocation.parameters,
            lock_text=evidence.lock_text,
            signing=signer.kind,
            started=invocation.started,
            finished=invocation.finished,
            invocation_id=invocation.invocation_id or str(uuid.uuid4()),
        ),
        "sbom": json.loads(evidence.sbom_bytes),
    }
    write_atomic(out_dir / SBOM_FILE, evidence.sbom_bytes)
    if evidence.checks is not None and evidence.checks_bytes is not None:
        predicates["checks"] = checks_predicate(evidence.checks, checks_sha256=sha256_bytes(evidence.checks_bytes))
        write_atomic(out_dir / CHECKS_FILE, evidence.checks_bytes)
    written = []
    for kind, predicate in predicates.items():
        stmt = statement(evidence.subject, PREDICATES[kind], predicate)
        path = attestation_path(out_dir, kind, signer.suffix)
        write_atomic(path, signer.sign(stmt))
        written.append(AttestationFile(kind, path, PREDICATES[kind], sha256_bytes(stmt)))
    signer.publish(out_dir)
    return written


def sign_checks(result: SuiteResult, checks_file: Path, *, signer, out_dir: Path) -> Path:
    """Sign the in-toto test-result statement of `checks_file` into `out_dir`.

    The same statement the release signs (subject: the image digest; predicate: the
    verdicts and the sha256 of checks.json), signed by `signer` (key or sigstore); the
    signer's public key or identity is published next to it.
    """
    stmt = statement(
        Subject.from_image_ref(result.image),
        TEST_RESULT,
        checks_predicate(result, checks_sha256=sha256_file(checks_file)),
    )
    path = attestation_path(out_dir, "checks", signer.suffix)
    write_atomic(path, signer.sign(stmt))
    signer.publish(out_dir)
    return path


def load_statement(payload: bytes, *, what: str) -> dict[str, Any]:
    """Parse a verified payload as an in-toto Statement v1."""
    try:
        doc = json.loads(payload)
    except ValueError as exc:
        raise VerificationError(f"{what}: payload is not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("_type") != STATEMENT_TYPE:
        raise VerificationError(
            f"{what}: not an in-toto Statement v1",
            expected=STATEMENT_TYPE,
            actual=doc.get("_type") if isinstance(doc, dict) else type(doc).__name__,
        )
    return doc
