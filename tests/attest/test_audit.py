"""The offline audit: clean records pass; every tamper is caught by the check that owns it.

The tamper matrix below is the attacker of issue 10: someone who can write to the
repository (re-sign with their own key and publish it, edit or delete any record).
Some rows also model an insider holding the genuine release key (`resign`): the
signatures then verify, and only the content checks can catch the change, which is
what those rows prove. Each row asserts exactly which check IDs fail and the message.
"""

from __future__ import annotations

import base64
import json
import re
from datetime import UTC, datetime

import pytest
from in_toto.models.metadata import Envelope, Metadata
from securesystemslib.signer import CryptoSigner

from pipeline import audit, cli
from pipeline._io import canonical_json, sha256_file
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

from .conftest import RELEASED_ON


def failed(root, **kw) -> dict[str, str]:
    return {c.id: c.detail for c in audit.audit(root, **kw) if not c.ok}


def _envelope(root, kind="provenance"):
    path = root / "attestations" / f"{kind}.dsse.json"
    return path, json.loads(path.read_text())


def _statement(root, kind):
    return json.loads(base64.b64decode(_envelope(root, kind)[1]["payload"]))


def _resign_statement(rec, kind, mutate):
    """An insider with the release key re-signs a statement after changing it."""
    stmt = _statement(rec.root, kind)
    mutate(stmt)
    _envelope(rec.root, kind)[0].write_bytes(rec.signer.sign(canonical_json(stmt)))
    if kind == "release":  # the folder's copy, which the statement cannot bind, is the record's bytes
        dataset_copy_of_statement(rec.root)


def refresh_dataset(root) -> None:
    """The insider also makes dist/dataset/ say what the edited records say: the card and tasks.jsonl
    regenerated (kept as they were when the records no longer describe tasks) and the records copied,
    so the dataset checks pass unless the change is the dataset's own to catch."""
    from pipeline import config as config_mod
    from pipeline import plan
    from pipeline.errors import ReleaseError
    from pipeline.records import card, dataset, provenance, sbom, submission

    folder = root / dataset.FOLDER
    try:
        cfg = config_mod.load(root / "release.toml")
        prov, sub = provenance.load(root / "provenance.json"), submission.load(root / "submission.json")
        generated = card.generate(
            cfg, prov, sub, project_license=sbom.project_license(root), target=plan.resolve(cfg, prov.profile).dataset
        )
    except (ReleaseError, ValueError, LookupError, TypeError, AttributeError):
        generated = {}
    for rel, data in generated.items():
        (folder / rel).write_bytes(data)
    for rel in dataset.record_files(dataset.files(folder)):
        (folder / rel).unlink()
    dataset.add_records(folder, root)


def resign(rec) -> None:
    """An insider with the release key makes the links and the release statement match the files
    on disk again: every signature verifies, only content checks are left to catch the change."""
    root, signer = rec.root, rec.signer
    for path in (root / "attestations" / "links").glob("*.link"):
        link = Metadata.load(str(path)).get_payload()
        for table in (link.materials, link.products):
            for name in list(table):
                if not name.startswith("dist/") and (root / name).is_file():
                    table[name] = {"sha256": sha256_file(root / name)}
        env = Envelope.from_signable(link)
        signer.sign_envelope(env)
        env.dump(str(path))
    refresh_dataset(root)
    subject = _statement(root, "release")["subject"][0]
    release_statement.write(
        root,
        signer,
        attest.Subject(subject["name"], "sha256:" + subject["digest"]["sha256"]),
        source_url="https://github.com/akseljoonas/openenv-arena-release",
        profile="test",
        released_on=datetime(*RELEASED_ON, tzinfo=UTC),
        dataset=root / "dist" / "dataset",
    )
    dataset_copy_of_statement(root)


def dataset_copy_of_statement(root) -> None:
    """The folder's copy of the release statement, as a release puts it there after signing."""
    from pipeline.records import dataset

    dataset.add_records(root / dataset.FOLDER, root)


def resign_provenance(rec) -> None:
    """An insider with the release key binds an edited provenance.json again: the provenance
    statement's byproduct digest, then the links and the release statement."""
    digest = sha256_file(rec.root / "provenance.json")
    _resign_statement(
        rec, "provenance", lambda s: s["predicate"]["runDetails"]["byproducts"][0]["digest"].update(sha256=digest)
    )
    resign(rec)


def forge_all(root):
    """The attacker's move: every statement re-signed by a fresh key, published beside the records."""
    forger = signing.KeySigner(CryptoSigner.generate_ed25519())
    for kind in ("release", "provenance", "sbom", "checks"):
        path = root / "attestations" / f"{kind}.dsse.json"
        path.write_bytes(forger.sign(base64.b64decode(json.loads(path.read_text())["payload"])))
    forger.publish(root / "attestations")
    return forger


def genuine_key(rec):
    """The auditor's own trust root: the genuine public key, in a file outside the records."""
    genuine = rec.root.parent / "genuine.pub.pem"
    genuine.write_bytes(signing.public_key_pem(rec.signer.signer.public_key))
    return genuine, trust.from_auditor(key_file=genuine, identity=None, issuer=None)


def _edit_json(path, mutate):
    doc = json.loads(path.read_text())
    mutate(doc)
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


BOUND = "differs from the sha256 the release statement binds"


# ------------------------------------------------------------------ clean records


def test_audit_passes_on_good_records(records):
    rows = audit.audit(records.root)
    assert rows and all(c.ok for c in rows), audit.render_table(rows)
    ids = {c.id for c in rows}
    for cid in (
        "trust/root",
        "release/signature",
        "release/subjects",
        "release/image",
        "intoto/links",
        "submission/tasks",
        "submission/budgets",
        "submission/images",
        "provenance/sources",
        "external/records",
        "sbom/layers",
        "sbom/components",
        "checks/record",
        "checks/results",
    ):
        assert cid in ids, cid
    info = {c.id: c.detail for c in rows if c.status == audit.INFO}
    assert records.signer.keyid in info["trust/root"]
    # the layout expired a year after the 2024 release: reported, not failed
    assert info["intoto/expiry"].startswith("layout expired 2024-12-31T00:00:00Z")


def test_the_links_record_the_command_that_ran_and_chain_the_stages(records):
    links = {
        p.name.split(".")[0]: Metadata.load(str(p)).get_payload()
        for p in (records.root / "attestations" / "links").glob("*.link")
    }
    assert set(links) == {"vendor", "build", "sbom", "verify", "attest", "submission"}
    assert {tuple(link.command) for link in links.values()} == {
        ("python", "-m", "pipeline", "release", "--profile", "test")
    }
    assert "attestations/sbom.cdx.json" in links["sbom"].products
    assert (
        links["attest"].materials["attestations/sbom.cdx.json"] == links["sbom"].products["attestations/sbom.cdx.json"]
    )
    assert "vendor/external/format-code-task-000666.json" in links["vendor"].products


# ------------------------------------------------------------------ the tamper matrix of issue 10


def test_payload_byte(records):
    path, env = _envelope(records.root)
    payload = bytearray(base64.b64decode(env["payload"]))
    payload[payload.index(b"Build L1") + 6] = ord("2")  # "Build L2": still valid JSON
    env["payload"] = base64.b64encode(bytes(payload)).decode()
    path.write_text(json.dumps(env))
    fails = failed(records.root)
    assert set(fails) == {"provenance/signature", "provenance/record", "release/subjects", "intoto/links"}
    assert "signature does not verify with the release key" in fails["provenance/signature"]
    assert f"attestations/provenance.dsse.json {BOUND}" in fails["release/subjects"]


def test_wrong_key(records):
    path, env = _envelope(records.root, "sbom")
    other = CryptoSigner.generate_ed25519()
    path.write_bytes(signing.dsse_sign(base64.b64decode(env["payload"]), other))
    fails = failed(records.root)
    assert set(fails) == {"sbom/signature", "sbom/attested", "release/subjects", "intoto/links"}
    assert (
        f"attestations/sbom.dsse.json is not signed by the trusted key; expected {records.signer.keyid}, "
        f"got signed by keyid {other.public_key.keyid}"
    ) in fails["sbom/signature"]


def test_wrong_key_claiming_the_release_keyid(records):
    path, env = _envelope(records.root, "checks")
    forged = json.loads(signing.dsse_sign(base64.b64decode(env["payload"]), CryptoSigner.generate_ed25519()))
    forged["signatures"][0]["keyid"] = records.signer.keyid
    path.write_text(json.dumps(forged))
    fails = failed(records.root)
    assert "signature does not verify with the release key" in fails["checks/signature"]


