"""Audit checks of signatures and bindings: the release statement against the trust root, each
statement by the same signer, the README, and the in-toto layout and links."""

from __future__ import annotations

import base64
import functools
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from pipeline import config as config_mod
from pipeline import plan
from pipeline._io import canonical_json, sha256_bytes, sha256_file
from pipeline.audit.rows import Rows, State, equal, subject_digest
from pipeline.errors import VerificationError
from pipeline.records import (
    attest,
    signing,
    trust,
)
from pipeline.records import (
    links as intoto_links,
)
from pipeline.records import (
    statement as release_statement,
)


def peek_profile(path: Path) -> str | None:
    """The profile an (unverified) release statement names: only to choose which pins apply."""
    try:
        doc = json.loads(path.read_bytes())
        env = doc.get("dsseEnvelope", doc)
        return json.loads(base64.b64decode(env["payload"]))["predicate"]["profile"]
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None


def release_file(att_dir: Path) -> Path:
    found = [
        release_statement.path(att_dir, s)
        for s in (signing.DSSE_SUFFIX, signing.BUNDLE_SUFFIX)
        if release_statement.path(att_dir, s).is_file()
    ]
    if len(found) != 1:
        raise VerificationError(
            "attestations/release.dsse.json or release.sigstore.json is missing"
            if not found
            else "both a DSSE and a sigstore release statement are present",
            expected="exactly one release statement",
            actual=", ".join(p.name for p in found) or "none",
            hint="every release writes one; records without it are incomplete or tampered with",
        )
    return found[0]


def audit_release(r: Rows, s: State, auditor: trust.TrustRoot | None) -> None:
    rel_path = r.run("release/present", "attestations/release.*", lambda: release_file(s.att_dir))
    profile_name = (peek_profile(rel_path) if rel_path else None) or (s.prov.profile if s.prov else None) or "local"
    if auditor is not None:
        s.trust_root = auditor
    elif s.cfg is not None:
        s.trust_root = r.run("trust/pins", config_mod.TRUST_FILE, lambda: trust.pins(s.cfg, profile_name))
    trust_root = s.trust_root
    if trust_root is not None:
        r.run("trust/root", config_mod.TRUST_FILE if auditor is None else "(auditor)", trust_root.describe, info=True)
    if rel_path is None or trust_root is None:
        r.not_checked("release/signature", "attestations/release.*", "no release statement or no trust root")
        return
    rec = f"attestations/{rel_path.name}"
    suffix = signing.BUNDLE_SUFFIX if rel_path.name.endswith(signing.BUNDLE_SUFFIX) else signing.DSSE_SUFFIX
    s.suffix = suffix

    def verified() -> dict[str, Any]:
        v = trust.verify(rel_path.read_bytes(), trust_root, what=rec, att_dir=s.att_dir)
        stmt = attest.load_statement(v.payload, what=rec)
        if s.cfg is not None:
            equal(
                f"{rec}: predicateType", release_statement.predicate_type(s.cfg.source_url), stmt.get("predicateType")
            )
        _predicate_is_object(stmt, rec)
        equal(
            f"{rec}: predicate.signing (how the statement says it was signed)",
            signing.signing_kind(suffix),
            stmt["predicate"].get("signing"),
        )
        s.signer = v
        return stmt

    release = s.release = r.run("release/signature", rec, verified)
    if release is None:
        return
    r.run("release/subjects", rec, lambda: release_statement.check_subjects(s.root, release))
    image = s.image
    if image is not None:
        r.run(
            "release/image",
            rec,
            lambda: equal(
                "the release statement's image differs from submission.json's",
                image.to_json(),
                (release.get("subject") or [{}])[0],
            ),
        )
    if s.cfg is not None:

        def profile():
            named = release["predicate"]["profile"]
            if auditor is None:
                # The pins were chosen from the unverified file: a key pinned for one profile must
                # not sign a release that names another.
                equal(
                    f"the profile {rec} names vs the profile whose [trust.<profile>] pins verified it",
                    profile_name,
                    named,
                    hint="a signer is trusted only for the profile it is pinned for",
                )
            return plan.resolve(s.cfg, named)

        s.plan = r.run("release/profile", rec, profile)


def _predicate_is_object(stmt: dict[str, Any], rec: str) -> None:
    if not isinstance(stmt.get("predicate"), dict):
        raise VerificationError(
            f"{rec}: the predicate is not a JSON object", expected="object", actual=type(stmt.get("predicate")).__name__
        )


