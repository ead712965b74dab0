"""The offline audit passes on good records and names the record on every tamper."""

from __future__ import annotations

import base64
import json

from pipeline import attest, audit, signing
from pipeline.audit import Check


def _failures(root) -> list[Check]:
    return [c for c in audit.audit(root) if not c.ok]


def test_audit_passes_on_good_records(records):
    rows = audit.audit(records.root)
    assert rows and all(c.ok for c in rows), audit.render_table(rows)
    names = {c.name for c in rows}
    for kind in ("provenance", "sbom", "checks"):
        assert f"{kind} signature (key)" in names
        assert f"{kind} subject = submission image" in names
    assert "vendored metaharness-tasks re-hashed" in names


def test_cli_exit_codes(records, capsys):
    assert audit.main(["--records", str(records.root)]) == 0
    assert "0 failed" in capsys.readouterr().out
    (records.root / "attestations" / "checks.dsse.json").unlink()
    assert audit.main(["--records", str(records.root)]) == 1


def _envelope(records, kind="provenance"):
    path = records.root / "attestations" / f"{kind}.dsse.json"
    return path, json.loads(path.read_text())


def test_one_payload_byte_changed(records):
    path, env = _envelope(records)
    payload = bytearray(base64.b64decode(env["payload"]))
    payload[payload.index(b"Build L1") + 6] = ord("2")  # "Build L2": still valid JSON
    env["payload"] = base64.b64encode(bytes(payload)).decode()
    path.write_text(json.dumps(env))
    fails = _failures(records.root)
    assert [(c.name, c.record) for c in fails] == [("provenance signature (key)", "attestations/provenance.dsse.json")]
    assert "signature does not verify" in fails[0].detail


def test_signature_by_another_key(records):
    from securesystemslib.signer import CryptoSigner

    path, env = _envelope(records, "sbom")
    other = CryptoSigner.generate_ed25519()
    path.write_bytes(signing.dsse_sign(base64.b64decode(env["payload"]), other))
    fails = _failures(records.root)
    assert [c.record for c in fails] == ["attestations/sbom.dsse.json"]
    assert "not signed by the release key" in fails[0].detail


def test_signature_by_another_key_claiming_the_release_keyid(records):
    from securesystemslib.signer import CryptoSigner

    path, env = _envelope(records, "checks")
    forged = json.loads(signing.dsse_sign(base64.b64decode(env["payload"]), CryptoSigner.generate_ed25519()))
    forged["signatures"][0]["keyid"] = records.signer.signer.public_key.keyid
    path.write_text(json.dumps(forged))
    fails = _failures(records.root)
    assert [c.record for c in fails] == ["attestations/checks.dsse.json"]
    assert "signature does not verify" in fails[0].detail


def test_subject_digest_swapped(records):
    path, env = _envelope(records)
    stmt = json.loads(base64.b64decode(env["payload"]))
    stmt["subject"][0]["digest"]["sha256"] = "f" * 64
    path.write_bytes(records.signer.sign(json.dumps(stmt).encode()))  # validly signed, wrong subject
    fails = [c for c in _failures(records.root) if c.name != "README = regenerated from the statements"]
    assert [(c.name, c.record) for c in fails] == [
        ("provenance subject = submission image", "attestations/provenance.dsse.json")]
    assert "f" * 64 in fails[0].detail and records.image.digest in fails[0].detail


def test_submission_names_another_image(records):
    sub = records.root / "submission.json"
    doc = json.loads(sub.read_text())
    doc["image"] = doc["image"].split("@")[0] + "@sha256:" + "e" * 64
    sub.write_text(json.dumps(doc))
    fails = _failures(records.root)
    assert {c.name for c in fails} == {"provenance subject = submission image", "sbom subject = submission image",
                                       "checks subject = submission image", "SBOM describes the image",
                                       "checks ran on the submission image"}


def test_sbom_replaced(records, tmp_path, monkeypatch):
    from .conftest import make_image

    from pipeline import sbom

    other = make_image(tmp_path / "other", app_files={"opt/arena/env/x.py": b"x = 1\n"})
    (records.root / "attestations" / "sbom.cdx.json").write_bytes(
        sbom.generate(other.layout, name="x/y", app_dir="/opt/arena"))
    fails = _failures(records.root)
    assert {(c.name, c.record) for c in fails} == {
        ("attested SBOM = SBOM file", "attestations/sbom.cdx.json"),
        ("SBOM describes the image", "attestations/sbom.cdx.json")}


