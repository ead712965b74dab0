"""External task records: pinned by split, row and the sha256 of the record text; fetched
from a mirror or from the rows API, verified, never edited.

huggingface.co and its datasets-server are the public internet, so the HTTPS tests run
against a loopback stand-in of both (tests/sources/rows_standin.py, `..._standin`).
"""

from __future__ import annotations

import json

import pytest

from pipeline import config, plan
from pipeline._io import sha256_bytes
from pipeline.errors import ConfigError, DigestMismatch, SourceError
from pipeline.sources import dataset as external

from .rows_standin import DATASET, REVISION, mimo_record, mimo_row, record_text, serve, write_mirror

IDS = ("format-code-task-000666", "format-code-task-001926")
ROWS = {IDS[0]: 50, IDS[1]: 2610}


def _texts() -> dict[str, str]:
    return {
        IDS[0]: record_text(mimo_record(IDS[0], problem="Add `pyromat.get(idstr)` — exact lookup ✓")),
        IDS[1]: record_text(mimo_record(IDS[1], test_patch="diff --git a/t.py b/t.py\n")),
    }


def _rows(texts: dict[str, str] | None = None) -> dict[int, dict]:
    texts = texts or _texts()
    rows = {i: mimo_row(record_text(mimo_record(f"format-code-task-{i:06d}"))) for i in (49, 51, 2611)}
    rows.update({ROWS[t]: mimo_row(text) for t, text in texts.items()})
    return rows


def _pins(texts: dict[str, str] | None = None) -> dict[str, str]:
    return {t: external.record_sha256(text.encode()) for t, text in (texts or _texts()).items()}


def _cfg(url: str = "http://127.0.0.1:9", pins: dict[str, str] | None = None, rows: dict[str, int] | None = None):
    """release.toml with the stand-in's URLs and the given pins (none: unpinned)."""
    cfg = config.load()
    tasks = tuple(
        t.model_copy(update={"record_sha256": (pins or {}).get(t.task_id, ""), "row": (rows or ROWS)[t.task_id]})
        for t in cfg.external.tasks
    )
    ext = cfg.external.model_copy(update={"hub_url": url, "rows_url": url, "tasks": tasks})
    return cfg.model_copy(update={"external": ext})


def _policy(cfg, profile: str):
    return plan.resolve(cfg, profile).external


def _mirror(tmp_path, rows=None, task_rows=None):
    return write_mirror(tmp_path / "mirror", rows or _rows(), task_rows or ROWS)


def test_release_toml_pins_the_seed_records():
    tasks = {t.task_id: t for t in config.load().external.tasks}
    assert [(tasks[t].split, tasks[t].row, tasks[t].record_sha256) for t in IDS] == [
        ("code", 50, "e3b09ca80d91baef357d840a87c5c20294a398912bdd36465ef1851e3fa53c91"),
        ("code", 2610, "4ce81aef8baf1f619dd054003031e74a2cb8c5fe18377770fdd8fcd9e7cf6f7e"),
    ]
    ext = config.load().external
    assert (ext.id_field, ext.record_field) == ("extra_info.instance_id", "extra_info.instance_json")


def test_pin_is_over_the_stored_text_never_a_reserialisation():
    text = _texts()[IDS[0]]
    assert external.record_sha256(text.encode()) == sha256_bytes(text.encode())
    compact = json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False)
    assert external.record_sha256(compact.encode()) != external.record_sha256(text.encode())


def test_unpinned_records_from_mirror_report_the_value_to_pin(tmp_path):
    cfg = _cfg()
    mirror = _mirror(tmp_path)
    records = external.fetch_records(cfg, _policy(cfg, "local"), tmp_path / "vendor", mirror=mirror)
    for record, task_id in zip(records, IDS):
        assert record.status == external.UNPINNED and record.row == ROWS[task_id]
        assert record.sha256 == _pins()[task_id] and f'record_sha256 = "{record.sha256}"' in record.reason
    with pytest.raises(SourceError, match="not pinned in release.toml") as info:
        external.fetch_records(cfg, _policy(cfg, "arena"), tmp_path / "vendor", mirror=mirror)
    assert _pins()[IDS[0]] in info.value.one_line()