@pytest.mark.parametrize(
    "variant", ["genuine and garbage under the pinned keyid", "unpinned valid and garbage under the pinned keyid"]
)
def test_release_statement_with_two_signatures(records, variant):
    path, env = _envelope(records.root, "release")
    genuine = env["signatures"][0]
    garbage = {"keyid": genuine["keyid"], "sig": base64.b64encode(bytes(64)).decode()}
    other = json.loads(signing.dsse_sign(base64.b64decode(env["payload"]), CryptoSigner.generate_ed25519()))
    first = genuine if variant.startswith("genuine") else other["signatures"][0]
    env["signatures"] = [first, garbage]
    path.write_text(json.dumps(env))
    fails = failed(records.root)
    if variant.startswith("genuine"):
        assert fails["release/signature"] == (
            "attestations/release.dsse.json is not a DSSE envelope: "
            f"Multiple signatures found for keyid {records.signer.keyid}"
        )
    else:
        assert fails["release/signature"].startswith(
            "attestations/release.dsse.json: signature does not verify with the release key"
        )


def test_pinned_key_signing_another_payload_type(records):
    from securesystemslib.dsse import Envelope as DsseEnvelope

    path, env = _envelope(records.root, "release")
    other = DsseEnvelope(payload=base64.b64decode(env["payload"]), payload_type="application/json", signatures={})
    other.sign(records.signer.signer)
    path.write_text(json.dumps(other.to_dict()))
    fails = failed(records.root)
    assert fails["release/signature"] == (
        "attestations/release.dsse.json has the wrong payload type; "
        "expected application/vnd.in-toto+json, got application/json"
    )


def test_genuine_release_statement_replayed_over_another_release(records, tmp_path):
    """Both releases signed by the pinned key: the statement of one does not vouch for the other's records."""
    from . import conftest

    other = conftest.make_records(tmp_path / "other", records.signer, image_name="arena/other-name")
    (records.root / "attestations" / "release.dsse.json").write_bytes(
        (other.root / "attestations" / "release.dsse.json").read_bytes()
    )
    fails = failed(records.root)
    assert {"release/subjects", "release/image"} <= set(fails)
    assert fails["release/subjects"].startswith("attestations/")
    assert BOUND in fails["release/subjects"]


def test_forged_signer_with_its_own_key_published(records):
    """Everything re-signed by a fresh key, published beside the records: refused, naming the signer."""
    root = records.root
    forger = forge_all(root)
    fails = failed(root)
    assert "release/signature" in fails
    assert (
        f"attestations/release.dsse.json is signed by keyid {forger.keyid}, which is not pinned "
        f"([trust.test] of trust.toml); expected {records.signer.keyid}"
    ) in fails["release/signature"]
    # the same verdict from the auditor's own trust root (the genuine public key)
    genuine, auditor = genuine_key(records)
    fails = failed(root, trust_root=auditor)
    assert "is not signed by the trusted key" in fails["release/signature"]
    assert forger.keyid in fails["release/signature"]


def test_forger_who_also_rewrites_the_pins_is_refused_by_the_auditors_key(records):
    """The limit of trust.toml's trust root: whoever may edit trust.toml may pin their own key,
    and the audit against it passes (the trust/root row and the VSA's policy digest say which pins
    were used). An auditor's own trust root (--key, --identity) is what such an attacker cannot
    change: it refuses the same records, naming the signer."""
    root = records.root
    forger = forge_all(root)
    toml = root / "trust.toml"
    toml.write_text(toml.read_text().replace(records.signer.keyid, forger.keyid))
    rows = {c.id: c for c in audit.audit(root)}
    assert rows["trust/root"].detail == f"keyids {forger.keyid} [[trust.test] of trust.toml]"
    genuine, auditor = genuine_key(records)
    fails = failed(root, trust_root=auditor)
    assert fails["release/signature"] == (
        f"attestations/release.dsse.json is not signed by the trusted key; expected {records.signer.keyid}, "
        f"got signed by keyid {forger.keyid}; trust root: key {records.signer.keyid} [auditor --key {genuine}]"
    )


def test_the_issue_attack_reproduced_exactly(records):
    """Re-signed with a fresh key, key published, layout and links deleted: the audit fails."""
    import shutil

    root = records.root
    forge_all(root)
    (root / "attestations" / "layout.json").unlink()
    shutil.rmtree(root / "attestations" / "links")
    assert cli.main(["audit", "--records", str(root)]) == 1


def test_subject_swap(records):
    _resign_statement(records, "provenance", lambda s: s["subject"][0]["digest"].update(sha256="f" * 64))
    resign(records)
    fails = failed(records.root)
    assert set(fails) == {"provenance/subject", "readme"}
    assert (
        f"subject digest differs from the image in submission.json; expected {records.image.digest}, "
        f"got sha256:{'f' * 64}"
    ) in fails["provenance/subject"]


def test_sbom_swapped(records, tmp_path):
    from pipeline.records import sbom

    from .conftest import make_image

    other = make_image(tmp_path / "other", app_files={"opt/arena/env/x.py": b"x = 1\n"})
    (records.root / "attestations" / "sbom.cdx.json").write_bytes(
        sbom.generate(other.layout, name="x/y", app_dir="/opt/arena")
    )
    fails = failed(records.root)
    # the other image ships no openenv.yaml: the dataset's copy is not the one the (swapped) SBOM lists
    assert set(fails) == {
        "sbom/attested",
        "sbom/image",
        "sbom/layers",
        "sbom/components",
        "sbom/coverage",
        "release/subjects",
        "intoto/links",
        "dataset/manifest",
    }
    assert "the SBOM file was replaced or edited after signing" in fails["sbom/attested"]
    assert (
        "vs the image's /opt/arena/env/openenv.yaml (the SBOM's file component); expected None"
        in fails["dataset/manifest"]
    )
    assert f"attestations/sbom.cdx.json {BOUND}" in fails["release/subjects"]


def test_sbom_component_removed_and_everything_resigned(records):
    """Even with the release key, an SBOM that hides a component fails against the image's layers."""
    path = records.root / "attestations" / "sbom.cdx.json"
    doc = json.loads(path.read_text())
    doc["components"] = [c for c in doc["components"] if c["name"] != "libc6"]
    doc["dependencies"] = [
        {**d, "dependsOn": [x for x in d.get("dependsOn", []) if "libc6" not in x]}
        for d in doc["dependencies"]
        if "libc6" not in d["ref"]
    ]
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    _resign_statement(records, "sbom", lambda s: s.update(predicate=doc))
    resign(records)
    fails = failed(records.root)
    assert set(fails) == {"sbom/components", "sbom/coverage", "readme"}
    assert fails["sbom/components"].startswith(
        "SBOM components differ from the image's layers; "
        "expected the components read from the layer blobs, got missing "
        "pkg:deb/debian/libc6@"
    )
    # The audit's own reading of the image (not the SBOM writer's) names the package too.
    assert fails["sbom/coverage"].startswith(
        "the SBOM has no component for 1 package(s) or file(s) installed in "
        "the image; expected a component for every dpkg package, Python "
        "distribution and application file, got deb libc6 "
    )


def test_sbom_licence_expression_invalid_and_everything_resigned(records):
    """ "MIT License" written as an SPDX expression (the seed SBOM's exceptiongroup) is schema-valid;
    license-expression refuses it, and the writer's code has no say in that."""
    path = records.root / "attestations" / "sbom.cdx.json"
    doc = json.loads(path.read_text())
    target = next(c for c in doc["components"] if c["name"] == "requests")
    target["licenses"] = [{"expression": "MIT License"}]
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    _resign_statement(records, "sbom", lambda s: s.update(predicate=doc))
    resign(records)
    fails = failed(records.root)
    assert set(fails) == {"sbom/licenses", "sbom/components", "readme"}
    assert fails["sbom/licenses"] == (
        "1 licence(s) of the SBOM are not valid SPDX (license-expression); expected SPDX ids, SPDX expressions "
        f"or named licences, got {target['bom-ref']}: expression 'MIT License' is not SPDX: Invalid symbols "
        'sequence such as (A B) for token: "License" at position: 4; a licence that is not an SPDX id or '
        "expression belongs in the licence's `name`"
    )