def test_provenance_names_another_base(records):
    path = records.root / "provenance.json"
    doc = json.loads(path.read_text())
    doc["base"]["digest"] = "sha256:" + "6" * 64
    path.write_text(json.dumps(doc))
    fails = _failures(records.root)
    assert {(c.name, c.record) for c in fails} == {
        ("provenance resolvedDependencies = provenance.json", "attestations/provenance.dsse.json"),
        ("provenance.json = attested bytes", "provenance.json"),
        ("base = release.toml pin", "provenance.json")}
    assert all("6" * 64 in c.detail for c in fails if c.name != "provenance.json = attested bytes")


def test_provenance_field_outside_the_pins_edited(records):
    path = records.root / "provenance.json"
    path.write_text(path.read_text().replace('"zlib_version": "', '"zlib_version": "9'))
    fails = _failures(records.root)
    assert [(c.name, c.record) for c in fails] == [("provenance.json = attested bytes", "provenance.json")]


def test_readme_edited(records):
    path = records.root / "attestations" / "README.md"
    path.write_text(path.read_text().replace("Build L1", "Build L3"))
    fails = _failures(records.root)
    assert [(c.name, c.record) for c in fails] == [("README = regenerated from the statements",
                                                    "attestations/README.md")]


def test_vendored_file_edited(records):
    path = records.root / "vendor" / "metaharness-tasks" / "tasks.py"
    path.write_bytes(path.read_bytes().replace(b"TASKS = []", b"TASKS = [1]"))
    fails = _failures(records.root)
    assert [(c.name, c.record) for c in fails] == [
        ("vendored metaharness-tasks re-hashed", "vendor/metaharness-tasks/tasks.py + LICENSE")]
    assert "hash mismatch" in fails[0].detail


def test_vendored_licence_edited(records):
    path = records.root / "vendor" / "metaharness-tasks" / "LICENSE"
    path.write_bytes(path.read_bytes() + b" ")
    fails = _failures(records.root)
    assert [c.name for c in fails] == ["vendored metaharness-tasks re-hashed"]
    assert "licence" in fails[0].detail and str(path) in fails[0].detail


def test_wheel_lock_edited(records):
    lock = records.root / "locks" / "runtime.txt"
    lock.write_text(lock.read_text().replace("idna==3.10", "idna==3.11"))
    fails = _failures(records.root)
    assert [(c.name, c.record) for c in fails] == [("wheel lock hash = provenance.json", "locks/runtime.txt")]


def test_attestation_missing(records):
    (records.root / "attestations" / "checks.dsse.json").unlink()
    fails = _failures(records.root)
    assert [(c.name, c.record) for c in fails] == [("checks signature (key)", "attestations/checks.dsse.json")]
    assert "missing" in fails[0].detail


def test_published_keyid_edited(records):
    (records.root / "attestations" / "keyid").write_text("0" * 64 + "\n")
    fails = _failures(records.root)
    assert fails[0].name == "verification material published"
    assert "keyid" in fails[0].detail


def test_failed_checks_fail_the_audit(tmp_path, monkeypatch):
    from . import conftest

    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(conftest.EPOCH))
    monkeypatch.setattr(conftest, "CHECKS", (("image/health", True), ("image/uid", False)))
    records = conftest.make_records(tmp_path / "r")
    fails = _failures(records.root)
    assert [c.name for c in fails] == ["check results passed"]
    assert "image/uid" in fails[0].detail


def test_checks_about_another_image(records):
    from pipeline import attest

    path, env = _envelope(records, "checks")
    stmt = json.loads(base64.b64decode(env["payload"]))
    stmt["predicate"]["configuration"][0]["annotations"]["image"] = "x/y@sha256:" + "d" * 64
    path.write_bytes(records.signer.sign(attest.canonical_json(stmt)))
    fails = _failures(records.root)
    assert [c.name for c in fails] == ["README = regenerated from the statements", "checks ran on the submission image"]


def test_statement_shapes(records):
    path, env = _envelope(records)
    stmt = json.loads(base64.b64decode(env["payload"]))
    assert stmt["_type"] == "https://in-toto.io/Statement/v1"
    assert stmt["predicateType"] == attest.SLSA_PROVENANCE
    assert stmt["subject"] == [{"name": "registry.example.invalid/arena/openenv-data-workflows",
                                "digest": {"sha256": records.image.digest[7:]}}]
    pred = stmt["predicate"]
    names = [d["name"] for d in pred["buildDefinition"]["resolvedDependencies"]]
    assert names == ["base", "project", "source:metaharness-tasks", "wheel-lock", "wheel:idna", "wheel:requests"]
    assert pred["buildDefinition"]["internalParameters"]["slsaBuildLevel"] == "Build L1"
    assert pred["runDetails"]["metadata"]["invocationId"] == "test-run"
    _, checks = _envelope(records, "checks")
    result = json.loads(base64.b64decode(checks["payload"]))["predicate"]
    assert result["result"] == "PASSED" and result["failedTests"] == []
    assert "Build L1" in (records.root / "attestations" / "README.md").read_text()
