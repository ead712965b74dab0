"""Stage links recorded while the stages run, chained by a layout (in-toto 3.1 rules)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from in_toto.models.metadata import Envelope, Metadata

from pipeline.errors import VerificationError
from pipeline.records import links as intoto_links

from .conftest import RELEASED_ON

RELEASED = datetime(*RELEASED_ON, tzinfo=UTC)


def _verify(rec, **kw):
    return intoto_links.verify(rec.root, key=rec.signer.signer.public_key, released_on=RELEASED, **kw)


def test_chain_verifies_and_reports_expiry_as_information(records):
    assert _verify(records, now=RELEASED).startswith("layout valid until 2024-12-31T00:00:00Z")
    assert _verify(records).startswith("layout expired 2024-12-31T00:00:00Z")


def test_sbom_changed_between_stages_breaks_the_chain(records):
    """The attest stage consumed an SBOM that the sbom stage did not produce: an in-toto MATCH rule fails."""
    root, signer = records.root, records.signer
    path = next((root / "attestations" / "links").glob("attest.*.link"))
    link = Metadata.load(str(path)).get_payload()
    link.materials["attestations/sbom.cdx.json"] = {"sha256": "0" * 64}
    env = Envelope.from_signable(link)
    signer.sign_envelope(env)
    env.dump(str(path))
    with pytest.raises(VerificationError, match="RuleVerificationError"):
        _verify(records)


def test_record_edited_after_its_stage(records):
    path = records.root / "submission.json"
    path.write_text(path.read_text().replace('"memory_gib": 1', '"memory_gib": 2', 1))
    with pytest.raises(VerificationError, match="submission.json differs from the product its stage recorded"):
        _verify(records)


def test_link_signed_by_another_key(records):
    from securesystemslib.signer import CryptoSigner

    path = next((records.root / "attestations" / "links").glob("vendor.*.link"))
    env = Envelope.from_signable(Metadata.load(str(path)).get_payload())
    env.create_signature(CryptoSigner.generate_ed25519())
    env.dump(str(path))
    with pytest.raises(VerificationError, match="ThresholdVerificationError"):
        _verify(records)


def test_unsigned_links_are_rule_checked_in_sigstore_mode(records):
    """Without a key (sigstore mode: the release statement binds the files) the rules still bite."""
    assert intoto_links.verify(records.root, key=None, released_on=RELEASED, suffix=".dsse.json")
    (records.root / "provenance.json").write_text("{}")
    with pytest.raises(VerificationError, match="provenance.json differs"):
        intoto_links.verify(records.root, key=None, released_on=RELEASED, suffix=".dsse.json")


def test_a_failed_stage_records_nothing_and_an_unrecorded_stage_stops_the_layout(tmp_path, records):
    rec = intoto_links.StageRecorder(tmp_path, tmp_path, ["python", "-m", "pipeline", "release"], ".dsse.json")
    with pytest.raises(RuntimeError):
        with rec.step("vendor"):
            raise RuntimeError("the stage failed")
    assert rec.links == {}
    with pytest.raises(VerificationError, match="stages were not recorded"):
        rec.write(
            tmp_path / "attestations",
            records.signer.functionary(),
            sign=records.signer.sign_envelope,
            released_on=RELEASED,
            days=1,
        )


def test_materials_are_hashed_when_the_stage_starts(tmp_path):
    (tmp_path / "release.toml").write_text("before")
    rec = intoto_links.StageRecorder(tmp_path, tmp_path / "staging", ["x"], ".dsse.json")
    with rec.step("vendor"):
        (tmp_path / "release.toml").write_text("changed during the stage")
        (tmp_path / "vendor").mkdir()
        (tmp_path / "vendor" / "f").write_text("product")
    link = rec.links["vendor"]
    import hashlib

    assert link.materials["release.toml"]["sha256"] == hashlib.sha256(b"before").hexdigest()
    assert set(link.products) == {"vendor/f"}


def test_layout_validity_is_a_release_toml_policy(records):
    from pipeline import config as config_mod

    cfg = config_mod.load(records.root / "release.toml")
    assert intoto_links.valid_days(cfg) == 365
    toml = records.root / "release.toml"
    toml.write_text(toml.read_text().replace("layout_valid_days = 365", "layout_valid_days = 0"))
    with pytest.raises(Exception, match="layout_valid_days"):
        intoto_links.valid_days(config_mod.load(toml))


def test_keyless_functionary_links_are_unsigned_and_verify_by_rules(tmp_path):
    """Sigstore mode: the layout names the signing identity (a sigstore-oidc key); links and
    layout carry no signature of their own (the signed release statement binds them)."""
    from securesystemslib.signer import SigstoreKey
    from securesystemslib.signer._utils import compute_default_keyid

    keyval = {
        "identity": "https://github.com/o/r/.github/workflows/release.yml@refs/tags/v1",
        "issuer": "https://token.actions.githubusercontent.com",
    }
    functionary = SigstoreKey(
        compute_default_keyid("sigstore-oidc", "Fulcio", keyval), "sigstore-oidc", "Fulcio", keyval
    )
    (tmp_path / "release.toml").write_text("x")
    rec = intoto_links.StageRecorder(tmp_path, tmp_path, ["python", "-m", "pipeline", "release"], ".sigstore.json")
    for step in ("vendor", "build", "sbom", "verify", "attest", "submission"):
        with rec.step(step):
            pass
    written = rec.write(tmp_path / "attestations", functionary, sign=lambda env: None, released_on=RELEASED, days=30)
    assert all(Metadata.load(str(p)).signatures == {} for p in written)
    layout = Metadata.load(str(tmp_path / "attestations" / "layout.json")).get_payload()
    assert layout.keys[functionary.keyid]["keyval"] == keyval
    assert intoto_links.verify(
        tmp_path, key=None, released_on=RELEASED, now=RELEASED, identity=keyval["identity"]
    ).startswith("layout valid")
    with pytest.raises(VerificationError, match="the layout names another functionary than the release signer"):
        intoto_links.verify(tmp_path, key=None, released_on=RELEASED, identity="https://github.com/x/y")


# ------------------------------------------------------------------ sigstore mode: the layout is unsigned

IDENTITY = "https://github.com/o/r/.github/workflows/release.yml@refs/tags/v1"


def _keyless_release(root):
    """A keyless release's layout and unsigned links (the release statement binds their hashes)."""
    from securesystemslib.signer import SigstoreKey
    from securesystemslib.signer._utils import compute_default_keyid

    keyval = {"identity": IDENTITY, "issuer": "https://token.actions.githubusercontent.com"}
    functionary = SigstoreKey(
        compute_default_keyid("sigstore-oidc", "Fulcio", keyval), "sigstore-oidc", "Fulcio", keyval
    )
    (root / "release.toml").write_text("x")
    rec = intoto_links.StageRecorder(root, root, ["python", "-m", "pipeline", "release"], ".sigstore.json")
    for step in ("vendor", "build", "sbom", "verify", "attest", "submission"):
        with rec.step(step):
            pass
    rec.write(root / "attestations", functionary, sign=lambda env: None, released_on=RELEASED, days=30)
    return functionary


