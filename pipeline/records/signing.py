"""Signers for in-toto statements: a file key (securesystemslib) or sigstore keyless.

Both take the serialized statement and return the bytes of one attestation file:
a DSSE envelope (JSON, PAE-signed, `.dsse.json`) for the key signer, a sigstore
bundle (`.sigstore.json`) for the keyless signer. Verification lives here too, so
the audit and the tests check signatures with exactly the code that defines them.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from securesystemslib import exceptions as sslib_exceptions
from securesystemslib.dsse import Envelope
from securesystemslib.signer import CryptoSigner, SSlibKey

from pipeline._io import write_atomic
from pipeline.config import REPO_ROOT
from pipeline.errors import ConfigError, VerificationError

PAYLOAD_TYPE = "application/vnd.in-toto+json"
KEY_ENV = "RELEASE_SIGNING_KEY"
DEFAULT_KEY = REPO_ROOT / ".release" / "keys" / "release.key.pem"
PUBLIC_KEY_FILE = "release.pub.pem"
KEYID_FILE = "keyid"
IDENTITY_FILE = "sigstore-identity.json"
DSSE_SUFFIX = ".dsse.json"
BUNDLE_SUFFIX = ".sigstore.json"


# ------------------------------------------------------------------ key signing


def load_or_create_key(path: Path | None = None) -> CryptoSigner:
    """The release key: `path`, else $RELEASE_SIGNING_KEY, else `.release/keys/` (created).

    A key named explicitly (argument or environment) must exist: silently making a
    new one would sign a release with a key nobody published. Only the default
    location is generated on first use (Ed25519, PKCS#8 PEM, mode 0600).
    """
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    explicit = path or (Path(os.environ[KEY_ENV]) if os.environ.get(KEY_ENV) else None)
    key_path = Path(explicit or DEFAULT_KEY)
    if not key_path.exists():
        if explicit is not None:
            raise ConfigError(
                f"signing key {key_path} does not exist",
                hint=f"point {KEY_ENV} at a PKCS#8 PEM private key, or unset it to use {DEFAULT_KEY}",
            )
        signer = CryptoSigner.generate_ed25519()
        key_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(key_path, signer.private_bytes, mode=0o600)
        # Its public half beside it, for the engineer to hand to auditors (`audit --key`).
        write_atomic(public_key_path(key_path), public_key_pem(signer.public_key))
        return signer
    try:
        private = load_pem_private_key(key_path.read_bytes(), password=None)
        return CryptoSigner(private)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"signing key {key_path} is not an unencrypted PKCS#8 PEM key: {exc}") from None


def public_key_pem(key: SSlibKey) -> bytes:
    """SubjectPublicKeyInfo PEM of a public key (what `attestations/` publishes)."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return key._crypto_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)


def key_from_pem(pem: bytes) -> SSlibKey:
    """The securesystemslib key of a PEM public key; its keyid is computed from the key."""
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    try:
        return SSlibKey.from_crypto(load_pem_public_key(pem))
    except (ValueError, TypeError) as exc:
        raise VerificationError(f"public key is not a valid PEM public key: {exc}") from None


def publish_public_key(key: SSlibKey, out_dir: Path) -> None:
    """Write `release.pub.pem` and `keyid` into the attestations directory."""
    write_atomic(Path(out_dir) / PUBLIC_KEY_FILE, public_key_pem(key))
    write_atomic(Path(out_dir) / KEYID_FILE, (key.keyid + "\n").encode())


def load_published_key(att_dir: Path) -> SSlibKey:
    """The published release key, checked against the published keyid."""
    pem_path, keyid_path = Path(att_dir) / PUBLIC_KEY_FILE, Path(att_dir) / KEYID_FILE
    for p in (pem_path, keyid_path):
        if not p.is_file():
            raise VerificationError(f"{p} is missing", hint="the release must publish its public key and keyid")
    key = key_from_pem(pem_path.read_bytes())
    published = keyid_path.read_text().strip()
    if key.keyid != published:
        raise VerificationError(f"{keyid_path} does not match {pem_path}", expected=key.keyid, actual=published)
    return key


def dsse_sign(statement: bytes, signer: CryptoSigner) -> bytes:
    """A DSSE envelope (JSON bytes) over the statement, signed over its PAE."""
    env = Envelope(payload=statement, payload_type=PAYLOAD_TYPE, signatures={})
    env.sign(signer)
    return (json.dumps(env.to_dict(), indent=2, sort_keys=True) + "\n").encode()


def dsse_verify(envelope: bytes, key: SSlibKey, *, what: str) -> bytes:
    """Verify a DSSE envelope against the key; return the payload (the statement bytes)."""
    try:
        env = Envelope.from_dict(json.loads(envelope))
    except (ValueError, KeyError, TypeError, sslib_exceptions.FormatError) as exc:
        raise VerificationError(f"{what} is not a DSSE envelope: {exc!s}") from None
    if env.payload_type != PAYLOAD_TYPE:
        raise VerificationError(f"{what} has the wrong payload type", expected=PAYLOAD_TYPE, actual=env.payload_type)
    if key.keyid not in env.signatures:
        raise VerificationError(
            f"{what} is not signed by the release key",
            expected=key.keyid,
            actual=", ".join(sorted(env.signatures)) or "no signatures",
        )
    try:
        env.verify([key], 1)
    except sslib_exceptions.VerificationError:
        raise VerificationError(
            f"{what}: signature does not verify with the release key {key.keyid[:16]}",
            hint="the payload or signature was modified, or another key signed it",
        ) from None
    return env.payload


@dataclass(frozen=True)
class KeySigner:
    """Signs statements as DSSE envelopes with a local file key."""

    signer: CryptoSigner
    kind: str = "key"
    suffix: str = DSSE_SUFFIX

    @classmethod
    def load(cls, path: Path | None = None) -> KeySigner:
        return cls(load_or_create_key(path))

    def sign(self, statement: bytes) -> bytes:
        return dsse_sign(statement, self.signer)

    def publish(self, out_dir: Path) -> None:
        publish_public_key(self.signer.public_key, out_dir)

    def sign_envelope(self, envelope) -> None:
        """Sign an in-toto metadata envelope (link or layout) with the release key."""
        envelope.create_signature(self.signer)

    def functionary(self) -> SSlibKey:
        """The key in-toto layouts name as the functionary of every step."""
        return self.signer.public_key

    @property
    def keyid(self) -> str:
        return self.signer.public_key.keyid


# ------------------------------------------------------------------ sigstore keyless


@dataclass(frozen=True)
class SigstorePolicy:
    """Who must have signed a sigstore bundle: certificate SAN and OIDC issuer."""

    identity: str
    issuer: str

    def to_json(self) -> bytes:
        return (
            json.dumps({"identity": self.identity, "issuer": self.issuer}, indent=2, sort_keys=True) + "\n"
        ).encode()

    @classmethod
    def load(cls, path: Path) -> SigstorePolicy:
        try:
            data = json.loads(Path(path).read_bytes())
            return cls(identity=data["identity"], issuer=data["issuer"])
        except FileNotFoundError:
            raise VerificationError(
                f"{path} is missing", hint="a keyless release publishes its signer identity"
            ) from None
        except (ValueError, KeyError, TypeError) as exc:
            raise VerificationError(f"{path} is not an identity policy: {exc!s}") from None


@contextmanager
def _private_sigstore_dirs() -> Iterator[None]:
    """Point sigstore's TUF data/cache dirs at a temp dir for the duration.

    `Verifier.production(offline=True)` writes its embedded trust metadata into the
    user's data and cache directories; an auditor's home must not be touched.
    """
    saved = {k: os.environ.get(k) for k in ("XDG_DATA_HOME", "XDG_CACHE_HOME")}
    with tempfile.TemporaryDirectory(prefix="sigstore-") as tmp:
        os.environ["XDG_DATA_HOME"] = os.path.join(tmp, "data")
        os.environ["XDG_CACHE_HOME"] = os.path.join(tmp, "cache")
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def sigstore_verify(bundle: bytes, policy: SigstorePolicy, *, what: str) -> bytes:
    """Verify a sigstore DSSE bundle offline against the production trust root.

    The trust root is the one embedded in the installed sigstore package; time comes
    from the transparency log's integrated time, so the result does not depend on
    today's clock or the network. Returns the statement bytes.
    """
    from sigstore.errors import Error as SigstoreError
    from sigstore.models import Bundle
    from sigstore.verify import Verifier
    from sigstore.verify import policy as sp

    try:
        parsed = Bundle.from_json(bundle)
    except (SigstoreError, ValueError) as exc:
        raise VerificationError(f"{what} is not a sigstore bundle: {exc!s}") from None
    try:
        with _private_sigstore_dirs():
            verifier = Verifier.production(offline=True)
        payload_type, payload = verifier.verify_dsse(
            parsed, sp.Identity(identity=policy.identity, issuer=policy.issuer)
        )
    except SigstoreError as exc:
        raise VerificationError(
            f"{what}: sigstore verification failed: {exc!s}",
            hint=f"expected a bundle signed by {policy.identity} ({policy.issuer}), logged in Rekor",
        ) from None
    if payload_type != PAYLOAD_TYPE:
        raise VerificationError(f"{what} has the wrong payload type", expected=PAYLOAD_TYPE, actual=payload_type)
    return payload


@dataclass(frozen=True)
class SigstoreSigner:
    """Signs statements keylessly: Fulcio certificate for an OIDC identity, Rekor entry.

    Needs sigstore's public services and an ambient OIDC token (CI) or
    $SIGSTORE_ID_TOKEN; the identity it signs as is published for the audit.
    """

    kind: str = "sigstore"
    suffix: str = BUNDLE_SUFFIX

    def _token(self):
        from sigstore.oidc import IdentityToken, detect_credential

        raw = os.environ.get("SIGSTORE_ID_TOKEN") or detect_credential()
        if not raw:
            raise ConfigError(
                "sigstore signing needs an OIDC identity token",
                hint="run in CI with id-token permission or set SIGSTORE_ID_TOKEN; "
                "or sign with the local key (--signing key)",
            )
        return IdentityToken(raw)

    def sign(self, statement: bytes) -> bytes:
        from sigstore import dsse
        from sigstore.models import ClientTrustConfig
        from sigstore.sign import SigningContext

        ctx = SigningContext.from_trust_config(ClientTrustConfig.production())
        with ctx.signer(self._token(), cache=True) as signer:
            bundle = signer.sign_dsse(dsse.Statement(statement))
        return bundle.to_json().encode()

    def policy(self) -> SigstorePolicy:
        token = self._token()
        return SigstorePolicy(identity=str(token.identity), issuer=str(token.federated_issuer))

    def publish(self, out_dir: Path) -> None:
        write_atomic(Path(out_dir) / IDENTITY_FILE, self.policy().to_json())

    def sign_envelope(self, envelope) -> None:
        """Links and layout stay unsigned here: the signed release statement binds their sha256."""

    def functionary(self):
        """The signing identity as an in-toto functionary key (sigstore-oidc)."""
        from securesystemslib.signer import SigstoreKey
        from securesystemslib.signer._utils import compute_default_keyid

        policy = self.policy()
        keyval = {"identity": policy.identity, "issuer": policy.issuer}
        keyid = compute_default_keyid(SigstoreKey.DEFAULT_KEY_TYPE, SigstoreKey.DEFAULT_SCHEME, keyval)
        return SigstoreKey(keyid, SigstoreKey.DEFAULT_KEY_TYPE, SigstoreKey.DEFAULT_SCHEME, keyval)

    @property
    def keyid(self) -> str:
        return self.functionary().keyid


def signing_kind(suffix: str | None) -> str:
    """The signing method ("key" or "sigstore") of attestation files with this suffix."""
    return "sigstore" if suffix == BUNDLE_SUFFIX else "key"


def signer_for(kind: str, *, key_path: Path | None = None) -> KeySigner | SigstoreSigner:
    """The signer a profile (or --signing flag) names: "key" or "sigstore"."""
    if kind == "key":
        return KeySigner.load(key_path)
    if kind == "sigstore":
        return SigstoreSigner()
    raise ConfigError("unknown signing method", expected="key or sigstore", actual=kind)


def public_key_path(key_path: Path) -> Path:
    """Where `python -m pipeline key` writes the public half of a private key file."""
    return key_path.with_name(key_path.name.replace(".key.pem", "") + ".pub.pem")
