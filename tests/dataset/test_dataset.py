"""The dataset folder (dist/dataset/) as a release writes it: its files, the same bytes from the
same inputs, read by consumers with their own tools (huggingface_hub's DatasetCard, the `datasets`
library offline, `python -m json.tool`), and the audit failing on any edit of it."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import audit, plan
from pipeline import config as config_mod
from pipeline.records import card, dataset, provenance, submission
from pipeline.records import statement as release_statement

from ..attest.conftest import make_records
from ..attest.test_audit import _resign_statement, failed, resign

EXTERNAL = ("format-code-task-000666", "format-code-task-001926")


def resign_keeping_the_folder(records, monkeypatch) -> None:
    """The insider re-signs everything over the folder as they edited it (records copied in)."""
    from ..attest import test_audit

    monkeypatch.setattr(test_audit, "refresh_dataset", lambda root: dataset.add_records(root / dataset.FOLDER, root))
    resign(records)


def _statement(records) -> dict:
    envelope = json.loads((records.root / "attestations/release.dsse.json").read_text())
    return json.loads(base64.b64decode(envelope["payload"]))


def _folder(records) -> Path:
    return records.root / dataset.FOLDER


def _tree(folder: Path) -> dict[str, bytes]:
    return {p: (folder / p).read_bytes() for p in dataset.files(folder)}


def test_the_folder_holds_the_card_tasks_vendored_files_and_the_records(records):
    folder = _folder(records)
    names = dataset.files(folder)
    assert {
        "README.md",
        "tasks.jsonl",
        "openenv.yaml",
        "vendor/metaharness-tasks/tasks.py",
        "vendor/metaharness-tasks/LICENSE",
        "provenance.json",
        "submission.json",
        "attestations/release.dsse.json",
        "attestations/checks.json",
        "attestations/layout.json",
    } <= set(names)
    assert (folder / "vendor/metaharness-tasks/tasks.py").read_bytes() == (
        records.root / "vendor/metaharness-tasks/tasks.py"
    ).read_bytes()
    # the environment's OpenEnv manifest, byte for byte the checkout's (the project's own here)
    assert (
        (folder / "openenv.yaml").read_bytes()
        == (records.root / "env/openenv.yaml").read_bytes()
        == (config_mod.REPO_ROOT / "env/openenv.yaml").read_bytes()
    )
    assert "| `openenv.yaml` | the environment's OpenEnv manifest" in (folder / "README.md").read_text()
    for rel in dataset.record_files(names):
        assert (folder / rel).read_bytes() == (records.root / rel).read_bytes(), rel
    # every file but the statement and the publishing aids is a subject, by its sha256
    bound = release_statement.dataset_subjects(_statement(records))
    assert sorted(bound) == [n for n in names if not release_statement.is_unbound(n)]
    assert {"attestations/release.dsse.json", "attestations/release.pub.pem", "attestations/keyid"} == set(names) - set(
        bound
    )


def test_tasks_jsonl_is_the_request_in_order_one_line_per_task(records):
    lines = (_folder(records) / "tasks.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) == 35
    rows = [json.loads(line) for line in lines[:-1]]
    sub = json.loads((records.root / "submission.json").read_text())
    assert [(r["task_id"], r["image"]) for r in rows] == [(t["task_id"], t["image"]) for t in sub["tasks"]]
    first = rows[0]
    assert first == {
        "task_id": "software_change-d1-s101",
        "image": sub["image"],
        "family": "software_change",
        "difficulty": 1,
        "seed": 101,
    }
    ext = {r["task_id"]: r for r in rows if r["task_id"] in EXTERNAL}
    assert list(ext["format-code-task-000666"]) == [
        "task_id",
        "image",
        "dataset",
        "revision",
        "split",
        "row",
        "record_sha256",
        "reference",
    ]
    prov = json.loads((records.root / "provenance.json").read_text())
    record = prov["external"][0]
    assert ext["format-code-task-000666"] == {
        "task_id": "format-code-task-000666",
        "image": record["image"],
        "dataset": record["dataset"],
        "revision": record["revision"],
        "split": record["split"],
        "row": record["row"],
        "record_sha256": record["sha256"],
        "reference": record["reference"],
    }
    second = prov["external"][1]
    assert (ext["format-code-task-001926"]["row"], ext["format-code-task-001926"]["record_sha256"]) == (
        second["row"],
        second["sha256"] or None,
    )


def test_json_tool_accepts_every_line_and_refuses_a_broken_one(records, tmp_path):
    path = _folder(records) / "tasks.jsonl"
    for line in path.read_text().splitlines():
        proc = subprocess.run([sys.executable, "-m", "json.tool"], input=line, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    broken = tmp_path / "broken.jsonl"
    broken.write_text(path.read_text().replace("}\n", "\n", 1))
    proc = subprocess.run([sys.executable, "-m", "json.tool", "--json-lines", str(broken)], capture_output=True)
    assert proc.returncode != 0


def test_same_inputs_give_the_same_bytes(tmp_path, monkeypatch):
    """Two releases of the same inputs (same place, same key) write the same folder, byte for byte;
    regenerating the card and tasks.jsonl from the written records gives them again."""
    from securesystemslib.signer import CryptoSigner

    from pipeline.records import sbom, signing

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    signer = signing.KeySigner(CryptoSigner.generate_ed25519())
    root = tmp_path / "records"
    first = _tree(make_records(root, signer).root / dataset.FOLDER)
    shutil.rmtree(root)
    os.umask(0o077)
    try:
        second = _tree(make_records(root, signer).root / dataset.FOLDER)
    finally:
        os.umask(0o022)
    assert first == second
    cfg = config_mod.load(root / "release.toml")
    again = card.generate(
        cfg,
        provenance.load(root / "provenance.json"),
        submission.load(root / "submission.json"),
        project_license=sbom.project_license(root),
        target=plan.resolve(cfg, "test").dataset,
    )
    assert again == {"README.md": first["README.md"], "tasks.jsonl": first["tasks.jsonl"]}


def test_huggingface_hub_loads_the_card_and_its_metadata_validates(records):
    from huggingface_hub import DatasetCard, DatasetCardData

    path = _folder(records) / "README.md"
    loaded = DatasetCard.load(path)
    assert str(loaded) == path.read_text()  # the card is what the library writes back
    meta = loaded.data.to_dict()
    assert meta["license"] == "other" and meta["license_name"] == "mixed-apache-2.0-and-mit"
    assert meta["license_link"].startswith("https://")
    assert meta["language"] == ["en"] and meta["tags"] == ["openenv", "reinforcement-learning", "tool-use"]
    assert meta["source_datasets"] == ["XiaomiMiMo/MiMo-V2.6-RL-oss", "ruv/metaharness-arena-tasks"]
    assert meta["configs"] == [{"config_name": "default", "data_files": [{"split": "train", "path": "tasks.jsonl"}]}]
    assert DatasetCardData(**meta).to_dict() == meta  # the strict constructor (no ignored errors) takes it
    body = loaded.text
    for phrase in (
        "## Tasks",
        "## Images and sizes",
        "## Budgets",
        "## How to verify",
        "## Licences",
        "## Provenance",
        "nox -s audit",
        "nox -s reproduce",
        "does not publish it",
    ):
        assert phrase in body, phrase


def test_the_card_says_its_cases_are_release_tomls_curriculum(records):
    body = (_folder(records) / "README.md").read_text()
    assert (
        "The 32 procedural cases are the curriculum declared in `release.toml`'s `[curriculum]` at the "
        "project commit: families `software_change`, `industrial_schedule`,"
    ) in body
    assert "`media_timeline`, difficulties 1, 2 and seeds 101, 307, one block of one case per family" in body
    # Another curriculum's lines give its own figures, and no external task changes them.
    lines = (
        dataset.TaskLine("math_route-d3-s202", "i", family="math_route", difficulty=3, seed=202),
        dataset.TaskLine("x", "e", dataset="d", row=1),
        dataset.TaskLine("media_timeline-d3-s202", "i", family="media_timeline", difficulty=3, seed=202),
    )
    assert card._curriculum(lines)[0].startswith(
        "The 2 procedural cases are the curriculum declared in `release.toml`'s `[curriculum]` at the project "
        "commit: families `math_route`, `media_timeline`, difficulties 3 and seeds 202,"
    )
    assert card._curriculum(lines[1:2]) == []


def test_the_datasets_library_loads_it_offline_in_request_order(records, tmp_path):
    """`datasets` (a test dependency) reads the folder through the card's configs, with the Hub
    unreachable by construction (offline mode) and an empty cache."""
    script = (
        "import datasets, json, sys\n"
        "d = datasets.load_dataset(sys.argv[1])\n"
        "t = d['train']\n"
        "print(json.dumps({'splits': sorted(d), 'rows': t.num_rows, 'ids': list(t['task_id']),\n"
        "                  'features': {k: str(v.dtype) for k, v in t.features.items()},\n"
        "                  'ext': t[8]}))\n"
    )
    env = {
        **os.environ,
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "HF_ENDPOINT": "http://127.0.0.1:9",
    }
    proc = subprocess.run(
        [sys.executable, "-c", script, str(_folder(records))],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    sub = json.loads((records.root / "submission.json").read_text())
    assert got["splits"] == ["train"] and got["rows"] == 34
    assert got["ids"] == [t["task_id"] for t in sub["tasks"]]
    assert got["features"] == {
        "task_id": "string",
        "image": "string",
        "family": "string",
        "difficulty": "int64",
        "seed": "int64",
        "dataset": "string",
        "revision": "string",
        "split": "string",
        "row": "int64",
        "record_sha256": "string",
        "reference": "string",
    }
    assert got["ext"]["task_id"] == "format-code-task-000666" and got["ext"]["family"] is None
    assert got["ext"]["row"] == 666


# ------------------------------------------------------------------ the audit


def test_audit_passes_with_the_folder_and_without_it(records):
    rows = {c.id: c for c in audit.audit(records.root)}
    assert all(c.ok for c in rows.values()), audit.render_table(list(rows.values()))
    for cid in (
        "dataset/subjects",
        "dataset/card",
        "dataset/tasks",
        "dataset/manifest",
        "dataset/publication",
        "dataset/folder",
    ):
        assert rows[cid].status == audit.rows.PASS, cid
    # a fresh clone has no dist/: every bound file is still checked, from the records
    shutil.rmtree(_folder(records))
    rows = {c.id: c for c in audit.audit(records.root)}
    assert all(c.ok for c in rows.values()), audit.render_table(list(rows.values()))
    assert rows["dataset/folder"].status == audit.INFO
    bound = len(release_statement.dataset_subjects(_statement(records)))
    assert rows["dataset/folder"].detail.startswith(f"dist/dataset/ is not here: its {bound} bound files were checked")
    assert rows["dataset/card"].status == rows["dataset/tasks"].status == audit.rows.PASS
    assert rows["dataset/manifest"].status == audit.rows.PASS


def _every_file():
    return [
        "README.md",
        "tasks.jsonl",
        "openenv.yaml",
        "vendor/metaharness-tasks/tasks.py",
        "vendor/metaharness-tasks/LICENSE",
        "provenance.json",
        "submission.json",
        "attestations/README.md",
        "attestations/checks.json",
        "attestations/sbom.cdx.json",
        "attestations/layout.json",
        "attestations/provenance.dsse.json",
        "attestations/links/verify",
        "attestations/release.dsse.json",
        "attestations/release.pub.pem",
        "attestations/keyid",
    ]


@pytest.mark.parametrize("rel", _every_file())
def test_editing_any_file_of_the_folder_fails_the_audit(records, rel):
    folder = _folder(records)
    if rel == "attestations/links/verify":
        rel = next(p for p in dataset.files(folder) if p.startswith("attestations/links/verify."))
    path = folder / rel
    path.write_bytes(path.read_bytes() + b" ")
    fails = failed(records.root)
    assert set(fails) == {"dataset/folder"}, fails
    assert rel in fails["dataset/folder"]


def test_a_file_added_to_or_removed_from_the_folder_fails_the_audit(records):
    folder = _folder(records)
    (folder / "vendor" / "extra.py").write_text("print('not released')\n")
    assert "not bound vendor/extra.py" in failed(records.root)["dataset/folder"]
    (folder / "vendor" / "extra.py").unlink()
    (folder / "tasks.jsonl").unlink()
    assert "missing tasks.jsonl" in failed(records.root)["dataset/folder"]


def test_a_card_claiming_what_the_records_do_not_show_fails_even_resigned(records, monkeypatch):
    """An insider with the release key edits the card and re-signs everything: the card regenerated
    from the records is not the one the statement binds."""
    path = _folder(records) / "README.md"
    path.write_text(path.read_text().replace("## Budgets", "Every task was solved by a frontier model.\n\n## Budgets"))
    resign_keeping_the_folder(records, monkeypatch)
    fails = failed(records.root)
    assert set(fails) == {"dataset/card"}
    assert "README.md regenerated from the records vs the one the release statement binds" in fails["dataset/card"]


def test_tasks_reordered_and_resigned_fail(records, monkeypatch):
    path = _folder(records) / "tasks.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join([lines[1], lines[0], *lines[2:]]))
    resign_keeping_the_folder(records, monkeypatch)
    assert set(failed(records.root)) == {"dataset/tasks"}


def test_a_vendored_file_of_the_folder_other_than_its_pin_fails_even_resigned(records, monkeypatch):
    path = _folder(records) / "vendor/metaharness-tasks/tasks.py"
    path.write_bytes(path.read_bytes() + b"import os\n")
    resign_keeping_the_folder(records, monkeypatch)
    fails = failed(records.root)
    assert set(fails) == {"dataset/subjects"}
    assert "vendor/metaharness-tasks/tasks.py vs provenance.json's pin" in fails["dataset/subjects"]


def test_an_openenv_manifest_other_than_the_environments_fails_even_resigned(records, monkeypatch):
    """An insider edits the folder's openenv.yaml (another app, another port) and re-signs everything:
    it is neither the checkout's env/openenv.yaml nor the one the image ships."""
    path = _folder(records) / "openenv.yaml"
    path.write_text(path.read_text().replace("port: 8000", "port: 9000"))
    resign_keeping_the_folder(records, monkeypatch)
    fails = failed(records.root)
    assert set(fails) == {"dataset/manifest"}, fails
    assert "sha256 of the dataset's openenv.yaml vs the checkout's env/openenv.yaml" in fails["dataset/manifest"]