def _sublayout_running(marker, signer=None):
    """An in-toto layout whose inspection would create `marker`: what a verifier that follows
    sublayouts runs."""
    from in_toto.models.layout import Inspection, Layout

    sub = Layout()
    sub.expires = "2099-01-01T00:00:00Z"
    sub.inspect = [Inspection(name="pwn", run=["touch", str(marker)])]
    env = Envelope.from_signable(sub)
    if signer is not None:
        env.create_signature(signer)
    return env


def test_forged_keyless_layout_delegating_to_a_sublayout_runs_nothing(tmp_path):
    """Without any key: the unsigned layout names the signer's identity on an ed25519 key of the
    attacker's, whose one link is a sublayout signed by that key. in-toto verified the sublayout
    and ran its inspection (a command from the records) on the auditor's machine, then passed."""
    from in_toto.models.layout import Layout, Step
    from securesystemslib.signer import CryptoSigner

    _keyless_release(tmp_path)
    att = tmp_path / "attestations"
    attacker = CryptoSigner.generate_ed25519()
    kid = attacker.public_key.keyid
    key = {**attacker.public_key.to_dict(), "keyid": kid}
    key["keyval"] = {**key["keyval"], "identity": IDENTITY}
    top = Layout()
    top.keys = {kid: key}
    top.expires = "2099-01-01T00:00:00Z"
    top.steps = [Step(name="vendor", pubkeys=[kid], threshold=1)]
    Envelope.from_signable(top).dump(str(att / "layout.json"))
    marker = tmp_path / "PWNED"
    _sublayout_running(marker, attacker).dump(str(att / "links" / f"vendor.{kid[:8]}.link"))
    with pytest.raises(VerificationError, match="the layout's functionary is not a sigstore identity"):
        intoto_links.verify(tmp_path, key=None, released_on=RELEASED, identity=IDENTITY)
    assert not marker.exists()


def test_a_link_replaced_by_a_sublayout_is_refused_unverified(tmp_path):
    functionary = _keyless_release(tmp_path)
    marker = tmp_path / "PWNED"
    link = tmp_path / "attestations" / "links" / intoto_links.link_name("build", functionary.keyid)
    _sublayout_running(marker).dump(str(link))
    with pytest.raises(VerificationError, match="the metadata of step build is a layout, not a link"):
        intoto_links.verify(tmp_path, key=None, released_on=RELEASED, identity=IDENTITY)
    assert not marker.exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("product", ["vendor/../../../../../../../../../../dev/zero", "/dev/zero"])
def test_unsigned_link_naming_a_product_outside_the_tree_is_never_read(records, product):
    """`ALLOW vendor/*` matches "vendor/../../dev/zero": hashing that product never ended."""
    path = next((records.root / "attestations" / "links").glob("vendor.*.link"))
    link = Metadata.load(str(path)).get_payload()
    link.products[product] = {"sha256": "0" * 64}
    Envelope.from_signable(link).dump(str(path))
    with pytest.raises(VerificationError) as exc:
        intoto_links.verify(records.root, key=None, released_on=RELEASED, suffix=".dsse.json")
    assert exc.value.one_line() == (
        "in-toto: the link of step vendor names paths outside the records tree; "
        f"expected relative paths without '..', got {product}"
    )


@pytest.mark.timeout(60)
def test_product_that_is_a_link_is_never_read(records):
    (records.root / "submission.json").unlink()
    (records.root / "submission.json").symlink_to("/dev/zero")
    with pytest.raises(VerificationError) as exc:
        intoto_links.verify(records.root, key=records.signer.signer.public_key, released_on=RELEASED)
    assert exc.value.one_line() == (
        "in-toto: the product submission.json is not a regular file; expected a regular file, got a link"
    )