def test_sbom_licence_coverage_is_reported(records):
    rows = {c.id: c for c in audit.audit(records.root)}
    assert rows["sbom/license-coverage"].status == audit.INFO
    assert re.fullmatch(r"\d+ of \d+ components \(\d+\.\d%\) carry a licence", rows["sbom/license-coverage"].detail)
    assert rows["sbom/licenses"].status == rows["sbom/coverage"].status == "pass"


def test_sbom_component_listed_twice_and_everything_resigned(records):
    """A second, different entry under an existing bom-ref (schema-valid: the objects differ)."""
    path = records.root / "attestations" / "sbom.cdx.json"
    doc = json.loads(path.read_text())
    twin = {**doc["components"][0], "description": "a twin"}
    doc["components"].insert(0, twin)
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    _resign_statement(records, "sbom", lambda s: s.update(predicate=doc))
    resign(records)
    fails = failed(records.root)
    assert set(fails) == {"sbom/components", "readme"}
    assert fails["sbom/components"] == (
        f"the SBOM lists a component more than once; expected each bom-ref once, got {twin['bom-ref']}"
    )


def test_sbom_component_removed_without_the_key(records):
    path = records.root / "attestations" / "sbom.cdx.json"
    doc = json.loads(path.read_text())
    doc["components"] = doc["components"][1:]
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    fails = failed(records.root)
    assert set(fails) == {"sbom/attested", "sbom/components", "sbom/coverage", "release/subjects", "intoto/links"}


def test_sbom_not_checkable_without_the_image_fails_unless_skipped(records):
    import shutil

    shutil.rmtree(records.root / "dist")
    fails = failed(records.root)
    assert set(fails) == {"sbom/components", "sbom/coverage"}
    for cid in fails:
        assert fails[cid].startswith("not checked: the image's layers are not here")
        assert fails[cid].endswith("run `nox -s reproduce` first")
    rows = {c.id: c for c in audit.audit(records.root, skip=frozenset({"sbom/components", "sbom/coverage"}))}
    assert all(c.ok for c in rows.values())
    assert rows["sbom/components"].status == rows["sbom/coverage"].status == audit.SKIPPED


def test_base_swap(records):
    _edit_json(records.root / "provenance.json", lambda d: d["base"].update(digest="sha256:" + "6" * 64))
    fails = failed(records.root)
    # the card states the base: regenerated from the edited record, it is not the bound one
    assert set(fails) == {
        "provenance/base",
        "provenance/record",
        "provenance/statement",
        "release/subjects",
        "intoto/links",
        "dataset/card",
    }
    assert (
        "base image of provenance.json vs the release.toml pin; expected "
        "registry.example.invalid/base/python@sha256:" + "5" * 64
    ) in fails["provenance/base"]
    assert "6" * 64 in fails["provenance/statement"]


def test_base_swap_resigned(records):
    _edit_json(records.root / "provenance.json", lambda d: d["base"].update(digest="sha256:" + "6" * 64))
    resign(records)
    fails = failed(records.root)
    assert {"provenance/base", "provenance/record", "provenance/statement"} <= set(fails)
    assert "release/subjects" not in fails and "intoto/links" not in fails


def test_local_base_records_what_it_was_built_from(local_records):
    rows = audit.audit(local_records.root)
    assert rows and all(c.ok for c in rows), audit.render_table(rows)
    lock = local_records.root / "locks" / "base.json"
    built_from = json.loads((local_records.root / "provenance.json").read_text())["base"]["built_from"]
    assert built_from == {
        "packages_pinned_by": "locks/base.json",
        "lock_sha256": sha256_file(lock),
        "debian_suite": "bookworm",
        "named_after_snapshot": "20250520T000000Z",
        "debs": 2,
        "packages_from": "http://deb.debian.org/debian",
        "statement": "the .debs were fetched from a Debian mirror (http://deb.debian.org/debian), not from "
        "snapshot 20250520T000000Z, which the base is only named after; they are pinned by the .deb "
        "list of locks/base.json (name, version, architecture and sha256 of each) and the base digest",
    }
    deps = _statement(local_records.root, "provenance")["predicate"]["buildDefinition"]["resolvedDependencies"]
    assert [d["name"] for d in deps[:3]] == ["base", "base-lock", "project"]
    assert deps[1]["uri"] == "file:locks/base.json" and deps[1]["digest"] == {"sha256": sha256_file(lock)}


def test_base_pulled_by_digest_records_only_name_and_digest(records):
    assert json.loads((records.root / "provenance.json").read_text())["base"] == {
        "name": "registry.example.invalid/base/python",
        "digest": "sha256:" + "5" * 64,
    }
    deps = _statement(records.root, "provenance")["predicate"]["buildDefinition"]["resolvedDependencies"]
    assert "base-lock" not in {d["name"] for d in deps}


def test_local_base_lock_edited(local_records):
    """One .deb of the lock changed after the release: the lock's hash and the audit disagree."""
    _edit_json(local_records.root / "locks" / "base.json", lambda d: d["debs"][0].update(sha256="0" * 64))
    fails = failed(local_records.root)
    assert set(fails) == {"provenance/base"}
    assert fails["provenance/base"].startswith(
        "what provenance.json says the local base was built from (lock_sha256) vs locks/base.json"
    )


def test_local_base_lock_loses_a_deb(local_records):
    _edit_json(local_records.root / "locks" / "base.json", lambda d: d["debs"].pop())
    fails = failed(local_records.root)
    assert set(fails) == {"provenance/base"}
    assert "(debs, lock_sha256)" in fails["provenance/base"] and "'debs': 2" in fails["provenance/base"]


@pytest.mark.parametrize(
    "field, value",
    [
        ("named_after_snapshot", "20990101T000000Z"),
        ("packages_from", "https://snapshot.debian.org/archive/debian/20250520T000000Z/"),
        ("debs", 3),
        ("statement", "the .debs came from the snapshot"),
    ],
)
def test_local_base_origin_forged_and_resigned(local_records, field, value):
    """An insider with the release key rewrites what the base was built from, and signs a matching
    provenance statement: only the lock in the checkout can tell."""

    def forge(prov, replace):
        return replace(prov, base=replace(prov.base, built_from=replace(prov.base.built_from, **{field: value})))

    _resign_provenance(local_records, forge)
    fails = failed(local_records.root)
    assert set(fails) == {"provenance/base", "readme"}
    assert fails["provenance/base"].startswith(
        f"what provenance.json says the local base was built from ({field}) vs locks/base.json"
    )


def test_local_base_origin_forged_without_the_key(local_records):
    _edit_json(
        local_records.root / "provenance.json",
        lambda d: d["base"]["built_from"].update(named_after_snapshot="20990101T000000Z"),
    )
    fails = failed(local_records.root)
    assert {"provenance/base", "provenance/record"} <= set(fails)


def test_local_base_lock_hash_forged_in_the_statement_only(local_records):
    """The provenance statement names another lock than provenance.json: re-derived, it differs."""

    def other_lock(stmt):
        deps = stmt["predicate"]["buildDefinition"]["resolvedDependencies"]
        next(d for d in deps if d["name"] == "base-lock")["digest"]["sha256"] = "0" * 64

    _resign_statement(local_records, "provenance", other_lock)
    resign(local_records)
    fails = failed(local_records.root)
    assert set(fails) == {"provenance/statement", "readme"}
    assert "base-lock" in fails["provenance/statement"] and "0" * 64 in fails["provenance/statement"]


def test_local_base_origin_dropped_and_resigned(local_records):
    """A record on the local base that does not say what the base was built from (as records
    written before it was recorded) loads, but does not pass the audit."""
    _resign_provenance(local_records, lambda prov, replace: replace(prov, base=replace(prov.base, built_from=None)))
    fails = failed(local_records.root)
    assert set(fails) == {"provenance/base", "readme"}
    assert "the record does not say what the local base was built from" in fails["provenance/base"]


def test_pulled_base_claims_an_origin_and_resigned(records, local_records_template):
    """A base pulled by digest is known by name and digest only: a claimed origin is refused."""
    from pipeline.records import provenance

    origin = provenance.load(local_records_template.root / "provenance.json").base.built_from
    _resign_provenance(records, lambda prov, replace: replace(prov, base=replace(prov.base, built_from=origin)))
    fails = failed(records.root)
    assert set(fails) == {"provenance/base", "readme"}
    assert fails["provenance/base"].startswith("what provenance.json says a base pulled by digest was built from")