def test_pinned_records_from_mirror_are_verified_then_offline(tmp_path):
    cfg = _cfg(pins=_pins())
    records = external.fetch_records(cfg, _policy(cfg, "arena"), tmp_path / "vendor", mirror=_mirror(tmp_path))
    assert [r.status for r in records] == [external.VERIFIED] * 2
    first = records[0]
    assert (first.dataset, first.revision, first.split, first.row, first.license) == (
        DATASET,
        REVISION,
        "code",
        50,
        "Apache-2.0",
    )
    assert first.reference == "mimo-reference-000666" and first.budget_split == "train"
    # No mirror and no network: the vendored records still verify.
    assert external.fetch_records(cfg, _policy(cfg, "arena"), tmp_path / "vendor") == records


def test_stored_record_is_exactly_the_stored_text(tmp_path):
    cfg = _cfg(pins=_pins())
    records = external.fetch_records(cfg, _policy(cfg, "local"), tmp_path / "vendor", mirror=_mirror(tmp_path))
    for record, task_id in zip(records, IDS):
        assert (tmp_path / "vendor" / record.record_path).read_bytes() == _texts()[task_id].encode()


def test_a_changed_byte_is_refused_with_both_hashes(tmp_path):
    texts = _texts()
    cfg = _cfg(pins=_pins(texts))
    changed = dict(texts, **{IDS[0]: texts[IDS[0]].replace("exact", "exakt", 1)})
    with pytest.raises(DigestMismatch, match=f"hash mismatch for external record {IDS[0]}") as info:
        external.fetch_records(
            cfg, _policy(cfg, "local"), tmp_path / "vendor", mirror=_mirror(tmp_path, _rows(changed))
        )
    assert f"expected sha256 {_pins()[IDS[0]]}" in info.value.one_line()
    assert f"sha256 {_pins(changed)[IDS[0]]}" in info.value.one_line()
    assert not (tmp_path / "vendor" / "external" / f"{IDS[0]}.json").exists()


def test_a_wrong_row_is_refused(tmp_path):
    cfg = _cfg(pins=_pins())
    # The mirror holds the right record, but from another row than the pin.
    with pytest.raises(SourceError, match="is at another row") as info:
        external.fetch_records(
            cfg,
            _policy(cfg, "local"),
            tmp_path / "v1",
            mirror=write_mirror(tmp_path / "m1", {51: _rows()[50], **_rows()}, {IDS[0]: 51, IDS[1]: 2610}),
        )
    assert "expected row 50 of split code" in info.value.one_line() and "row 51" in info.value.one_line()
    # The pin names a row that holds another task.
    cfg = _cfg(pins=_pins(), rows={IDS[0]: 51, IDS[1]: 2610})
    with pytest.raises(SourceError, match="is another task") as info:
        external.fetch_records(
            cfg,
            _policy(cfg, "local"),
            tmp_path / "v2",
            mirror=write_mirror(tmp_path / "m2", _rows(), {IDS[0]: 51, IDS[1]: 2610}),
        )
    assert "got extra_info.instance_id = 'format-code-task-000051'" in info.value.one_line()


def test_a_wrong_instance_id_is_refused(tmp_path):
    cfg = _cfg(pins=_pins())
    # extra_info names the task, the record inside names another one.
    other = record_text(mimo_record("format-code-task-000667"))
    row = mimo_row(other)
    row["extra_info"]["instance_id"] = IDS[0]
    with pytest.raises(SourceError, match="names another task") as info:
        external.fetch_records(
            cfg, _policy(cfg, "local"), tmp_path / "v1", mirror=_mirror(tmp_path / "a", {**_rows(), 50: row})
        )
    assert "expected instance_id = format-code-task-000666" in info.value.one_line()
    # The record is right, extra_info names another task.
    row = mimo_row(_texts()[IDS[0]])
    row["extra_info"]["instance_id"] = "format-code-task-000667"
    with pytest.raises(SourceError, match="is another task"):
        external.fetch_records(
            cfg, _policy(cfg, "local"), tmp_path / "v2", mirror=_mirror(tmp_path / "b", {**_rows(), 50: row})
        )