def test_a_release_statement_that_does_not_bind_the_manifest_fails(records, monkeypatch):
    """The folder without openenv.yaml, re-signed over what is left: the statement binds no manifest."""
    (_folder(records) / "openenv.yaml").unlink()
    resign_keeping_the_folder(records, monkeypatch)
    fails = failed(records.root)
    assert set(fails) == {"dataset/subjects", "dataset/manifest"}, fails
    assert "not bound: openenv.yaml" in fails["dataset/subjects"]
    # the statement of the release, its openenv.yaml subject dropped: the folder's file is unbound too
    records = make_records(records.root.parent / "again")
    _resign_statement(
        records,
        "release",
        lambda stmt: stmt.update(subject=[s for s in stmt["subject"] if s["name"] != "dist/dataset/openenv.yaml"]),
    )
    fails = failed(records.root)
    assert set(fails) == {"dataset/subjects", "dataset/manifest", "dataset/folder"}, fails
    assert "not bound openenv.yaml" in fails["dataset/folder"]


def test_a_checkout_whose_manifest_is_not_the_released_one_fails(records):
    """env/openenv.yaml edited after the release: a fresh clone without dist/ still sees that the
    released manifest is not this commit's."""
    shutil.rmtree(_folder(records))
    path = records.root / "env/openenv.yaml"
    path.write_text(path.read_text().replace("port: 8000", "port: 9000"))
    fails = failed(records.root)
    assert set(fails) == {"dataset/manifest"}, fails
    assert "vs the checkout's env/openenv.yaml" in fails["dataset/manifest"]
    path.unlink()
    assert "expected absent, got" in failed(records.root)["dataset/manifest"]


def test_a_publication_claimed_by_a_profile_that_does_not_publish_fails(records):
    prov_path = records.root / "provenance.json"
    doc = json.loads(prov_path.read_text())
    doc["dataset"].update(published=True, revision="a" * 40, url="https://huggingface.co/x", reason="")
    prov_path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    fails = failed(records.root)
    assert "dataset/publication" in fails
    assert "(which does not publish it); expected (False, None), got (True, 'aaaa" in fails["dataset/publication"]


def test_records_without_a_dataset_folder_fail(records):
    """Records of a release made before the dataset existed: the statement binds no folder."""

    def drop(stmt):
        stmt["subject"] = [s for s in stmt["subject"] if not release_statement.is_dataset_subject(s["name"])]

    _resign_statement(records, "release", drop)
    fails = failed(records.root)
    assert set(fails) == {"dataset/subjects", "dataset/card", "dataset/tasks", "dataset/manifest", "dataset/folder"}
    assert "not bound: README.md" in fails["dataset/subjects"]