def test_vendored_byte(records):
    path = records.root / "vendor" / "metaharness-tasks" / "tasks.py"
    path.write_bytes(path.read_bytes().replace(b"TASKS = []", b"TASKS = [1]"))
    fails = failed(records.root)
    assert set(fails) == {"vendor/files", "intoto/links"}
    assert "hash mismatch" in fails["vendor/files"]
    assert "vendor/metaharness-tasks/tasks.py differs from the product its stage recorded" in fails["intoto/links"]


def test_vendored_licence_byte(records):
    path = records.root / "vendor" / "metaharness-tasks" / "LICENSE"
    path.write_bytes(path.read_bytes() + b" ")
    fails = failed(records.root)
    assert set(fails) == {"vendor/files", "intoto/links"}
    assert "licence" in fails["vendor/files"]


def test_task_budget_changed(records):
    _edit_json(records.root / "submission.json", lambda d: d["tasks"][3].update(memory_gib=64))
    fails = failed(records.root)
    assert set(fails) == {"submission/budgets", "release/subjects", "intoto/links"}
    task = json.loads((records.root / "submission.json").read_text())["tasks"][3]["task_id"]
    assert (
        f"budgets of task {task} (memory_gib) vs release.toml; expected {{'memory_gib': 1, 'split': 'train'}}, "
        f"got {{'memory_gib': 64, 'split': 'train'}}"
    ) in fails["submission/budgets"]


def test_task_budget_changed_and_resigned(records):
    _edit_json(records.root / "submission.json", lambda d: d["tasks"][8].update(workspace_gib=99))
    resign(records)
    fails = failed(records.root)
    assert set(fails) == {"submission/budgets"}
    assert "budgets of task format-code-task-000666 (workspace_gib)" in fails["submission/budgets"]


def test_task_order_changed_and_resigned(records):
    def swap(d):
        d["tasks"][0], d["tasks"][1] = d["tasks"][1], d["tasks"][0]

    _edit_json(records.root / "submission.json", swap)
    resign(records)
    fails = failed(records.root)
    assert set(fails) == {"submission/tasks", "provenance/tasks"}
    assert fails["submission/tasks"].startswith("task ids of submission.json, in request order")
    assert fails["provenance/tasks"].startswith("tasks of provenance.json vs submission.json's")


def test_external_task_claimed_verified_and_resigned(records):
    """An insider's provenance.json says the external task the check suite never pulled was verified;
    ids, budgets and images are untouched, so only checks.json can contradict it."""

    def claim(d):
        task = next(t for t in d["tasks"] if t["task_id"] == "format-code-task-001926")
        task["verification"] = {"failed": 0, "passed": 3, "status": "verified"}

    _edit_json(records.root / "provenance.json", claim)
    resign_provenance(records)
    fails = failed(records.root)
    assert set(fails) == {"provenance/tasks", "readme"}
    assert fails["provenance/tasks"] == (
        "verification of task format-code-task-001926 in provenance.json vs checks.json; "
        "expected {'status': 'not verified: not pulled', 'passed': 0, 'failed': 0}, "
        "got {'status': 'verified', 'passed': 3, 'failed': 0}; provenance.json claims what the checks did not show"
    )


def test_provenance_edited_without_resigning_the_provenance_statement(records):
    _edit_json(records.root / "provenance.json", lambda d: d["sizes"].update(seed_bytes=1))
    resign(records)
    fails = failed(records.root)
    assert {"provenance/record", "provenance/sizes"} <= set(fails)
    assert "provenance.json was edited after signing" in fails["provenance/record"]


@pytest.mark.parametrize(
    "mutate,owner,fragment",
    [
        (
            lambda d: d["sizes"].update(seed_bytes=d["sizes"]["seed_bytes"] - 32),
            "provenance/sizes",
            "sizes of provenance.json vs the manifests checks.json recorded",
        ),
        (
            lambda d: d["sizes"]["images"][1].update(platform_bytes=d["sizes"]["images"][1]["platform_bytes"] + 1),
            "provenance/sizes",
            "sizes of provenance.json vs the manifests checks.json recorded",
        ),
        (
            lambda d: d["budgets"]["external"].update(observation_tokens=999),
            "provenance/budgets",
            "budgets of provenance.json vs release.toml's [budgets.*] tables",
        ),
        (lambda d: d["tasks"][3]["verification"].update(passed=99), "provenance/tasks", "verification of task"),
    ],
    ids=["seed-total", "platform-figure", "observation-budget", "case-passed-count"],
)
def test_what_the_request_leaves_out_edited_and_resigned(records, mutate, owner, fragment):
    """What moved out of the request (sizes, budgets, check results) is bound and checked in provenance.json."""
    _edit_json(records.root / "provenance.json", mutate)
    resign_provenance(records)
    fails = failed(records.root)
    assert set(fails) == {owner, "readme"}  # the README names the re-signed statement's hash
    assert fragment in fails[owner]


def test_source_of_another_commit_resigned(records):
    other = "https://github.com/akseljoonas/openenv-arena-release/tree/" + "3" * 40
    _edit_json(records.root / "submission.json", lambda d: d.update(source=other))
    resign(records)
    fails = failed(records.root)
    assert set(fails) == {"submission/request"}
    assert fails["submission/request"] == (
        "source of submission.json vs release.toml (profile test) and provenance.json's project commit; "
        "expected {'source': 'https://github.com/akseljoonas/openenv-arena-release/tree/" + "1" * 40 + "'}, "
        "got {'source': '" + other + "'}"
    )


@pytest.mark.parametrize(
    "field,value",
    [
        ("submission_id", "someone-elses-id"),
        ("dataset", "someone/else"),
        ("example_actions", [{"operation": "shell", "command": "cat /opt/arena/*"}]),
    ],
)
def test_request_identity_changed_and_resigned(records, field, value):
    _edit_json(records.root / "submission.json", lambda d: d.update({field: value}))
    resign(records)
    fails = failed(records.root)
    assert set(fails) == {"submission/request"}
    assert fails["submission/request"].startswith(f"{field} of submission.json vs release.toml (profile test)")


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.update(total_compressed_bytes=1),
        lambda d: d["tasks"][8].update(observation_tokens=32768),
        lambda d: d["tasks"][8].update(verification={"status": "verified", "passed": 12, "failed": 0}),
        lambda d: d.pop("dataset"),
    ],
    ids=["old-total", "observation-budget", "task-verification", "no-dataset"],
)
def test_request_beyond_the_contract_and_resigned(records, mutate):
    """A field the accepted request does not have (or lacks) fails the request's JSON Schema."""
    _edit_json(records.root / "submission.json", mutate)
    resign(records)
    fails = failed(records.root)
    assert fails["submission/format"].startswith(
        "submission.json is not the request the platform accepts (request.schema.json)"
    )


def test_task_image_changed_and_resigned(records):
    _edit_json(records.root / "submission.json", lambda d: d["tasks"][8].update(image=d["image"]))
    resign(records)
    fails = failed(records.root)
    assert set(fails) == {"submission/images", "provenance/tasks"}
    assert "image of task format-code-task-000666" in fails["submission/images"]


@pytest.mark.parametrize(
    "name,owner", [("submission.json", "submission/format"), ("provenance.json", "provenance/load")]
)
def test_record_removed(records, name, owner):
    (records.root / name).unlink()
    fails = failed(records.root)
    assert owner in fails
    assert f"{name} is missing (the release statement binds it)" in fails["release/subjects"]
    assert f"{name} is missing (the " in fails["intoto/links"]


def test_link_removed(records):
    link = next((records.root / "attestations" / "links").glob("sbom.*.link"))
    link.unlink()
    fails = failed(records.root)
    assert set(fails) == {"release/subjects", "intoto/links"}
    assert f"attestations/links/{link.name} is missing (the release statement binds it)" in fails["release/subjects"]
    assert "LinkNotFoundError" in fails["intoto/links"]


def test_layout_removed(records):
    (records.root / "attestations" / "layout.json").unlink()
    fails = failed(records.root)
    assert set(fails) == {"release/subjects", "intoto/links"}
    assert "attestations/layout.json is missing" in fails["intoto/links"]


