"""The release's audit of its own records, and the verification summary it signs and attaches.

At the end of a release, once the records are in place and their bundles attached, the
release runs the audit `nox -s audit -- --registry` runs, in-process, on its checkout: against
trust.toml's pins for the profile when they pin the release's signer; when they do not (a
fresh clone's first release: the release warned about it already), against the signer's own
key or identity, which the summary then names as its trust root. Every check must pass, but
`registry/vsa`, which looks for the very summary this writes (reported as not verified).

The summary (pipeline.records.vsa, marked `selfCheck`) is signed with the release's signer
(a DSSE envelope with the release key; keyless: a sigstore bundle, like every other
statement), written to dist/ (it is not a record: the release statement does not bind it,
and the records are not rewritten for it) and pushed as one more Sigstore bundle referrer of
the image. It is the releaser's claim about its own records, not an independent verifier's:
an auditor runs `nox -s audit` themselves, and may sign and keep their own summary.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from pipeline import audit as audit_mod
from pipeline._io import write_atomic
from pipeline.errors import VerificationError
from pipeline.records import bundles, signing, trust, vsa

VSA_CHECK = "registry/vsa"
NOT_YET = "not verified: the release signs and attaches its verification summary after this audit"
NAME = "vsa"


@dataclass(frozen=True)
class SelfCheck:
    """The release's audit of its records: the rows, and the signed summary of them."""

    rows: tuple[audit_mod.Check, ...]
    trust_root: str  # as the trust/root row names it
    signed: bytes  # the summary as signed: a DSSE envelope, or a sigstore bundle
    path: Path  # where it was written, under dist/
    attestation: bundles.Attestation  # the summary's Sigstore bundle, as pushed


def trust_root(signer, *, pinned: bool, profile: str) -> trust.TrustRoot | None:
    """The trust root the release audits its records against: None (trust.toml's pins, as
    `nox -s audit` reads them) when they pin `signer`, else the signer's own key or identity."""
    if pinned:
        return None
    source = f"the release's own signer (not pinned in [trust.{profile}] of trust.toml)"
    if isinstance(signer, signing.KeySigner):
        return trust.TrustRoot(source=source, key=signer.signer.public_key)
    policy = signer.policy()
    return trust.TrustRoot(source=source, identity=policy.identity, issuer=policy.issuer)


def audit(root: Path, *, root_of_trust: trust.TrustRoot | None, registry: bool = True) -> list[audit_mod.Check]:
    """The audit of the records under `root`, every check but the one that looks for this
    summary; VerificationError naming the first failure unless every check passed."""
    rows = [
        replace(c, detail=NOT_YET) if c.id == VSA_CHECK and c.status == audit_mod.SKIPPED else c
        for c in audit_mod.audit(root, trust_root=root_of_trust, registry=registry, skip=frozenset({VSA_CHECK}))
    ]
    failed = [c for c in rows if not c.ok]
    if failed:
        raise VerificationError(
            f"the release's records fail their own audit: {len(failed)} check(s), first {failed[0].id}: "
            f"{failed[0].detail}",
            hint="no verification summary was signed or attached; `nox -s audit -- --registry --verbose` "
            "prints every check",
        )
    return rows


def run(
    root: Path, *, signer, pinned: bool, profile: str, image: str, out_dir: Path, registry: bool = True
) -> SelfCheck:
    """Audit the records under `root`, then sign the summary with `signer` and write it to
    `out_dir` (vsa.release.dsse.json, or .sigstore.json keyless)."""
    rows = audit(root, root_of_trust=trust_root(signer, pinned=pinned, profile=profile), registry=registry)
    stmt = vsa.statement(rows, records=root, image=image, self_check=True)
    signed = signer.sign(stmt)
    path = Path(out_dir) / f"{NAME}.release{signer.suffix}"
    write_atomic(path, signed)
    att = bundles.of_signed(NAME, signed, signer.suffix, what=f"dist/{path.name}")
    described = next((c.detail for c in rows if c.id == "trust/root"), "")
    return SelfCheck(tuple(rows), described, signed, path, att)


def attach(client, repository: str, image_digest: str, check: SelfCheck):
    """Push the summary as a Sigstore bundle referrer of the image (referrers.Pushed)."""
    return bundles.attach_one(client, repository, image_digest, check.attestation)
