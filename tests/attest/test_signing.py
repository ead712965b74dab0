"""The release key: generated once (0600), loaded from RELEASE_SIGNING_KEY, published, verified."""

from __future__ import annotations

import json
import stat

import pytest

from pipeline import cli
from pipeline.errors import ConfigError, VerificationError
from pipeline.records import signing

STATEMENT = b'{"_type":"https://in-toto.io/Statement/v1","predicate":{},"predicateType":"x","subject":[]}'


def test_default_key_is_generated_once_with_mode_0600(tmp_path, monkeypatch):
    monkeypatch.delenv(signing.KEY_ENV, raising=False)
    monkeypatch.setattr(signing, "DEFAULT_KEY", tmp_path / ".release" / "keys" / "release.key.pem")
    first = signing.load_or_create_key()
    assert stat.S_IMODE(signing.DEFAULT_KEY.stat().st_mode) == 0o600
    second = signing.load_or_create_key()
    assert first.public_key.keyid == second.public_key.keyid
    assert first.public_key.keytype == "ed25519"
    published = signing.key_from_pem((tmp_path / ".release" / "keys" / "release.pub.pem").read_bytes())
    assert published.keyid == first.public_key.keyid


def test_key_from_environment(tmp_path, monkeypatch):
    key = signing.CryptoSigner.generate_ed25519()
    path = tmp_path / "k.pem"
    path.write_bytes(key.private_bytes)
    monkeypatch.setenv(signing.KEY_ENV, str(path))
    assert signing.load_or_create_key().public_key.keyid == key.public_key.keyid


def test_named_key_that_does_not_exist_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv(signing.KEY_ENV, str(tmp_path / "absent.pem"))
    with pytest.raises(ConfigError, match="does not exist"):
        signing.load_or_create_key()
    assert not (tmp_path / "absent.pem").exists()


def test_round_trip_through_the_published_key(tmp_path):
    signer = signing.KeySigner(signing.CryptoSigner.generate_ed25519())
    envelope = signer.sign(STATEMENT)
    signer.publish(tmp_path)
    key = signing.load_published_key(tmp_path)
    assert signing.dsse_verify(envelope, key, what="env") == STATEMENT
    doc = json.loads(envelope)
    assert doc["payloadType"] == "application/vnd.in-toto+json"
    assert doc["signatures"][0]["keyid"] == (tmp_path / "keyid").read_text().strip()


def test_wrong_payload_type_is_refused(tmp_path):
    signer = signing.KeySigner(signing.CryptoSigner.generate_ed25519())
    doc = json.loads(signer.sign(STATEMENT))
    doc["payloadType"] = "text/plain"
    with pytest.raises(VerificationError, match="payload type"):
        signing.dsse_verify(json.dumps(doc).encode(), signer.signer.public_key, what="env")


def test_signature_over_pae_not_raw_payload(tmp_path):
    """A signature over the bare payload (no DSSE pre-authentication encoding) is rejected."""
    from securesystemslib.signer import Signature

    signer = signing.KeySigner(signing.CryptoSigner.generate_ed25519())
    doc = json.loads(signer.sign(STATEMENT))
    raw_sig = signer.signer.sign(STATEMENT)
    assert isinstance(raw_sig, Signature)
    import base64

    doc["signatures"][0]["sig"] = base64.b64encode(bytes.fromhex(raw_sig.signature)).decode()
    with pytest.raises(VerificationError, match="does not verify"):
        signing.dsse_verify(json.dumps(doc).encode(), signer.signer.public_key, what="env")


def test_signer_for_profile_choice():
    assert isinstance(signing.signer_for("sigstore"), signing.SigstoreSigner)
    with pytest.raises(ConfigError):
        signing.signer_for("gpg")


def test_key_command_prints_the_pin_and_writes_the_public_key(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(signing.KEY_ENV, raising=False)
    monkeypatch.setattr(signing, "DEFAULT_KEY", tmp_path / "keys" / "release.key.pem")
    assert cli.main(["key"]) == 0
    out = capsys.readouterr().out
    key = signing.load_or_create_key()
    assert "created now" in out
    assert f'[trust.local]\nkeyids = ["{key.public_key.keyid}"]' in out
    pub = signing.key_from_pem((tmp_path / "keys" / "release.pub.pem").read_bytes())
    assert pub.keyid == key.public_key.keyid
    assert cli.main(["key", "--profile", "arena"]) == 0
    assert "existing" in capsys.readouterr().out


def test_key_public_prints_only_the_pem_an_auditor_passes_to_audit_key(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(signing.KEY_ENV, raising=False)
    monkeypatch.setattr(signing, "DEFAULT_KEY", tmp_path / "keys" / "release.key.pem")
    # Before the first release there is no key, and --public makes none: it would verify nothing.
    assert cli.main(["key", "--public"]) == ConfigError.exit_code
    assert capsys.readouterr().err.rstrip().endswith("run `nox -s release` first")
    assert not (tmp_path / "keys").exists()
    key = signing.load_or_create_key()
    assert cli.main(["key", "--public"]) == 0
    pem = capsys.readouterr().out
    assert pem.startswith("-----BEGIN PUBLIC KEY-----\n") and pem.endswith("-----END PUBLIC KEY-----\n")
    assert signing.key_from_pem(pem.encode()).keyid == key.public_key.keyid
    assert (tmp_path / "keys" / "release.pub.pem").read_text() == pem


def test_unpinned_release_key_warning_says_how_to_pin_it(tmp_path):
    from pipeline import config as config_mod
    from pipeline import plan
    from pipeline.records import trust

    from .conftest import make_records

    rec = make_records(tmp_path / "r")
    cfg = config_mod.load(rec.root / "release.toml")
    pins = plan.resolve(cfg, "test").trust()
    assert trust.unpinned_warning(pins, rec.signer.keyid) is None
    other = signing.CryptoSigner.generate_ed25519().public_key.keyid
    warning = trust.unpinned_warning(pins, other)
    assert warning.startswith(f"WARNING: the release key {other} is not pinned in [trust.test] of trust.toml")
    assert f'keyids = ["{other}"]' in warning
    assert "`nox -s audit -- --key .release/keys/release.pub.pem`" in warning


def test_unpinned_sigstore_identity_warning(tmp_path):
    from pipeline import config as config_mod
    from pipeline import plan
    from pipeline.records import trust

    from .conftest import make_records

    rec = make_records(tmp_path / "r")
    toml = rec.root / "release.toml"
    toml.write_text(
        toml.read_text().replace(
            "[profiles.test]",
            '[profiles.arena]\nregistry = "r.invalid"\n'
            'repository = "a/b"\ntag = "t"\nbase = "local"\ntasks = "first-party"\n'
            'signing = "sigstore"\nexternal_tasks_required = false\nsubmission_id = "x"\n'
            'dataset = "a/b"\n\n[profiles.test]',
        )
    )
    cfg = config_mod.load(toml)
    workflow = "https://github.com/akseljoonas/openenv-arena-release/.github/workflows/release.yml"
    good = signing.SigstorePolicy(f"{workflow}@refs/tags/v1.2", "https://token.actions.githubusercontent.com")
    arena = plan.resolve(cfg, "arena").trust()
    assert trust.unpinned_identity_warning(arena, good) is None
    branch = signing.SigstorePolicy(f"{workflow}@refs/heads/main", good.issuer)
    assert trust.unpinned_identity_warning(arena, branch).startswith(
        f"WARNING: the signing identity {branch.identity} ({branch.issuer}) is not the one pinned"
    )
    assert trust.unpinned_identity_warning(plan.resolve(cfg, "test").trust(), good) is not None  # keys only