def test_release_statement_removed(records):
    (records.root / "attestations" / "release.dsse.json").unlink()
    fails = failed(records.root)
    assert fails["release/present"].startswith("attestations/release.dsse.json or release.sigstore.json is missing")
    assert fails["release/signature"].startswith("not checked:")
    assert fails["intoto/links"].startswith("not checked:")
    assert cli.main(["audit", "--records", str(records.root)]) == 1


def test_external_record_changed(records):
    path = records.root / "vendor" / "external" / "format-code-task-000666.json"
    path.chmod(0o644)
    path.write_bytes(path.read_bytes().replace(b"repair", b"rewrite"))
    fails = failed(records.root)
    assert set(fails) == {"external/records", "intoto/links"}
    assert "stored external record" in fails["external/records"] and "was modified" in fails["external/records"]


def _resign_provenance(rec, change):
    """An insider rewrites provenance.json (`change(prov) -> prov`) and signs a matching statement."""
    import dataclasses

    from pipeline import config as config_mod
    from pipeline import plan
    from pipeline.records import provenance

    from .conftest import LOCK_TEXT

    path = rec.root / "provenance.json"
    prov = change(provenance.load(path), dataclasses.replace)
    provenance.write(path, prov)
    cfg = config_mod.load(rec.root / "release.toml")
    t = datetime(*RELEASED_ON, tzinfo=UTC)
    pred = attest.provenance_predicate(
        cfg,
        prov,
        parameters=plan.resolve(cfg, prov.profile).parameters,
        lock_text=LOCK_TEXT,
        signing="key",
        started=t,
        finished=t,
        invocation_id="test-run",
    )
    _resign_statement(rec, "provenance", lambda st: st.update(predicate=json.loads(json.dumps(pred))))
    resign(rec)


def test_external_record_from_another_dataset_revision_resigned(records):
    def other_revision(prov, replace):
        ext = tuple(
            replace(e, revision="0" * 40) if e.task_id == "format-code-task-000666" else e for e in prov.external
        )
        return replace(prov, external=ext)

    _resign_provenance(records, other_revision)
    fails = failed(records.root)
    assert set(fails) == {"external/records", "readme"}
    assert fails["external/records"] == (
        "external record format-code-task-000666 in provenance.json (revision) vs release.toml; "
        "expected {'revision': '639865fd3374018d6cb29b9fb82dd531406fcf5f'}, got {'revision': '" + "0" * 40 + "'}"
    )


def test_external_record_marked_verified_without_a_pin_resigned(records):
    def verified(prov, replace):
        ext = tuple(
            replace(e, status="verified") if e.task_id == "format-code-task-001926" else e for e in prov.external
        )
        return replace(prov, external=ext)

    _resign_provenance(records, verified)
    fails = failed(records.root)
    assert "external/records" in fails
    assert fails["external/records"] == (
        "external record format-code-task-001926 is marked verified, but release.toml pins no "
        "record_sha256 to verify it against; expected record_sha256 pinned, got ''"
    )


# ------------------------------------------------------------------ one teeth test per remaining ID


def test_unbound_file_added(records):
    (records.root / "attestations" / "extra.json").write_text("{}")
    fails = failed(records.root)
    assert set(fails) == {"release/subjects"}
    assert "record files not bound by the release statement" in fails["release/subjects"]


def test_linked_directory_hides_an_unbound_file(records, tmp_path):
    """attestations/links as a link to a directory elsewhere holding one more file: the unbound-file
    scan did not descend into it, so the audit passed reading records from outside the tree."""
    import os
    import shutil

    links = records.root / "attestations" / "links"
    elsewhere = tmp_path / "elsewhere"
    shutil.move(str(links), str(elsewhere))
    (elsewhere / "extra.link").write_text("{}")
    os.symlink(elsewhere, links)
    rows = audit.audit(records.root)
    assert [(c.id, c.status) for c in rows] == [("records/files", "fail")]
    assert rows[0].detail == (
        f"records are links or special files; expected regular files in the records tree, got attestations/links -> "
        f"{elsewhere}; a release writes no links; replace them with the released files or restore the records"
    )


@pytest.mark.parametrize(
    "rel", ["attestations/sbom.cdx.json", "submission.json", "release.toml", "vendor/metaharness-tasks/tasks.py"]
)
def test_record_replaced_by_a_link_to_a_copy(records, tmp_path, rel):
    import os
    import shutil

    copy = tmp_path / "copy"
    shutil.move(str(records.root / rel), str(copy))
    os.symlink(copy, records.root / rel)
    fails = failed(records.root)
    assert set(fails) == {"records/files"}
    assert f"got {rel} -> {copy}" in fails["records/files"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "kind,rel",
    [
        ("link to /dev/zero", "attestations/sbom.cdx.json"),
        ("link to /dev/zero", "release.toml"),
        ("link to /dev/zero", "pyproject.toml"),
        ("link to /dev/zero", "env/openenv.yaml"),
        ("link to /dev/zero", "dist/oci/index.json"),
        ("named pipe", "attestations/sbom.cdx.json"),
        ("named pipe", "attestations/provenance.dsse.json"),
    ],
)
def test_record_that_would_never_end_is_not_read(records, kind, rel):
    """A link committed to git can point at /dev/zero: reading it never ends (and a pipe never answers)."""
    import os

    path = records.root / rel
    path.unlink()
    if kind == "named pipe":
        os.mkfifo(path)
    else:
        os.symlink("/dev/zero", path)
    assert cli.main(["audit", "--records", str(records.root), "--vsa", str(records.root.parent / "vsa.json")]) == 1
    fails = failed(records.root)
    assert set(fails) == {"records/files"}
    assert (f"{rel} -> /dev/zero" if kind != "named pipe" else f"{rel} (not a regular file)") in fails["records/files"]


def test_release_statement_binding_a_record_twice(records):
    """An insider's statement binds submission.json twice, a forged hash first: the audit read the
    last, `sha256sum` against the first subject (the README's recipe) reads the other."""

    def twice(stmt):
        stmt["subject"].insert(1, {"name": "submission.json", "digest": {"sha256": "0" * 64}})

    _resign_statement(records, "release", twice)
    fails = failed(records.root)
    assert set(fails) == {"release/subjects"}
    assert fails["release/subjects"] == (
        "the release statement binds a record twice; expected each record once, got submission.json"
    )


def test_release_statement_binding_a_file_outside_the_records(records):
    outside = records.root.parent / "outside.json"
    outside.write_text("{}")

    def escape(stmt):
        stmt["subject"].append({"name": "../outside.json", "digest": {"sha256": sha256_file(outside)}})

    _resign_statement(records, "release", escape)
    fails = failed(records.root)
    # the dataset holds no copy of a "record" outside the records tree either
    assert set(fails) == {"release/subjects", "dataset/subjects"}
    assert fails["release/subjects"] == (
        "the release statement binds paths outside the records tree; "
        "expected relative paths without '..', got ../outside.json"
    )


def test_unpinned_profile_fails_naming_the_signer(records):
    toml = records.root / "trust.toml"
    toml.write_text(toml.read_text().replace(f'keyids = ["{records.signer.keyid}"]', "keyids = []"))
    fails = failed(records.root)
    assert fails["release/signature"].startswith("attestations/release.dsse.json: no release key is pinned")
    assert records.signer.keyid in fails["release/signature"]


def test_key_pinned_for_another_profile_steering_the_pins(records):
    """The release key is pinned only for profile `dev`; the records name profile `test`, whose pins
    name another key. An unsigned `dsseEnvelope` beside the payload (where a sigstore bundle keeps
    it) named `dev`, so the pins of `dev` verified a release of `test`: the audit passed."""
    toml = records.root / "trust.toml"
    other = CryptoSigner.generate_ed25519().public_key.keyid
    toml.write_text(
        toml.read_text().replace(
            f'[trust.test]\nkeyids = ["{records.signer.keyid}"]',
            f'[trust.test]\nkeyids = ["{other}"]\n\n[trust.dev]\nkeyids = ["{records.signer.keyid}"]',
        )
    )
    assert "release/signature" in failed(records.root)  # the pins of `test` refuse the key
    path = records.root / "attestations" / "release.dsse.json"
    env = json.loads(path.read_text())
    decoy = _statement(records.root, "release")
    decoy["predicate"]["profile"] = "dev"
    env["dsseEnvelope"] = {"payload": base64.b64encode(canonical_json(decoy)).decode()}
    path.write_text(json.dumps(env))
    fails = failed(records.root)
    # sbom/components and /coverage, the request, what it leaves out and the dataset: not checked without a profile
    assert set(fails) == {
        "release/profile",
        "sbom/components",
        "sbom/coverage",
        "submission/request",
        "provenance/tasks",
        "provenance/sizes",
        "dataset/subjects",
    }
    assert fails["release/profile"] == (
        "the profile attestations/release.dsse.json names vs the profile whose [trust.<profile>] pins verified it; "
        "expected dev, got test; a signer is trusted only for the profile it is pinned for"
    )


