"""A loopback stand-in for huggingface.co's Hub API and the datasets-server rows API.

huggingface.co is the public internet, so tests that fetch external task records run
against this stand-in. It serves rows laid out like the MiMo dataset's split `code`
(docs/spec/mimo.md, "The records"): `prompt` (one user message), `reward_model`
(style "rule"), and `extra_info` with `instance_id` and the record as the JSON string
`instance_json`, in Python's default one-line `json.dumps` form like the real ones.
Two answers are honoured: `GET /api/datasets/<owner>/<name>` (the head revision) and
`GET /rows?dataset=&config=&split=&offset=&length=` (items `{"row_idx", "row",
"truncated_cells"}`); anything else is a 404.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

DATASET = "XiaomiMiMo/MiMo-V2.6-RL-oss"
REVISION = "639865fd3374018d6cb29b9fb82dd531406fcf5f"
SPLIT = "code"
ROWS_IN_SPLIT = 2698


def mimo_record(
    task_id: str,
    *,
    problem: str = "",
    test_patch: str = "",
    test_command: str = "bash /workspace/repo/mimo_test_command.sh",
) -> dict:
    """A stand-in MiMo task record with the real records' fields (no reference solution)."""
    return {
        "cwd": "/workspace/repo",
        "dataset_type": "opensource-code",
        "docker_image": f"{task_id}:latest",
        "instance_id": task_id,
        "problem_statement": problem or f"Repair the project so the hidden tests pass ({task_id}).",
        "test_command": test_command,
        "test_patch": test_patch,
        "verifier_timeout_sec": 1800,
    }


def record_text(record: dict) -> str:
    """The record as the dataset stores it: one line of `json.dumps`'s default form."""
    return json.dumps(record)


def mimo_row(record_json: str) -> dict:
    """One dataset row holding `record_json` the way the MiMo dataset's rows do."""
    record = json.loads(record_json)
    return {
        "data_source": "mimo-v2.6-rl-oss/code",
        "prompt": [{"role": "user", "content": record["problem_statement"]}],
        "ability": "code",
        "reward_model": {"style": "rule", "ground_truth": ""},
        "extra_info": {"instance_id": record["instance_id"], "instance_json": record_json},
    }


def write_mirror(
    root: Path, rows: dict[int, dict], task_rows: dict[str, int], *, revision: str = REVISION, split: str = SPLIT
) -> Path:
    """The mirror layout of pipeline/sources/dataset.py: one rows-API item per task."""
    for task_id, index in task_rows.items():
        path = root / "huggingface.co" / "datasets" / DATASET / revision / split / f"{task_id}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"row_idx": index, "row": rows[index], "truncated_cells": []}))
    return root


@dataclass
class RowsStandIn:
    """The stand-in's state; tests change it between requests."""

    rows: dict[int, dict]
    head: str = REVISION
    truncated: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    url: str = ""


def _handler(state: RowsStandIn):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format, *args):
            pass

        def _send(self, code: int, obj) -> None:
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            url = urlsplit(self.path)
            state.requests.append(url.path)
            q = {k: v[0] for k, v in parse_qs(url.query).items()}
            if url.path == f"/api/datasets/{DATASET}":
                return self._send(200, {"id": DATASET, "sha": state.head})
            if (
                url.path != "/rows"
                or q.get("dataset") != DATASET
                or q.get("config") != "default"
                or q.get("split") != SPLIT
            ):
                return self._send(404, {"error": "not found"})
            offset, length = int(q["offset"]), int(q["length"])
            items = [
                {"row_idx": i, "row": state.rows[i], "truncated_cells": state.truncated}
                for i in range(offset, min(offset + length, ROWS_IN_SPLIT))
                if i in state.rows
            ]
            return self._send(
                200,
                {
                    "features": [],
                    "rows": items,
                    "num_rows_total": ROWS_IN_SPLIT,
                    "num_rows_per_page": 100,
                    "partial": False,
                },
            )

    return Handler


@contextmanager
def serve(rows: dict[int, dict]) -> Iterator[RowsStandIn]:
    """Serve `rows` (row index -> row) on a free loopback port until the block ends."""
    state = RowsStandIn(rows=rows)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