def audit_statements(r: Rows, s: State) -> None:
    statements: dict[str, dict[str, Any]] = {}
    s.statements = statements
    signer, trust_root, image = s.signer, s.trust_root, s.image
    for kind, predicate_type in attest.PREDICATES.items():
        suffix = s.suffix or signing.DSSE_SUFFIX
        path = attest.attestation_path(s.att_dir, kind, suffix)
        rec = f"attestations/{path.name}"
        # A verified release statement (the signer) was verified against the trust root.
        if signer is None or trust_root is None:
            r.not_checked(f"{kind}/signature", rec, "the release statement did not verify")
            continue

        def verified(path: Path = path, rec: str = rec, pt: str = predicate_type) -> dict[str, Any]:
            if not path.is_file():
                raise VerificationError(f"{rec} is missing", hint="every release signs it; the records are incomplete")
            v = trust.verify(path.read_bytes(), trust_root, what=rec, att_dir=s.att_dir)
            equal(f"{rec} is signed by another signer than the release statement", signer.signer, v.signer)
            stmt = attest.load_statement(v.payload, what=rec)
            equal(f"{rec}: predicateType", pt, stmt.get("predicateType"))
            _predicate_is_object(stmt, rec)
            return stmt

        stmt = r.run(f"{kind}/signature", rec, verified)
        if stmt is None:
            continue
        statements[kind] = stmt
        if image is not None:
            r.run(f"{kind}/subject", rec, functools.partial(_subject_is, image, stmt))
    if signer is not None and s.cfg is not None and set(statements) == set(attest.PREDICATES):
        r.run(
            "readme",
            f"attestations/{attest.README_FILE}",
            lambda: _readme_matches(s, statements, signer, s.suffix or signing.DSSE_SUFFIX),
        )


def _subject_is(image: attest.Subject, stmt: dict[str, Any]) -> None:
    equal("subject digest differs from the image in submission.json", image.digest, subject_digest(stmt))


def _readme_matches(s: State, statements: dict[str, dict[str, Any]], signer: trust.Verified, suffix: str) -> None:
    subj = statements["provenance"]["subject"][0]
    files = [
        attest.AttestationFile(
            kind,
            attest.attestation_path(s.att_dir, kind, suffix),
            stmt["predicateType"],
            sha256_bytes(canonical_json(stmt)),
        )
        for kind, stmt in statements.items()
    ]
    subject = attest.Subject(subj["name"], "sha256:" + subj["digest"]["sha256"])
    if suffix == signing.DSSE_SUFFIX:
        expected = attest.readme(
            subject, "key", files, signer_id=signer.signer.removeprefix("key "), source_url=s.cfg.source_url
        )
    else:
        san, _, issuer = signer.signer.partition(" (")
        expected = attest.readme(
            subject, "sigstore", files, signer_id=san, issuer=issuer.rstrip(")"), source_url=s.cfg.source_url
        )
    equal(
        f"sha256 of attestations/{attest.README_FILE}",
        sha256_bytes(expected),
        sha256_file(s.att_dir / attest.README_FILE),
        hint="the README was edited; a release regenerates it",
    )


def _trusted_key(s: State, trust_root: trust.TrustRoot):
    if trust_root.key is not None:
        return trust_root.key
    return signing.load_published_key(s.att_dir)  # its keyid was checked against the pins already


def audit_intoto(r: Rows, s: State, now: datetime | None) -> None:
    rec = f"attestations/{intoto_links.LAYOUT_FILE}"
    release, signer, trust_root = s.release, s.signer, s.trust_root
    # A verified release statement (the signer) was verified against the trust root.
    if release is None or signer is None or trust_root is None:
        r.not_checked("intoto/links", rec, "the release statement did not verify")
        return
    key = _trusted_key(s, trust_root) if s.suffix == signing.DSSE_SUFFIX else None
    identity = None if key is not None else signer.signer.partition(" (")[0]
    note = r.run(
        "intoto/links",
        rec,
        lambda: intoto_links.verify(
            s.root,
            key=key,
            released_on=release_statement.released_on(release),
            now=now,
            identity=identity,
            suffix=s.suffix,
        ),
    )
    if note is not None:
        r.run("intoto/expiry", rec, lambda: note, info=True)