def test_malformed_trust_table(records):
    toml = records.root / "trust.toml"
    toml.write_text(toml.read_text().replace(f'keyids = ["{records.signer.keyid}"]', 'keyids = ["short"]'))
    assert (
        "trust.test.keyids[0] holds a value that is not a keyid; expected 64 lowercase hex digits, got short"
        in failed(records.root)["trust/pins"]
    )


def test_readme_edited(records):
    path = records.root / "attestations" / "README.md"
    path.write_text(path.read_text().replace("Build L1", "Build L3"))
    fails = failed(records.root)
    assert set(fails) == {"readme", "release/subjects"}


def test_checks_file_edited(records):
    _edit_json(records.root / "attestations" / "checks.json", lambda d: d.update(seconds=2.0))
    fails = failed(records.root)
    assert set(fails) == {"checks/record", "release/subjects", "intoto/links"}
    assert "checks.json was edited after signing" in fails["checks/record"]


def test_checks_results_edited_and_resigned(records):
    def fail_one(d):
        d["checks"][0]["passed"] = False

    _edit_json(records.root / "attestations" / "checks.json", fail_one)
    digest = sha256_file(records.root / "attestations" / "checks.json")
    _resign_statement(records, "checks", lambda s: s["predicate"]["configuration"][0]["digest"].update(sha256=digest))
    resign(records)
    fails = failed(records.root)
    assert set(fails) == {"checks/results", "checks/passed", "provenance/tasks", "readme"}
    assert "passed checks of attestations/checks.json vs the statement" in fails["checks/results"]


@pytest.mark.parametrize(
    "mutate,where,expected,actual",
    [
        (
            lambda p: p.update(warnedTests=["format-code-task-000666/reference-repair"]),
            "predicate.warnedTests",
            "[]",
            '["format-code-task-000666/reference-repair"]',
        ),
        (
            lambda p: p["configuration"][0]["annotations"].update(total=80),
            "predicate.configuration[0].annotations.total",
            "72",
            "80",
        ),
    ],
)
def test_checks_statement_claims_beyond_checks_json_and_resigned(records, mutate, where, expected, actual):
    _resign_statement(records, "checks", lambda s: mutate(s["predicate"]))
    resign(records)
    fails = failed(records.root)
    assert set(fails) == {"checks/results", "readme"}
    assert fails["checks/results"] == (
        f"checks statement {where} vs attestations/checks.json; expected {expected}, got {actual}"
    )


def test_failed_checks_fail_the_audit(tmp_path, monkeypatch):
    from . import conftest

    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(conftest.EPOCH))
    monkeypatch.setattr(conftest, "CHECKS", (*conftest.CHECKS, ("image/uid", False)))
    rec = conftest.make_records(tmp_path / "r")
    fails = failed(rec.root)
    assert set(fails) == {"checks/passed", "provenance/tasks"}
    assert "image/uid" in fails["checks/passed"]
    assert fails["provenance/tasks"].startswith(
        "the check suite has failures: the release stops before "
        "submission.json; expected 0 failed checks, got 2 failed: "
        "image/uid, image/uid@docker"
    )


def test_failed_checks_signed_as_passed(tmp_path, monkeypatch):
    """An insider with the release key signs the checks statement of a failed suite with result
    PASSED: its passed/failed lists agree with checks.json, so only the verdict was trusted."""
    from . import conftest

    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(conftest.EPOCH))
    monkeypatch.setattr(conftest, "CHECKS", (*conftest.CHECKS, ("image/uid", False)))
    rec = conftest.make_records(tmp_path / "r")
    _resign_statement(rec, "checks", lambda s: s["predicate"].update(result="PASSED"))
    resign(rec)
    fails = failed(rec.root)
    assert set(fails) == {"checks/passed", "checks/results", "provenance/tasks", "readme"}
    assert fails["checks/results"] == (
        'checks statement predicate.result vs attestations/checks.json; expected "FAILED", got "PASSED"'
    )
    assert fails["checks/passed"] == (
        "failed checks in attestations/checks.json (the statement says PASSED); "
        "expected [], got ['image/uid', 'image/uid@docker']"
    )


def test_empty_suite_signed_as_passed(records):
    def empty(d):
        d["checks"], d["summary"] = [], {"total": 0, "passed": 0, "failed": 0}

    _edit_json(records.root / "attestations" / "checks.json", empty)
    digest = sha256_file(records.root / "attestations" / "checks.json")
    _resign_statement(
        records,
        "checks",
        lambda s: (
            s["predicate"]["configuration"][0]["digest"].update(sha256=digest),
            s["predicate"].update(passedTests=[], failedTests=[]),
        ),
    )
    resign(records)
    fails = failed(records.root)
    # An empty suite ran nothing under either runtime: its isolation-mode checks are gone too.
    assert set(fails) == {"checks/passed", "checks/results", "checks/runtimes", "provenance/tasks", "readme"}
    assert fails["checks/passed"] == (
        "attestations/checks.json holds no passed check; expected a whole suite, got 0 check(s)"
    )


def test_checks_about_another_image(records):
    _resign_statement(
        records,
        "checks",
        lambda s: s["predicate"]["configuration"][0]["annotations"].update(image="x/y@sha256:" + "d" * 64),
    )
    resign(records)
    fails = failed(records.root)
    assert set(fails) == {"checks/image", "checks/results", "readme"}


def test_submission_names_another_image(records):
    _edit_json(
        records.root / "submission.json", lambda d: d.update(image=d["image"].split("@")[0] + "@sha256:" + "e" * 64)
    )
    resign(records)
    fails = failed(records.root)
    assert {
        "release/image",
        "provenance/subject",
        "sbom/subject",
        "checks/subject",
        "submission/images",
        "provenance/image",
        "sbom/image",
        "checks/image",
    } <= set(fails)


@pytest.mark.parametrize(
    "field,mutate,expected,actual",
    [
        (
            "runDetails.builder.id",
            lambda p: p["runDetails"]["builder"].update(id="https://github.com/actions/runner/github-hosted"),
            '"https://github.com/akseljoonas/openenv-arena-release/builders/local-key@v1"',
            '"https://github.com/actions/runner/github-hosted"',
        ),
        (
            "buildDefinition.internalParameters.signing",
            lambda p: p["buildDefinition"]["internalParameters"].update(signing="sigstore"),
            '"key"',
            '"sigstore"',
        ),
        (
            "buildDefinition.externalParameters.release.external_tasks_required",
            lambda p: p["buildDefinition"]["externalParameters"]["release"].update(external_tasks_required=True),
            "false",
            "true",
        ),
    ],
)
def test_provenance_claims_another_builder_and_everything_resigned(records, field, mutate, expected, actual):
    """An insider's provenance statement claims a hosted builder, keyless signing, or a stricter policy
    than the release ran with; resolvedDependencies, profile, revision and level are untouched."""
    _resign_statement(records, "provenance", lambda s: mutate(s["predicate"]))
    resign(records)
    fails = failed(records.root)
    assert set(fails) == {"provenance/statement", "readme"}
    assert fails["provenance/statement"] == (
        f"provenance statement predicate.{field} vs the one release.toml, provenance.json and the signature give; "
        f"expected {expected}, got {actual}; the builder, build type, signing and parameters are not the release's"
    )


def test_release_statement_claims_keyless_signing(records):
    _resign_statement(records, "release", lambda s: s["predicate"].update(signing="sigstore"))
    fails = failed(records.root)
    assert fails["release/signature"] == (
        "attestations/release.dsse.json: predicate.signing (how the statement says "
        "it was signed); expected key, got sigstore"
    )


def test_provenance_profile_and_image(records):
    _edit_json(records.root / "provenance.json", lambda d: d["image"].update(digest="sha256:" + "4" * 64))
    resign(records)
    fails = failed(records.root)
    assert "provenance/image" in fails and "submission/images" in fails


