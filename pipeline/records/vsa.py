"""The audit's verdict as a SLSA Verification Summary Attestation (VSA v1) about the image.

What was verified (the input attestations with their sha256), against which policy
(release.toml, and trust.toml holding the trust root, by sha256), the result and the SLSA level verified.
Checks the auditor skipped are listed, so a summary never claims more than was checked.
Signed as a DSSE envelope with the auditor's key when one is given (`--vsa-key`);
otherwise written as the plain statement.

A release writes one too, about its own records (pipeline.audit.selfcheck), signed by the
release's signer and marked `selfCheck`: the releaser's own audit, not an independent
verifier's.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipeline import __version__
from pipeline._io import pretty_json, sha256_file, write_atomic
from pipeline.formats import utc_time
from pipeline.imageref import ImageRef
from pipeline.records import attest, signing

PREDICATE_TYPE = "https://slsa.dev/verification_summary/v1"
VERIFIER_ID = "https://github.com/akseljoonas/openenv-arena-release/pipeline/audit"
SLSA_LEVEL = "SLSA_BUILD_LEVEL_1"  # what the provenance states (attest.SLSA_BUILD_LEVEL)


SELF_CHECK = (
    "the releaser's own audit of its records, run by the release before it published them and "
    "signed with the release's signer: it says the records passed the checks listed here against "
    "the trust root named here, not that anyone independent of the releaser verified them"
)


def predicate(rows, *, records: Path, image: str, verified_on: datetime, self_check: bool = False) -> dict[str, Any]:
    """The VSA predicate for the audit rows of the records under `records` (`self_check`: the
    release's audit of its own records)."""
    passed = bool(rows) and all(c.ok for c in rows)
    att = records / "attestations"
    inputs = []
    for p in sorted(att.glob("*.json")):
        # Regular files only: a pipe or a link to /dev/zero (the audit fails on them) is never read.
        if p.name.endswith((signing.DSSE_SUFFIX, signing.BUNDLE_SUFFIX)) and p.is_file() and not p.is_symlink():
            inputs.append({"uri": f"attestations/{p.name}", "digest": {"sha256": sha256_file(p)}})

    def described(name: str) -> dict[str, Any]:
        path = records / name
        regular = path.is_file() and not path.is_symlink()
        return {"uri": name, "digest": {"sha256": sha256_file(path)} if regular else {}}

    skipped = sorted(c.id for c in rows if c.status == "skipped")
    root = next((c.detail for c in rows if c.id == "trust/root"), None)
    extra = {"selfCheck": SELF_CHECK} if self_check else {}
    return {
        "verifier": {"id": VERIFIER_ID, "version": {"pipeline": __version__}},
        "timeVerified": utc_time(verified_on),
        "resourceUri": f"oci://{image}",
        "policy": described("release.toml"),
        "inputAttestations": inputs,
        "verificationResult": "PASSED" if passed else "FAILED",
        "verifiedLevels": [SLSA_LEVEL] if passed else [],
        "dependencyLevels": {},
        "slsaVersion": "1.0",
        # Beyond the VSA fields: the pins of who may sign (unless the auditor gave their own), and
        # which checks ran, so "PASSED" can be read precisely.
        "trustPolicy": described("trust.toml"),
        "trustRoot": root,  # what the signatures were verified against (trust.toml's pins, or a given key)
        "checks": {c.id: c.status for c in rows},
        "notVerified": skipped,
        **extra,
    }


def statement(
    rows, *, records: Path, image: str | None, verified_on: datetime | None = None, self_check: bool = False
) -> bytes:
    subject = (
        attest.Subject.from_image_ref(image)
        if image and ImageRef.parse(image).digest
        else attest.Subject("unknown", "sha256:" + "0" * 64)
    )
    return attest.statement(
        subject,
        PREDICATE_TYPE,
        predicate(
            rows,
            records=records,
            image=f"{subject.name}@{subject.digest}",
            verified_on=verified_on or datetime.now(UTC),
            self_check=self_check,
        ),
    )


def write(out: Path, rows, *, records: Path, image: str | None, key_path: Path | None = None) -> Path:
    """Write the VSA: a DSSE envelope signed with `key_path`, or the bare statement."""
    stmt = statement(rows, records=records, image=image)
    if key_path is not None:
        write_atomic(out, signing.dsse_sign(stmt, signing.load_or_create_key(key_path)))
    else:
        write_atomic(out, pretty_json(json.loads(stmt)))
    return out