def test_a_row_without_record_text_is_refused(tmp_path):
    cfg = _cfg(pins=_pins())
    row = mimo_row(_texts()[IDS[0]])
    row["extra_info"]["instance_json"] = json.loads(row["extra_info"]["instance_json"])
    with pytest.raises(SourceError, match="holds no record text"):
        external.fetch_records(
            cfg, _policy(cfg, "local"), tmp_path / "v", mirror=_mirror(tmp_path, {**_rows(), 50: row})
        )


def test_vendored_record_edited_after_fetch_is_detected(tmp_path):
    cfg = _cfg(pins=_pins())
    external.fetch_records(cfg, _policy(cfg, "arena"), tmp_path / "vendor", mirror=_mirror(tmp_path))
    stored = tmp_path / "vendor" / "external" / f"{IDS[1]}.json"
    stored.chmod(0o644)
    stored.write_bytes(stored.read_bytes().replace(b"Repair", b"Rapair"))
    with pytest.raises(DigestMismatch, match="modified after fetching"):
        external.fetch_records(cfg, _policy(cfg, "arena"), tmp_path / "vendor")


def test_check_stored_recomputes_from_the_vendor_directory(tmp_path):
    cfg = _cfg(pins=_pins())
    records = external.fetch_records(cfg, _policy(cfg, "arena"), tmp_path / "vendor", mirror=_mirror(tmp_path))
    for record in records:
        external.check_stored(record, tmp_path / "vendor")
    stored = tmp_path / "vendor" / records[0].record_path
    stored.chmod(0o644)
    stored.write_bytes(stored.read_bytes() + b"\n")
    with pytest.raises(DigestMismatch, match="was modified"):
        external.check_stored(records[0], tmp_path / "vendor")
    stored.unlink()
    with pytest.raises(SourceError, match="is missing"):
        external.check_stored(records[0], tmp_path / "vendor")


def test_unreachable_records_are_not_fetched_locally_and_refused_for_arena(tmp_path):
    cfg = _cfg(url="http://127.0.0.1:9", pins=_pins())
    records = external.fetch_records(cfg, _policy(cfg, "local"), tmp_path / "vendor")
    assert [r.status for r in records] == [external.NOT_FETCHED] * 2
    assert "127.0.0.1:9 unreachable" in records[0].reason and records[0].record_path == ""
    with pytest.raises(SourceError, match="could not be fetched"):
        external.fetch_records(cfg, _policy(cfg, "arena"), tmp_path / "vendor")


def test_rows_api_pinned_records_verified_standin(tmp_path):
    with serve(_rows()) as hub:
        cfg = _cfg(url=hub.url, pins=_pins())
        records = external.fetch_records(cfg, _policy(cfg, "arena"), tmp_path / "vendor")
    assert [r.status for r in records] == [external.VERIFIED] * 2
    assert hub.requests.count("/rows") == 2
    assert (tmp_path / "vendor" / records[1].record_path).read_bytes() == _texts()[IDS[1]].encode()