def test_a_toolchain_the_lock_does_not_pin_is_caught(records):
    """The builder's toolchain is checked against uv.lock (here the one beside the records: their
    commit is not in a repository), not against itself: a re-signed claim of another sigstore
    wheel, or a lock that pins other bytes, fails provenance/toolchain."""
    lock = records.root / "uv.lock"
    original = lock.read_text()
    sigstore = next(
        d
        for d in json.loads((records.root / "provenance.json").read_text())["builder"]["toolchain"]
        if d["name"] == "sigstore"
    )
    lock.write_text(original.replace(sigstore["sha256"], "0" * 64))
    fails = failed(records.root)
    assert list(fails) == ["provenance/toolchain"]
    assert (
        f"toolchain sigstore {sigstore['version']}: sha256 of {sigstore['file']} vs uv.lock beside"
        in fails["provenance/toolchain"]
    )
    lock.write_text(original)
    _edit_json(
        records.root / "provenance.json",
        lambda d: [e.update(version="0.0.1") for e in d["builder"]["toolchain"] if e["name"] == "sigstore"],
    )
    resign(records)
    assert "toolchain sigstore: version vs uv.lock" in failed(records.root)["provenance/toolchain"]


def test_provenance_source_pin_edited(records):
    _edit_json(records.root / "provenance.json", lambda d: d["sources"][0].update(revision="0" * 40))
    resign(records)
    fails = failed(records.root)
    assert "provenance/sources" in fails
    assert "source metaharness-tasks in provenance.json (revision) vs release.toml" in fails["provenance/sources"]


def test_wheel_lock_edited(records):
    lock = records.root / "locks" / "runtime.txt"
    lock.write_text(lock.read_text().replace("idna==3.10", "idna==3.11"))
    fails = failed(records.root)
    assert "provenance/wheel-lock" in fails
    assert "the wheel lock changed after the release" in fails["provenance/wheel-lock"]


def test_sbom_not_cyclonedx(records):
    (records.root / "attestations" / "sbom.cdx.json").write_text('{"bomFormat": "SPDX"}')
    fails = failed(records.root)
    assert "sbom/schema" in fails


def test_sbom_layer_list_edited_and_resigned(records):
    path = records.root / "attestations" / "sbom.cdx.json"
    doc = json.loads(path.read_text())
    doc["metadata"]["component"]["properties"] = doc["metadata"]["component"]["properties"][:-1]
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    _resign_statement(records, "sbom", lambda s: s.update(predicate=doc))
    resign(records)
    fails = failed(records.root)
    assert {"sbom/layers", "sbom/components"} <= set(fails)
    assert "number of image layers the SBOM lists vs provenance.json" in fails["sbom/layers"]


def test_release_made_after_the_layout_expired_fails(records):
    stmt = json.loads(
        base64.b64decode(json.loads((records.root / "attestations" / "release.dsse.json").read_text())["payload"])
    )
    stmt["predicate"]["releasedOn"] = "2026-01-01T00:00:00Z"
    (records.root / "attestations" / "release.dsse.json").write_bytes(records.signer.sign(canonical_json(stmt)))
    dataset_copy_of_statement(records.root)
    fails = failed(records.root)
    assert set(fails) == {"intoto/links"}
    assert "the layout had already expired when the release was made" in fails["intoto/links"]


def test_layout_signed_by_another_key(records):
    path = records.root / "attestations" / intoto_links.LAYOUT_FILE
    layout = Metadata.load(str(path)).get_payload()
    env = Envelope.from_signable(layout)
    other = CryptoSigner.generate_ed25519()
    env.create_signature(other)
    env.dump(str(path))
    resign(records)
    fails = failed(records.root)
    assert set(fails) == {"intoto/links"}
    assert (
        f"in-toto: attestations/layout.json is not signed by the trusted key; expected {records.signer.keyid}, "
        f"got {other.public_key.keyid}"
    ) in fails["intoto/links"]


# ------------------------------------------------------------------ malformed records: a failed check, never a crash


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    "rel,owner",
    [
        ("attestations/release.dsse.json", "release/signature"),
        ("attestations/sbom.dsse.json", "sbom/signature"),
        ("attestations/layout.json", "intoto/links"),
        ("submission.json", "submission/format"),
        ("provenance.json", "provenance/load"),
        ("attestations/checks.json", "checks/results"),
        ("attestations/sbom.cdx.json", "sbom/schema"),
        ("release.toml", "config/load"),
    ],
)
def test_deeply_nested_record_fails_its_check(records, rel, owner, capsys):
    """json's decoder recurses per nesting level; a forged "[[[[..." record used to stop the audit
    with a RecursionError traceback."""
    (records.root / rel).write_text(DEEP if rel != "release.toml" else "a = " + DEEP)
    fails = failed(records.root)
    assert "RecursionError" in fails[owner]
    assert cli.main(["audit", "--records", str(records.root)]) == 1
    assert capsys.readouterr().out.startswith("AUDIT FAILED")


@pytest.mark.parametrize(
    "rel,owner,detail",
    [
        (
            "submission.json",
            "submission/format",
            "submission.json is not the request the platform accepts "
            "(request.schema.json); expected no contract error, got /: [] is not of "
            "type 'object'",
        ),
        (
            "attestations/checks.json",
            "checks/results",
            "attestations/checks.json is malformed: AttributeError: 'list' object has no attribute 'get'",
        ),
    ],
)
def test_record_that_is_not_a_json_object_fails_its_check(records, rel, owner, detail):
    (records.root / rel).write_text("[]")
    fails = failed(records.root)
    assert fails[owner] == detail


def test_provenance_profile_that_is_not_a_name(records):
    _edit_json(records.root / "provenance.json", lambda d: d.update(profile=["test"]))
    fails = failed(records.root)
    assert fails["provenance/sources"] == (
        'provenance.json\'s profile is not a profile name; expected a string, got ["test"]'
    )


@pytest.mark.parametrize(
    "kind,mutate,owner,detail",
    [
        (
            "provenance",
            lambda s: s.update(predicate=[]),
            "provenance/signature",
            "attestations/provenance.dsse.json: the predicate is not a JSON object; expected object, got list",
        ),
        (
            "provenance",
            lambda s: s["predicate"].update(runDetails=[]),
            "provenance/record",
            "provenance.json is malformed: AttributeError: 'list' object has no attribute 'get'",
        ),
        (
            "checks",
            lambda s: s["predicate"].update(configuration={"digest": {}}),
            "checks/record",
            "attestations/checks.json is malformed: KeyError: 0",
        ),
        (
            "provenance",
            lambda s: s.update(subject=[]),
            "readme",
            "attestations/README.md is malformed: IndexError: list index out of range",
        ),
    ],
)
def test_malformed_statement_signed_by_an_insider(records, kind, mutate, owner, detail):
    """Signed content is still parsed defensively: these stopped the audit with a traceback."""
    _resign_statement(records, kind, mutate)
    resign(records)
    assert failed(records.root)[owner] == detail


@pytest.mark.parametrize("content", ["[]", "null", "{}", '{"payloadType": "x", "payload": "eA==", "signatures": []}'])
def test_layout_that_is_not_in_toto_metadata(records, content):
    (records.root / "attestations" / "layout.json").write_text(content)
    fails = failed(records.root)
    assert set(fails) == {"intoto/links", "release/subjects"}
    assert fails["intoto/links"].startswith(
        "attestations/layout.json is not in-toto metadata; expected a DSSE envelope holding an in-toto layout, got "
    )


def test_layout_replaced_by_a_link(records):
    att = records.root / "attestations"
    (att / "layout.json").write_bytes(next((att / "links").glob("build.*.link")).read_bytes())
    fails = failed(records.root)
    assert set(fails) == {"intoto/links", "release/subjects"}
    assert fails["intoto/links"] == (
        "attestations/layout.json does not hold a layout; expected _type layout, got _type link"
    )


