"""The release's signed statements as Sigstore bundles v0.3, pushed as referrers of the image.

Every DSSE envelope the release signs (the release statement, the SLSA provenance, the
CycloneDX SBOM and the check results) becomes one Sigstore bundle
(`application/vnd.dev.sigstore.bundle.v0.3+json`), the unit cosign v3, sigstore-js and
sigstore-python read:

- key-signed (the local profile): the DSSE envelope of `attestations/<name>.dsse.json`,
  unchanged, with `verificationMaterial.publicKey.hint` = the release keyid and no
  transparency-log entry (the local profile logs nowhere); built and parsed with
  sigstore-python's protobuf models (`sigstore_models`);
- keyless (the arena profile): `attestations/<name>.sigstore.json` as it is, the bundle
  sigstore signed (Fulcio certificate, Rekor entry).

Each is pushed as an OCI 1.1 referrer of the image manifest
(pipeline.registry.referrers) with the annotations `dev.sigstore.bundle.content:
dsse-envelope` and `dev.sigstore.bundle.predicateType`. A fifth, not one of the records, is
the SLSA verification summary the release signs after auditing its own records
(pipeline.audit.selfcheck; `attach_one`). `verify` checks a bundle pulled back against the
audit's trust root, never against anything the registry serves; `claimed_signer` tells the
bundles that claim the trust root's signer (each must then verify) from those others signed
(another auditor's summary, say), which the audit lists without judging.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import ConfigError, VerificationError
from pipeline.image.oci import digest as oci_digest
from pipeline.records import attest, signing, trust
from pipeline.records import statement as release_statement

MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
CONTENT = "dev.sigstore.bundle.content"
PREDICATE_TYPE = "dev.sigstore.bundle.predicateType"
DSSE_CONTENT = "dsse-envelope"
# The attestations of a release, in the order they are pushed; `checks` only where the
# release signed check results.
NAMES = (release_statement.NAME, *attest.PREDICATES)


@dataclass(frozen=True)
class Attestation:
    """One signed statement of the records, as the bundle pushed for it."""

    name: str
    predicate_type: str
    bundle: bytes
    envelope: dict[str, Any]  # the DSSE envelope (JSON object) the bundle carries


def _models():
    from sigstore_models.bundle.v1 import Bundle

    return Bundle


def parse(data: bytes, *, what: str) -> Any:
    """A Sigstore bundle v0.3 holding a DSSE envelope (sigstore_models' Bundle), or VerificationError."""
    bundle_model = _models()
    try:
        bundle = bundle_model.from_json(data)
    except ValueError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise VerificationError(
            f"{what} is not a Sigstore bundle: {first}",
            hint="a release pushes one Sigstore bundle v0.3 per signed statement",
        ) from None
    if bundle.media_type != MEDIA_TYPE:
        raise VerificationError(f"{what}: bundle media type", expected=MEDIA_TYPE, actual=bundle.media_type)
    if bundle.dsse_envelope is None:
        raise VerificationError(f"{what} holds no DSSE envelope", expected=DSSE_CONTENT, actual="message signature")
    return bundle


def key_bundle(envelope: bytes, *, what: str) -> bytes:
    """The bundle of a DSSE envelope signed with the release key: the envelope as signed, the
    signing keyid as the public-key hint, no transparency-log entry (compact JSON)."""
    try:
        env = json.loads(envelope)
        sigs = env["signatures"]
        keyid = sigs[0]["keyid"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise ConfigError(f"{what} is not a signed DSSE envelope: {exc!s}") from None
    if len(sigs) != 1:
        raise ConfigError(
            f"{what} carries {len(sigs)} signatures",
            expected="one, by the release key",
            actual=", ".join(str(s.get("keyid")) for s in sigs),
        )
    doc = {
        "mediaType": MEDIA_TYPE,
        "verificationMaterial": {"publicKey": {"hint": keyid}, "tlogEntries": []},
        "dsseEnvelope": {
            "payload": env["payload"],
            "payloadType": env["payloadType"],
            "signatures": [{"sig": sigs[0]["sig"], "keyid": keyid}],
        },
    }
    try:
        bundle = _models().from_dict(doc)
    except ValueError as exc:
        raise ConfigError(f"{what} does not make a Sigstore bundle: {exc!s}") from None
    return bundle.to_json().encode()


def envelope_of(data: bytes) -> dict[str, Any]:
    """The DSSE envelope of a bundle, as the JSON object a `.dsse.json` file holds (unverified)."""
    env = json.loads(data)["dsseEnvelope"]
    return {
        "payload": env["payload"],
        "payloadType": env["payloadType"],
        "signatures": [{k: s[k] for k in ("keyid", "sig") if k in s} for s in env["signatures"]],
    }


def predicate_type(envelope: dict[str, Any], *, what: str) -> str:
    """The predicate type the (unverified) statement of an envelope names: for the annotation."""
    try:
        return str(json.loads(base64.b64decode(envelope["payload"]))["predicateType"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{what} holds no in-toto statement with a predicateType: {exc!s}") from None


def of_records(att_dir: Path, suffix: str) -> list[Attestation]:
    """The bundle of every signed statement under `att_dir` (release first); the release
    statement, the provenance and the SBOM must be there."""
    out = []
    for name in NAMES:
        path = Path(att_dir) / f"{name}{suffix}"
        what = f"attestations/{path.name}"
        if not path.is_file():
            if name == "checks":
                continue
            raise ConfigError(f"{what} is missing", hint="write the records (a release signs them) before pushing")
        out.append(of_signed(name, path.read_bytes(), suffix, what=what))
    return out


def referrer_annotations(predicate: str) -> dict[str, str]:
    """The referrer manifest's annotations of a DSSE bundle of `predicate`."""
    return {CONTENT: DSSE_CONTENT, PREDICATE_TYPE: predicate}


def of_signed(name: str, data: bytes, suffix: str, *, what: str) -> Attestation:
    """The bundle of one signed statement (a record, or the release's own verification
    summary): a DSSE envelope (`suffix` .dsse.json) or a sigstore bundle."""
    if suffix == signing.BUNDLE_SUFFIX:
        bundle = data
        parse(bundle, what=what)
    else:
        bundle = key_bundle(data, what=what)
    envelope = envelope_of(bundle)
    return Attestation(name, predicate_type(envelope, what=what), bundle, envelope)


def attach_one(client, repository: str, image_digest: str, att: Attestation):
    """Push one bundle as a referrer of `image_digest` (pipeline.registry.referrers.Pushed)."""
    from pipeline.registry import referrers

    return referrers.push_referrer(
        client,
        repository,
        image_digest,
        artifact_type=MEDIA_TYPE,
        payload=att.bundle,
        media_type=MEDIA_TYPE,
        annotations=referrer_annotations(att.predicate_type),
    )


def attach(client, repository: str, image_digest: str, att_dir: Path, *, suffix: str) -> list:
    """Push every signed statement under `att_dir` as a bundle referrer of `image_digest`;
    the referrers pushed (pipeline.registry.referrers.Pushed), release statement first."""
    return [attach_one(client, repository, image_digest, a) for a in of_records(att_dir, suffix)]


def claimed_signer(data: bytes, root: trust.TrustRoot) -> tuple[bool, str]:
    """Whether a bundle claims to be signed by the trust root's signer, and who it names, read
    before any verification: a key-signed bundle's public-key hint and envelope keyids, a
    keyless one's certificate identity. Claiming is not proof: a bundle that claims the trust
    root (or names no one this can read) must verify; one that names another signer is someone
    else's (another auditor's summary) and proves nothing either way about the release."""
    try:
        doc = json.loads(data)
        material = doc.get("verificationMaterial") or {}
        hint = (material.get("publicKey") or {}).get("hint") if "publicKey" in material else None
        keyids = {s.get("keyid") for s in (doc.get("dsseEnvelope") or {}).get("signatures") or []}
    except (ValueError, AttributeError, TypeError):
        return True, "unreadable"
    if "publicKey" in material:
        trusted = {root.key.keyid} if root.key is not None else set(root.keyids)
        named = sorted(k for k in {hint, *keyids} if isinstance(k, str))
        return bool(trusted & set(named)), "keyid " + (", ".join(named) or "none")
    if "certificate" in material or "x509CertificateChain" in material:
        try:
            san = trust.bundle_identity(data, what="bundle")
        except VerificationError:
            return True, "an unreadable certificate"
        return bool(root.identity and trust.identity_matches(root.identity, san)), san
    return True, "no signer"


@dataclass(frozen=True)
class Verified:
    """A bundle verified against the trust root: its statement, signer and envelope."""

    statement: dict[str, Any]
    signer: str
    envelope: dict[str, Any]


def verify(data: bytes, root: trust.TrustRoot, *, what: str, att_dir: Path) -> Verified:
    """Verify a bundle against the audit's trust root: a key-signed bundle's DSSE envelope with
    the pinned (or the auditor's) release key, its hint naming that key; a keyless one with
    sigstore (certificate chain, Rekor entry, the pinned identity). Returns the statement."""
    bundle = parse(data, what=what)
    envelope = envelope_of(data)
    if bundle.verification_material.public_key is not None:
        v = trust.verify_dsse(json.dumps(envelope).encode(), root, what=what, att_dir=att_dir)
        hint = bundle.verification_material.public_key.hint
        keyid = v.signer.removeprefix("key ")
        if hint != keyid:
            raise VerificationError(
                f"{what}: the public-key hint names another key than the one that signed", expected=keyid, actual=hint
            )
    elif bundle.verification_material.certificate is not None:
        v = trust.verify_bundle(data, root, what=what)
    else:
        raise VerificationError(
            f"{what}: neither a public-key hint nor a signing certificate",
            expected="publicKey or certificate",
            actual="x509CertificateChain",
        )
    return Verified(attest.load_statement(v.payload, what=what), v.signer, envelope)


def about(statement: dict[str, Any], image_digest: str, *, what: str) -> None:
    """VerificationError unless the statement's first subject is the image `image_digest`."""
    subjects = statement.get("subject") or [{}]
    actual = subjects[0].get("digest", {}).get("sha256") if isinstance(subjects[0], dict) else None
    if actual != oci_digest.hex_of(image_digest):
        raise VerificationError(
            f"{what}: the signed statement is about another artifact",
            expected=f"subject sha256 {oci_digest.hex_of(image_digest)}",
            actual=f"subject sha256 {actual}",
            hint="a bundle listed for this image must attest this image",
        )
