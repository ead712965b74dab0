"""Audit checks of the registry (`--registry`): the image by its digest, and its referrers.

Everything is read anonymously, as an outsider would, and from the image digest alone: the
referrers are found by the registry's referrers API or, where it has none, the referrers tag
schema's `sha256-<hex>` index. Every Sigstore bundle listed there that claims the audit's
trust root as its signer (never a key or identity the registry serves) must verify against it
and be about the image; then each statement the records hold must be one of them, and a
verification summary (the release's self-check) signed by the trust root must say PASSED.
Bundles that name another signer (another auditor's summary) are listed, not judged: they
prove nothing about the release, and anyone who may push to the repository can add one.
"""

from __future__ import annotations

import functools

from pipeline.audit.rows import Rows, State, equal
from pipeline.errors import VerificationError
from pipeline.image.oci import digest as oci_digest
from pipeline.records import bundles, vsa


def image_location(name: str):
    """Where `--registry` reads the image `name` (submission.json's, without its digest): the
    registry the name starts with, or, for a name without one (the local profile records no
    machine's address), the local registry running on this machine."""
    from pipeline.imageref import ImageRef
    from pipeline.registry import local

    if "." in name.partition("/")[0] or ":" in name.partition("/")[0]:
        return ImageRef.parse(name, registry=True)
    running = local.status()
    if running is None:
        raise VerificationError(
            f"the image {name} names no registry, and no local registry is running",
            hint="start the one the release pushed to (`nox -s registry -- start`), or audit without --registry",
        )
    return ImageRef.parse(f"{running.address}/{name}", registry=True)


def audit_registry(r: Rows, s: State) -> None:
    from pipeline.registry import referrers
    from pipeline.registry.client import RegistryClient

    ref, image, trust_root = s.registry, s.image, s.trust_root
    if ref is None or image is None:
        return  # the audit reads a registry only where submission.json's image was found (registry/reference)
    client = RegistryClient(ref.registry)  # anonymous: an auditor has no credentials
    where = f"{ref.name}@{image.digest}"

    def manifest() -> None:
        fetched = client.get_manifest(ref.repository, image.digest)
        equal(f"digest of the manifest served for {where}", image.digest, oci_digest.of_bytes(fetched.raw))

    r.run("registry/manifest", where, manifest)
    if trust_root is None:
        r.not_checked("registry/referrers", where, "no trust root to verify the bundles with")
        return

    others: list[str] = []

    def verified() -> list[bundles.Verified]:
        listing = referrers.list_referrers(client, ref.repository, image.digest)
        found = [d for d in listing.descriptors if d.artifact_type == bundles.MEDIA_TYPE]
        if not found:
            raise VerificationError(
                f"no Sigstore bundle refers to {where} ({listing.found_by})",
                expected=f"the release's {len(bundles.NAMES)} signed statements and its verification summary",
                actual=f"{len(listing.descriptors)} referrer(s) of other types",
                hint="a release attaches them; push the records' bundles again with `python -m pipeline release`",
            )
        out = []
        for desc in found:
            what = f"referrer {desc.digest} ({listing.found_by})"
            got = referrers.fetch_referrer(
                client,
                ref.repository,
                desc,
                image.digest,
                artifact_type=bundles.MEDIA_TYPE,
                media_type=bundles.MEDIA_TYPE,
            )
            ours, who = bundles.claimed_signer(got.payload, trust_root)
            if not ours:
                others.append(
                    f"{desc.digest} ({got.manifest.annotations.get(bundles.PREDICATE_TYPE, '?')}) signed by {who}"
                )
                continue
            equal(
                f"{what}: annotation {bundles.CONTENT}",
                bundles.DSSE_CONTENT,
                got.manifest.annotations.get(bundles.CONTENT),
            )
            v = bundles.verify(got.payload, trust_root, what=what, att_dir=s.att_dir)
            bundles.about(v.statement, image.digest, what=what)
            equal(
                f"{what}: annotation {bundles.PREDICATE_TYPE} vs the signed statement's predicateType",
                v.statement.get("predicateType"),
                got.manifest.annotations.get(bundles.PREDICATE_TYPE),
            )
            out.append(v)
        if not out:
            raise VerificationError(
                f"none of the {len(found)} Sigstore bundle(s) referring to {where} "
                f"({listing.found_by}) claims the trust root as its signer",
                expected=trust_root.describe(),
                actual="; ".join(others),
                hint="audit with the release's own trust root (--key, or --identity "
                "and --issuer), or attach the release's bundles",
            )
        return out

    pulled = r.run("registry/referrers", where, verified)
    if pulled is not None:
        r.run("registry/listed", where, lambda: _listed(pulled, others), info=True)
        r.run("registry/vsa", where, lambda: _summary(pulled, where))
    suffix = s.suffix
    if pulled is None or suffix is None:
        return
    records = r.run("registry/records", "attestations/", lambda: bundles.of_records(s.att_dir, suffix))
    for att in records or ():
        r.run(
            f"registry/{att.name}", f"attestations/{att.name}{suffix}", functools.partial(_pushed, att, pulled, where)
        )


def _listed(pulled: list[bundles.Verified], others: list[str]) -> str:
    """The bundles found: how many the trust root signed (their predicate types), and the others."""
    types = ", ".join(str(v.statement.get("predicateType")) for v in pulled)
    line = f"{len(pulled)} Sigstore bundle(s) signed by the trust root: {types}"
    if others:
        line += f"; {len(others)} signed by others, not checked (they prove nothing about the release): " + "; ".join(
            others
        )
    return line


def _summary(pulled: list[bundles.Verified], where: str) -> None:
    """A verification summary signed by the trust root is among the bundles, and every one of
    them says PASSED (its subject, the image, was checked with every bundle's)."""
    summaries = [v for v in pulled if v.statement.get("predicateType") == vsa.PREDICATE_TYPE]
    if not summaries:
        raise VerificationError(
            f"no verification summary signed by the trust root refers to {where}",
            expected=f"a {vsa.PREDICATE_TYPE} bundle (the release's self-check)",
            actual=f"{len(pulled)} other bundle(s)",
            hint="a release audits its records and attaches the summary it signs; release again to attach one",
        )
    for v in summaries:
        predicate = v.statement.get("predicate")
        result = predicate.get("verificationResult") if isinstance(predicate, dict) else None
        equal(f"the verification summary signed by {v.signer} for {where}: verificationResult", "PASSED", result)


def _pushed(att: bundles.Attestation, pulled: list[bundles.Verified], where: str) -> None:
    if not any(v.envelope == att.envelope for v in pulled):
        raise VerificationError(
            f"the signed {att.name} statement of the records is not among the bundles referring to {where}",
            expected=f"a bundle of {att.predicate_type} with the records' signature",
            actual=f"{len(pulled)} verified bundle(s), none with it",
            hint="the records and the registry differ: push the records' bundles (a release attaches them)",
        )
