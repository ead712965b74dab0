"""External task records: pinned, fetched from a mirror or over HTTPS, verified, never edited.

huggingface.co and its datasets-server are the public internet, so the HTTPS tests
run against a loopback server that mocks both (named `..._mocking_huggingface`).
"""

from __future__ import annotations

import dataclasses
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from pipeline import config, plan
from pipeline.sources import dataset as external
from pipeline._io import canonical_json, sha256_bytes
from pipeline.errors import DigestMismatch, SourceError

DATASET = "XiaomiMiMo/MiMo-V2.6-RL-oss"
REVISION = "639865fd3374018d6cb29b9fb82dd531406fcf5f"
IDS = ("format-code-task-000666", "format-code-task-001926")


def _rows() -> list[dict]:
    rows = [{"task_id": f"other-task-{i:06d}", "prompt": "other"} for i in range(8)]
    rows[3] = {"task_id": IDS[0], "prompt": "Reformat the code — keep behaviour ✓", "max_turns": 64}
    rows[6] = {"task_id": IDS[1], "prompt": "Fix the failing formatter test", "tags": ["a", "b"]}
    return rows


def _cfg(hub: str = "http://127.0.0.1:9", pins: dict[str, tuple[int, str]] | None = None):
    cfg = config.load()
    tasks = []
    for task in cfg.external.tasks:
        row, sha = (pins or {}).get(task.task_id, (None, ""))
        tasks.append(dataclasses.replace(task, row=row, record_sha256=sha))
    ext = dataclasses.replace(cfg.external, hub_url=hub, rows_url=hub, tasks=tuple(tasks))
    return dataclasses.replace(cfg, external=ext)


def _pins(rows=None) -> dict[str, tuple[int, str]]:
    rows = rows or _rows()
    return {IDS[0]: (3, external.record_sha256(rows[3])), IDS[1]: (6, external.record_sha256(rows[6]))}