def test_submission_image_not_a_digest_fails_the_audit_not_the_cli(records, capsys):
    _edit_json(records.root / "submission.json", lambda d: d.update(image="arena/x@not-a-digest"))
    assert cli.main(["audit", "--records", str(records.root)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("AUDIT FAILED") and "submission/format: submission.json is not the request" in out
    assert "'arena/x@not-a-digest' does not match" in out


def _resign_layout(rec, mutate):
    path = rec.root / "attestations" / intoto_links.LAYOUT_FILE
    layout = Metadata.load(str(path)).get_payload()
    mutate(layout)
    env = Envelope.from_signable(layout)
    rec.signer.sign_envelope(env)
    env.dump(str(path))
    resign(rec)


def test_layout_of_no_steps_signed_by_an_insider(records):
    """No steps, no links: in-toto verified nothing and intoto/links passed."""
    import shutil

    shutil.rmtree(records.root / "attestations" / "links")
    _resign_layout(records, lambda lay: setattr(lay, "steps", []))
    fails = failed(records.root)
    assert set(fails) == {"intoto/links"}
    assert fails["intoto/links"] == (
        "in-toto: the layout's steps are not the release's; expected ['vendor', 'build', "
        "'sbom', 'verify', 'attest', 'submission'], got []"
    )


def test_layout_allowing_everything_signed_by_an_insider(records):
    def allow_all(lay):
        for step in lay.steps:
            step.expected_materials, step.expected_products = [["ALLOW", "*"]], [["ALLOW", "*"]]

    _resign_layout(records, allow_all)
    fails = failed(records.root)
    assert set(fails) == {"intoto/links"}
    assert fails["intoto/links"].startswith(
        "in-toto: the rules of step vendor are not the release's; expected "
        "{'materials': [['ALLOW', 'release.toml'], ['DISALLOW', '*']]"
    )


def test_layout_with_an_inspection_signed_by_an_insider(records, tmp_path):
    from in_toto.models.layout import Inspection

    marker = tmp_path / "PWNED"
    _resign_layout(records, lambda lay: setattr(lay, "inspect", [Inspection(name="pwn", run=["touch", str(marker)])]))
    fails = failed(records.root)
    assert fails["intoto/links"] == (
        "in-toto: the layout has inspections (commands a verifier would run); expected none, got ['pwn']"
    )
    assert not marker.exists()


# ------------------------------------------------------------------ CLI, JSON and the VSA


def test_cli_table_json_and_exit_codes(records, capsys):
    assert cli.main(["audit", "--records", str(records.root)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("AUDIT PASSED") and "verification summary:" in out
    assert cli.main(["audit", "--records", str(records.root), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["result"] == "PASSED" and {c["id"] for c in doc["checks"]} >= {"release/signature", "sbom/layers"}
    (records.root / "attestations" / "checks.dsse.json").unlink()
    assert cli.main(["audit", "--records", str(records.root)]) == 1
    assert capsys.readouterr().out.startswith("AUDIT FAILED")


def test_vsa_is_signed_and_verifies(records, tmp_path, capsys):
    key = CryptoSigner.generate_ed25519()
    key_file = tmp_path / "auditor.pem"
    key_file.write_bytes(key.private_bytes)
    out = tmp_path / "vsa.dsse.json"
    assert cli.main(["audit", "--records", str(records.root), "--vsa", str(out), "--vsa-key", str(key_file)]) == 0
    stmt = json.loads(signing.dsse_verify(out.read_bytes(), key.public_key, what="vsa"))
    assert stmt["predicateType"] == "https://slsa.dev/verification_summary/v1"
    assert stmt["subject"][0]["digest"]["sha256"] == records.image.digest[7:]
    pred = stmt["predicate"]
    assert pred["verificationResult"] == "PASSED" and pred["verifiedLevels"] == ["SLSA_BUILD_LEVEL_1"]
    assert pred["policy"]["digest"]["sha256"] == sha256_file(records.root / "release.toml")
    assert {i["uri"] for i in pred["inputAttestations"]} == {
        f"attestations/{k}.dsse.json" for k in ("release", "provenance", "sbom", "checks")
    }
    with pytest.raises(VerificationError, match="is not signed by the release key"):
        signing.dsse_verify(out.read_bytes(), CryptoSigner.generate_ed25519().public_key, what="vsa")


def test_vsa_of_a_failed_audit_says_so(records, tmp_path):
    (records.root / "attestations" / "layout.json").unlink()
    out = tmp_path / "vsa.json"
    assert cli.main(["audit", "--records", str(records.root), "--vsa", str(out)]) == 1
    pred = json.loads(out.read_text())["predicate"]
    assert pred["verificationResult"] == "FAILED" and pred["verifiedLevels"] == []
    assert pred["checks"]["intoto/links"] == "fail"


def test_table_is_one_line_per_area_and_verbose_lists_every_id(records):
    (records.root / "attestations" / "layout.json").unlink()
    rows = audit.audit(records.root)
    table = audit.render_table(rows)
    assert table.startswith("AUDIT FAILED: ")
    assert "FAIL     intoto        0/1  links" in table
    assert "         FAIL intoto/links: attestations/layout.json is missing" in table
    assert len(table.splitlines()) < 25
    verbose = audit.render_table(rows, verbose=True)
    assert all(c.id in verbose for c in rows)


def _resign_checks(records, mutate):
    """checks.json changed by `mutate`, its statement re-signed over the new digest (a signer
    who forges both): only the audit's own reading of checks.json can catch it."""
    _edit_json(records.root / "attestations" / "checks.json", mutate)
    digest = sha256_file(records.root / "attestations" / "checks.json")
    _resign_statement(records, "checks", lambda s: s["predicate"]["configuration"][0]["digest"].update(sha256=digest))
    resign(records)
    return failed(records.root)


def test_runtimes_named_in_checks_and_provenance_pass(records):
    assert "checks/runtimes" not in failed(records.root)
    prov = json.loads((records.root / "provenance.json").read_text())
    assert [(r["name"], r["isolation"]) for r in prov["runtimes"]] == [
        ("podman", "namespaces"),
        ("docker", "unprivileged"),
    ]


def test_checks_json_missing_a_runtime_fails(records):
    def drop_docker(d):
        d["runtimes"] = [r for r in d["runtimes"] if r["name"] != "docker"]
        d["checks"] = [c for c in d["checks"] if not c["id"].endswith("@docker")]

    fails = _resign_checks(records, drop_docker)
    assert fails["checks/runtimes"].startswith(
        "the runtimes attestations/checks.json names (missing docker); expected ['podman', 'docker'], got ['podman']"
    )


def test_runtime_without_its_checks_fails(records):
    fails = _resign_checks(
        records,
        lambda d: d.update(
            checks=[c for c in d["checks"] if not (c["id"].endswith("@docker") and "/correct" in c["id"])]
        ),
    )
    assert "runtime docker in attestations/checks.json did not run the whole suite" in fails["checks/runtimes"]


@pytest.mark.parametrize("mode,reported", [("none", None), ("namespaces", "unprivileged")])
def test_forged_isolation_mode_fails(records, mode, reported):
    def forge(d):
        d["runtimes"][1]["isolation"] = mode

    fails = _resign_checks(records, forge)
    if reported is None:
        assert fails["checks/runtimes"].startswith(
            "the isolation mode of runtime docker in attestations/checks.json; "
            "expected namespaces or unprivileged, got none"
        )
    else:
        assert fails["checks/runtimes"].startswith(
            "the isolation mode of runtime docker vs what its server reported in /metadata "
            "(image/isolation-mode@docker) in attestations/checks.json; expected unprivileged, got namespaces"
        )


def test_loosened_docker_container_fails(records):
    def loosen(d):
        d["runtimes"][1]["container_security"].update(cap_add=["SYS_ADMIN"], security_opt=["seccomp=unconfined"])

    fails = _resign_checks(records, loosen)
    assert (
        "runtime docker in attestations/checks.json ran its containers with security loosened"
        in fails["checks/runtimes"]
    )


def test_podman_with_proc_unmasked_outside_a_user_namespace_fails(records):
    # /proc's masks lifted for a container whose root is the host's: its /proc/sys and
    # /proc/sysrq-trigger would be writable (docs/isolation.md).
    def unmask(d):
        d["runtimes"][0]["container_security"].update(security_opt=["unmask=/proc/*"], userns_mode="")

    fails = _resign_checks(records, unmask)
    assert (
        "runtime podman in attestations/checks.json ran its containers with security loosened"
        in fails["checks/runtimes"]
        and "a user namespace of its own" in fails["checks/runtimes"]
    )


def test_provenance_runtimes_must_match_checks_json(records):
    def forge(prov, replace):
        runtimes = [dict(r) for r in prov.runtimes]
        runtimes[1]["isolation"] = "namespaces"
        return replace(prov, runtimes=tuple(runtimes))

    _resign_provenance(records, forge)
    fails = failed(records.root)
    assert fails["checks/runtimes"].startswith("runtimes of provenance.json vs checks.json")
