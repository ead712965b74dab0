"""Who may sign a release: the audit's trust root, never taken from the records themselves.

trust.toml (beside release.toml) pins it per profile:

    [trust.local]
    keyids = ["<64 hex>"]            # Ed25519 release keys (`python -m pipeline key` prints the line)

    [trust.arena]
    identity = "https://github.com/<owner>/<repo>/.github/workflows/release.yml@refs/tags/*"
    issuer = "https://token.actions.githubusercontent.com"

It is not in release.toml because it never reaches the image: pinning a new key is a
commit that moves no image digest. The auditor can replace it (`audit --key FILE`, or `--identity X --issuer Y`), as
`cosign verify` and `slsa-verifier` require. The public key published beside the
records (`attestations/release.pub.pem`) is used only as key material whose keyid,
computed from the key itself, must be one of the pinned ones; the published
`sigstore-identity.json` is never read by the audit.

Identity rule: an identity ending in `*` matches any certificate identity (SAN) that
starts with the part before the `*` and continues with a git ref name (at least one
character; no whitespace or control character, none of ~ ^ : ? * [ or a backslash,
no "..", "@{" or "//", not ending in "/", "." or ".lock"); any other identity must
equal the SAN exactly, case and all. The SAN that matched is then verified exactly by
sigstore, together with the issuer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from securesystemslib.signer import SSlibKey

from pipeline.config import REPO_ROOT, ReleaseConfig, TrustFile, TrustPins, load_trust
from pipeline.errors import ConfigError, VerificationError
from pipeline.records import signing

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"


@dataclass(frozen=True)
class Verified:
    """A verified signature: the signed payload and who signed it."""

    payload: bytes
    signer: str


@dataclass(frozen=True)
class TrustRoot:
    """Pinned key ids (or the auditor's own key), and/or a sigstore identity and issuer."""

    source: str
    keyids: tuple[str, ...] = ()
    key: SSlibKey | None = None
    identity: str | None = None
    issuer: str | None = None

    def describe(self) -> str:
        parts = []
        if self.key is not None:
            parts.append(f"key {self.key.keyid}")
        elif self.keyids:
            parts.append("keyids " + ", ".join(self.keyids))
        if self.identity:
            parts.append(f"identity {self.identity} (issuer {self.issuer})")
        return f"{'; '.join(parts) or 'nothing pinned'} [{self.source}]"


def load(path: Path) -> TrustFile:
    """A trust file (trust.toml), validated whole by its model (pipeline.config.TrustFile);
    ConfigError when it is missing, not TOML, or breaks a rule (a misspelt key in any table)."""
    return load_trust(path)


def root(pinned: TrustPins, source: str) -> TrustRoot:
    """The trust root of one validated `[trust.<profile>]` table."""
    return TrustRoot(source=source, keyids=pinned.keyids, identity=pinned.identity, issuer=pinned.issuer)


def pins(cfg: ReleaseConfig, profile: str) -> TrustRoot:
    """The trust root trust.toml (beside `cfg`'s release.toml) pins for `profile` (`[trust.<profile>]`);
    the whole file is validated, every profile's table included."""
    path = cfg.trust_path
    return root(load(path).pins(profile), f"[trust.{profile}] of {path.name}")


def own_public_key() -> Path:
    """The public half of this machine's default release key (written beside it when it is
    made, and by `python -m pipeline key`), relative to the checkout where it is inside."""
    path = signing.public_key_path(signing.DEFAULT_KEY)
    return path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path


def from_auditor(*, key_file: Path | None, identity: str | None, issuer: str | None) -> TrustRoot | None:
    """The auditor's own trust root (command line), or None to use trust.toml's."""
    if key_file is None and identity is None and issuer is None:
        return None
    if (identity is None) != (issuer is None):
        raise ConfigError("--identity and --issuer go together", actual=f"identity={identity!r}, issuer={issuer!r}")
    key = None
    if key_file is not None:
        try:
            key = signing.key_from_pem(Path(key_file).read_bytes())
        except FileNotFoundError:
            raise ConfigError(
                f"--key {key_file} does not exist",
                hint="pass the release's public key (PEM); for this machine's release key, "
                f"which it writes to {own_public_key()}, run `nox -s key` first",
            ) from None
    where = " ".join(
        p
        for p in (
            f"--key {key_file}" if key_file else "",
            f"--identity {identity} --issuer {issuer}" if identity else "",
        )
        if p
    )
    return TrustRoot(source=f"auditor {where}", key=key, identity=identity, issuer=issuer)


# What `*` stands for: a git ref name (git check-ref-format), so a SAN with a NUL, a line
# separator or a "?query" past the pinned prefix is not some tag of the pinned workflow.
_REF_NAME = re.compile(r"(?!.*(\.\.|@\{|//))(?!.*(/|\.|\.lock)$)[^\x00-\x20\x7f~^:?*\[\\\s]+")


def identity_matches(pattern: str, san: str) -> bool:
    """The identity rule of the module doc: exact, or a prefix ending in `*` then a ref name."""
    if pattern.endswith("*"):
        prefix = pattern[:-1]
        return san.startswith(prefix) and _REF_NAME.fullmatch(san[len(prefix) :]) is not None
    return san == pattern


def _envelope_keyids(data: bytes) -> list[str]:
    try:
        return sorted(s.get("keyid", "?") for s in json.loads(data).get("signatures", []))
    except (ValueError, AttributeError):
        return []


def verify_dsse(data: bytes, root: TrustRoot, *, what: str, att_dir: Path) -> Verified:
    """A DSSE envelope signed by the auditor's key or by a key whose keyid trust.toml pins."""
    claimed = ", ".join(_envelope_keyids(data)) or "no signature"
    if root.key is not None:
        key = root.key
    else:
        if not root.keyids:
            raise VerificationError(
                f"{what}: no release key is pinned ({root.source})",
                expected="keyids = [...]",
                actual=f"signed by keyid {claimed}",
                hint="pin the release keyid in trust.toml, or audit with --key FILE",
            )
        try:
            key = signing.load_published_key(att_dir)
        except VerificationError as exc:
            raise VerificationError(
                f"{what}: no key material for the pinned keyids: {exc.one_line()}",
                hint="audit with --key FILE (the release's public key)",
            ) from None
        if key.keyid not in root.keyids:
            raise VerificationError(
                f"{what} is signed by keyid {claimed}, which is not pinned ({root.source})",
                expected=", ".join(root.keyids),
                actual=f"published key {key.keyid}",
                hint="records re-signed with another key are refused; if this key is genuinely "
                "the release key, pin it in trust.toml; the records of your own release: "
                f"`nox -s audit -- --key {own_public_key()}`",
            )
    if key.keyid not in _envelope_keyids(data):
        raise VerificationError(
            f"{what} is not signed by the trusted key",
            expected=key.keyid,
            actual=f"signed by keyid {claimed}",
            hint=f"trust root: {root.describe()}",
        )
    return Verified(signing.dsse_verify(data, key, what=what), f"key {key.keyid}")


def bundle_identity(data: bytes, *, what: str) -> str:
    """The certificate identity (SAN) of a sigstore bundle, before any verification."""
    from cryptography import x509
    from sigstore.errors import Error as SigstoreError
    from sigstore.models import Bundle

    try:
        cert = Bundle.from_json(data).signing_certificate
    except (SigstoreError, ValueError) as exc:
        raise VerificationError(f"{what} is not a sigstore bundle: {exc!s}") from None
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        raise VerificationError(f"{what}: the signing certificate names no identity") from None
    names = san.get_values_for_type(x509.UniformResourceIdentifier) + san.get_values_for_type(x509.RFC822Name)
    if not names:
        raise VerificationError(f"{what}: the signing certificate names no identity")
    return names[0]


def verify_bundle(data: bytes, root: TrustRoot, *, what: str) -> Verified:
    """A sigstore bundle whose certificate identity matches the pinned identity and issuer."""
    san = bundle_identity(data, what=what)
    if not root.identity or not root.issuer:
        raise VerificationError(
            f"{what}: no sigstore identity is pinned ({root.source})",
            expected="identity + issuer",
            actual=f"signed by {san}",
            hint="pin [trust.<profile>] identity and issuer, or audit with --identity/--issuer",
        )
    if not identity_matches(root.identity, san):
        raise VerificationError(
            f"{what} is signed by {san}, which is not the pinned identity",
            expected=root.identity,
            actual=san,
            hint=f"trust root: {root.describe()}",
        )
    policy = signing.SigstorePolicy(identity=san, issuer=root.issuer)
    return Verified(signing.sigstore_verify(data, policy, what=what), f"{san} ({root.issuer})")


def verify(data: bytes, root: TrustRoot, *, what: str, att_dir: Path) -> Verified:
    """Verify one attestation file (by its suffix: DSSE envelope or sigstore bundle)."""
    if what.endswith(signing.BUNDLE_SUFFIX):
        return verify_bundle(data, root, what=what)
    return verify_dsse(data, root, what=what, att_dir=att_dir)


def pin_line(keyid: str) -> str:
    return f'keyids = ["{keyid}"]'


def unpinned_warning(pinned: TrustRoot, keyid: str) -> str | None:
    """A loud warning when the key about to sign is not among the `pinned` keyids, else None."""
    if keyid in pinned.keyids:
        return None
    return (
        f"WARNING: the release key {keyid} is not pinned in {pinned.source}: "
        f"`python -m pipeline audit` will refuse these records (signed by an unpinned key) unless it "
        f"is given the key: `nox -s audit -- --key {own_public_key()}`. "
        f"To trust this key, put this there (trust.toml) and commit it: {pin_line(keyid)}"
    )


def unpinned_identity_warning(pinned: TrustRoot, policy: signing.SigstorePolicy) -> str | None:
    """A loud warning when the sigstore identity about to sign is not the `pinned` one, else None."""
    if pinned.identity and pinned.issuer == policy.issuer and identity_matches(pinned.identity, policy.identity):
        return None
    return (
        f"WARNING: the signing identity {policy.identity} ({policy.issuer}) is not the one pinned in "
        f"{pinned.source} ({pinned.identity or 'none'} / {pinned.issuer or 'none'}): "
        "`python -m pipeline audit` will refuse these records. Sign from the pinned release workflow, "
        "or pin this identity (identity = ..., issuer = ...) in trust.toml."
    )