def _write_mirror(root, rows=None, *, revision=REVISION):
    rows = rows or _rows()
    for idx in (3, 6):
        path = (root / "huggingface.co" / "datasets" / DATASET / revision / "train"
                / f"{rows[idx]['task_id']}.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"row_idx": idx, "row": rows[idx], "truncated_cells": []}, indent=1))
    return root


class FakeHub:
    """State of the mocked Hub API and datasets-server."""

    def __init__(self):
        self.head = REVISION
        self.rows = _rows()
        self.truncated: list[str] = []
        self.requests: list[str] = []


def _handler(hub: FakeHub):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format, *args):  # noqa: A002 - the base class's signature
            pass

        def _send(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802 - http.server's naming
            url = urlsplit(self.path)
            hub.requests.append(url.path)
            q = {k: v[0] for k, v in parse_qs(url.query).items()}
            if url.path == f"/api/datasets/{DATASET}":
                return self._send(200, {"id": DATASET, "sha": hub.head})
            if url.path not in ("/rows", "/filter") or q.get("dataset") != DATASET \
                    or q.get("config") != "default" or q.get("split") != "train":
                return self._send(404, {"error": "not found"})
            items = [{"row_idx": i, "row": r, "truncated_cells": hub.truncated}
                     for i, r in enumerate(hub.rows)]
            if url.path == "/rows":
                offset, length = int(q["offset"]), int(q["length"])
                items = items[offset:offset + length]
            else:
                wanted = q["where"].split("=", 1)[1].strip("'")
                items = [it for it in items if it["row"]["task_id"] == wanted]
            return self._send(200, {"features": [], "rows": items, "num_rows_total": len(hub.rows)})
    return Handler


@pytest.fixture
def fake_hub():
    """A loopback server mocking huggingface.co's Hub API and datasets-server."""
    hub = FakeHub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()


def test_record_sha256_is_over_canonical_json():
    row = {"b": 1, "a": "é"}
    assert external.record_sha256(row) == sha256_bytes('{"a":"é","b":1}'.encode())


def test_unpinned_records_from_mirror_report_the_values_to_pin(tmp_path):
    cfg = _cfg()
    mirror = _write_mirror(tmp_path / "mirror")
    records = external.fetch_records(cfg, plan.resolve(cfg, "local").external, tmp_path / "vendor", mirror=mirror)
    pins = _pins()
    for record, task_id in zip(records, IDS):
        row, sha = pins[task_id]
        assert record.status == external.UNPINNED
        assert f"row = {row}" in record.reason and sha in record.reason
        assert (record.row, record.sha256) == (row, sha)
        stored = tmp_path / "vendor" / record.record_path
        assert sha256_bytes(stored.read_bytes()) == sha
    with pytest.raises(SourceError, match="not pinned in release.toml") as info:
        external.fetch_records(cfg, plan.resolve(cfg, "arena").external, tmp_path / "vendor", mirror=mirror)
    assert pins[IDS[0]][1] in info.value.one_line()


def test_pinned_records_from_mirror_are_verified_then_offline(tmp_path):
    cfg = _cfg(pins=_pins())
    mirror = _write_mirror(tmp_path / "mirror")
    records = external.fetch_records(cfg, plan.resolve(cfg, "arena").external, tmp_path / "vendor", mirror=mirror)
    assert [r.status for r in records] == [external.VERIFIED] * 2
    first = records[0]
    assert (first.dataset, first.revision, first.split, first.license) == (DATASET, REVISION, "train", "Apache-2.0")
    assert first.digest == cfg.external.tasks[0].digest and first.budgets["rollout_wall_s"] == 1200
    # No mirror and no network: the vendored records still verify.
    again = external.fetch_records(cfg, plan.resolve(cfg, "arena").external, tmp_path / "vendor")
    assert again == records


def test_tampered_mirror_record_is_a_hash_mismatch(tmp_path):
    rows = _rows()
    cfg = _cfg(pins=_pins(rows))
    rows[3] = dict(rows[3], prompt=rows[3]["prompt"].replace("R", "r", 1))
    mirror = _write_mirror(tmp_path / "mirror", rows)
    with pytest.raises(DigestMismatch, match=f"hash mismatch for external record {IDS[0]}") as info:
        external.fetch_records(cfg, plan.resolve(cfg, "local").external, tmp_path / "vendor", mirror=mirror)
    assert _pins()[IDS[0]][1] in info.value.one_line()
    assert not (tmp_path / "vendor" / "external" / f"{IDS[0]}.json").exists()


def test_vendored_record_edited_after_fetch_is_detected(tmp_path):
    cfg = _cfg(pins=_pins())
    external.fetch_records(cfg, plan.resolve(cfg, "arena").external, tmp_path / "vendor",
                           mirror=_write_mirror(tmp_path / "mirror"))
    stored = tmp_path / "vendor" / "external" / f"{IDS[1]}.json"
    stored.chmod(0o644)
    stored.write_bytes(stored.read_bytes().replace(b"Fix", b"Fax"))
    with pytest.raises(DigestMismatch, match="modified after fetching"):
        external.fetch_records(cfg, plan.resolve(cfg, "arena").external, tmp_path / "vendor")


def test_mirror_record_of_another_task_or_row_is_refused(tmp_path):
    rows = _rows()
    rows[3] = dict(rows[3], task_id="format-code-task-999999")
    mirror = _write_mirror(tmp_path / "mirror", rows)
    (mirror / "huggingface.co" / "datasets" / DATASET / REVISION / "train"
     / "format-code-task-999999.json").rename(
        mirror / "huggingface.co" / "datasets" / DATASET / REVISION / "train" / f"{IDS[0]}.json")
    cfg = _cfg()
    with pytest.raises(SourceError, match="is another task"):
        external.fetch_records(cfg, plan.resolve(cfg, "local").external, tmp_path / "vendor", mirror=mirror)
    cfg = _cfg(pins={IDS[0]: (4, "a" * 64)})
    with pytest.raises(SourceError, match="at another row"):
        external.fetch_records(cfg, plan.resolve(cfg, "local").external, tmp_path / "v2",
                               mirror=_write_mirror(tmp_path / "m2"))


def test_unreachable_records_are_not_fetched_locally_and_refused_for_arena(tmp_path):
    cfg = _cfg(hub="http://127.0.0.1:9")
    records = external.fetch_records(cfg, plan.resolve(cfg, "local").external, tmp_path / "vendor")
    assert [r.status for r in records] == [external.NOT_FETCHED] * 2
    assert "127.0.0.1:9 unreachable" in records[0].reason and records[0].record_path == ""
    with pytest.raises(SourceError, match="could not be fetched"):
        external.fetch_records(cfg, plan.resolve(cfg, "arena").external, tmp_path / "vendor")


def test_https_unpinned_then_pinned_mocking_huggingface(fake_hub, tmp_path):
    cfg = _cfg(hub=fake_hub.url)
    records = external.fetch_records(cfg, plan.resolve(cfg, "local").external, tmp_path / "a")
    assert [(r.status, r.row, r.sha256) for r in records] == \
        [(external.UNPINNED, *_pins()[i]) for i in IDS]
    assert "/filter" in fake_hub.requests and "/rows" not in fake_hub.requests
    fake_hub.requests.clear()
    cfg = _cfg(hub=fake_hub.url, pins=_pins())
    records = external.fetch_records(cfg, plan.resolve(cfg, "arena").external, tmp_path / "b")
    assert [r.status for r in records] == [external.VERIFIED] * 2
    assert fake_hub.requests.count("/rows") == 2


def test_https_tampered_row_is_a_hash_mismatch_mocking_huggingface(fake_hub, tmp_path):
    cfg = _cfg(hub=fake_hub.url, pins=_pins())
    fake_hub.rows[6] = dict(fake_hub.rows[6], tags=["a", "c"])
    with pytest.raises(DigestMismatch, match=f"hash mismatch for external record {IDS[1]}"):
        external.fetch_records(cfg, plan.resolve(cfg, "local").external, tmp_path / "vendor")


def test_https_moved_head_cannot_confirm_unpinned_record_mocking_huggingface(fake_hub, tmp_path):
    fake_hub.head = "f" * 40
    cfg = _cfg(hub=fake_hub.url)
    records = external.fetch_records(cfg, plan.resolve(cfg, "local").external, tmp_path / "vendor")
    assert records[0].status == external.NOT_FETCHED and "not the pinned revision" in records[0].reason
    # Pinned records are decided by their sha256, whatever the head.
    cfg = _cfg(hub=fake_hub.url, pins=_pins())
    records = external.fetch_records(cfg, plan.resolve(cfg, "arena").external, tmp_path / "vendor")
    assert [r.status for r in records] == [external.VERIFIED] * 2


def test_https_truncated_cells_are_refused_mocking_huggingface(fake_hub, tmp_path):
    fake_hub.truncated = ["prompt"]
    cfg = _cfg(hub=fake_hub.url, pins=_pins())
    with pytest.raises(SourceError, match="truncated cells"):
        external.fetch_records(cfg, plan.resolve(cfg, "local").external, tmp_path / "vendor")


def test_stored_record_holds_exactly_the_canonical_bytes(tmp_path):
    cfg = _cfg(pins=_pins())
    records = external.fetch_records(cfg, plan.resolve(cfg, "local").external, tmp_path / "vendor",
                                     mirror=_write_mirror(tmp_path / "mirror"))
    stored = (tmp_path / "vendor" / records[0].record_path).read_bytes()
    assert stored == canonical_json(_rows()[3])


def test_check_stored_recomputes_from_the_vendor_directory(tmp_path):
    cfg = _cfg(pins=_pins())
    records = external.fetch_records(cfg, plan.resolve(cfg, "arena").external, tmp_path / "vendor",
                                     mirror=_write_mirror(tmp_path / "mirror"))
    for record in records:
        external.check_stored(record, tmp_path / "vendor")
    stored = tmp_path / "vendor" / records[0].record_path
    stored.chmod(0o644)
    stored.write_bytes(stored.read_bytes() + b" ")
    with pytest.raises(DigestMismatch, match="was modified"):
        external.check_stored(records[0], tmp_path / "vendor")
    stored.unlink()
    with pytest.raises(SourceError, match="is missing"):
        external.check_stored(records[0], tmp_path / "vendor")