def test_rows_api_changed_byte_wrong_row_wrong_id_are_refused_standin(tmp_path):
    texts = _texts()
    changed = {**texts, IDS[1]: texts[IDS[1]].replace("t.py", "u.py", 1)}
    with serve(_rows(changed)) as hub:
        cfg = _cfg(url=hub.url, pins=_pins())
        with pytest.raises(DigestMismatch, match=f"hash mismatch for external record {IDS[1]}"):
            external.fetch_records(cfg, _policy(cfg, "local"), tmp_path / "a")
    with serve(_rows()) as hub:
        cfg = _cfg(url=hub.url, pins=_pins(), rows={IDS[0]: 49, IDS[1]: 2610})
        with pytest.raises(SourceError, match="row 49 of split code .* is another task"):
            external.fetch_records(cfg, _policy(cfg, "local"), tmp_path / "b")
    rows = _rows()
    rows[50] = mimo_row(record_text(mimo_record("format-code-task-000667")))
    rows[50]["extra_info"]["instance_id"] = IDS[0]
    with serve(rows) as hub:
        cfg = _cfg(url=hub.url, pins=_pins())
        with pytest.raises(SourceError, match="names another task"):
            external.fetch_records(cfg, _policy(cfg, "local"), tmp_path / "c")


def test_rows_api_unpinned_record_needs_the_pinned_head_standin(tmp_path):
    with serve(_rows()) as hub:
        cfg = _cfg(url=hub.url)
        records = external.fetch_records(cfg, _policy(cfg, "local"), tmp_path / "a")
        assert [(r.status, r.sha256) for r in records] == [(external.UNPINNED, _pins()[t]) for t in IDS]
        hub.head = "f" * 40
        records = external.fetch_records(cfg, _policy(cfg, "local"), tmp_path / "b")
        assert records[0].status == external.NOT_FETCHED and "not the pinned revision" in records[0].reason
        # Pinned records are decided by their sha256, whatever the head.
        cfg = _cfg(url=hub.url, pins=_pins())
        records = external.fetch_records(cfg, _policy(cfg, "arena"), tmp_path / "c")
    assert [r.status for r in records] == [external.VERIFIED] * 2


def test_rows_api_truncated_cells_are_refused_standin(tmp_path):
    with serve(_rows()) as hub:
        hub.truncated = ["extra_info"]
        cfg = _cfg(url=hub.url, pins=_pins())
        with pytest.raises(SourceError, match="truncated cells"):
            external.fetch_records(cfg, _policy(cfg, "local"), tmp_path / "vendor")


def test_reference_must_name_a_source_of_the_profiles_that_require_it(tmp_path):
    text = config.DEFAULT_CONFIG.read_text()
    bad = tmp_path / "release.toml"
    bad.write_text(text.replace('reference = "mimo-reference-001926"', 'reference = "mimo-reference-9"'))
    with pytest.raises(ConfigError, match=r"external.tasks\[1\].reference names no \[\[sources\]\] entry"):
        config.load(bad)
    # mimo-reference-001926 is the last source: vendored by local only, not by arena.
    bad.write_text(text.replace('profiles = ["arena"]\n\n# ------', 'profiles = ["local"]\n\n# ------', 1))
    with pytest.raises(ConfigError, match="not vendored by profile"):
        config.load(bad)
    bad.write_text(text.replace("row = 2610\n", ""))
    with pytest.raises(ConfigError, match=r"external.tasks\[1\]: missing key 'row'"):
        config.load(bad)


def test_an_unknown_external_key_is_refused_and_the_removed_repair_table_still_loads(tmp_path):
    text = config.DEFAULT_CONFIG.read_text()
    bad = tmp_path / "release.toml"
    bad.write_text(text.replace("[[external.tasks]]", 'revisions = "x"\n\n[[external.tasks]]', 1))
    with pytest.raises(ConfigError, match=r"unknown key 'revisions' in \[external\]; ") as err:
        config.load(bad)
    assert "did you mean `revision`?" in str(err.value)
    # A commit before [external.repair] was removed: reproduce reads that commit's release.toml.
    old = tmp_path / "old.toml"
    old.write_text(
        text.replace("[[external.tasks]]", '[external.repair]\nworkspace = "/workspace/repo"\n\n[[external.tasks]]', 1)
    )
    assert config.load(old).external == config.load(config.DEFAULT_CONFIG).external
