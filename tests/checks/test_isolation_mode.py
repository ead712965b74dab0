"""image/isolation-mode against small real HTTP servers whose /metadata is right or broken.

The environment's server reports its isolation mode in /metadata (`isolation`: `namespaces`
or `unprivileged`); a server that names none, names another, or names `unprivileged` where
the runtime allows user namespaces (podman) fails the check. The mode is the check's detail,
which the records read (pipeline/checks/run.py `runtime_record`).
"""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pipeline.checks import image_checks
from pipeline.checks._record import Recorder
from pipeline.checks.client import http_get
from pipeline.checks.results import SuiteResult
from pipeline.checks.run import ENGINE_ISOLATION, runtime_record
from pipeline.checks.target import Target

ABSENT = object()


@contextmanager
def metadata_server(isolation):
    body = {"name": "arena", "description": "x"}
    if isolation is not ABSENT:
        body["isolation"] = isolation
    data = json.dumps(body).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/metadata" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _check(url: str, engine: str):
    rec = Recorder("image")
    status, body = http_get(url, "/metadata")
    image_checks.isolation_mode_check(status, body, Target(url=url, isolation=ENGINE_ISOLATION[engine]), rec)
    (result,) = rec.results
    return result


@pytest.mark.parametrize(
    ("isolation", "engine"),
    [
        (ABSENT, "docker"),
        ("none", "docker"),
        ("", "docker"),
        (["namespaces"], "docker"),
        # podman allows user namespaces: its server must run episodes in them.
        ("unprivileged", "podman"),
    ],
)
def test_broken_metadata_fails(isolation, engine):
    with metadata_server(isolation) as url:
        result = _check(url, engine)
    assert result.id == "image/isolation-mode" and not result.passed
    # A mode of the two is the detail, pass or fail (the records say what the server said).
    assert result.detail == (f"isolation: {isolation}" if isolation in ("namespaces", "unprivileged") else "")


@pytest.mark.parametrize(
    ("isolation", "engine"), [("namespaces", "podman"), ("namespaces", "docker"), ("unprivileged", "docker")]
)
def test_reported_mode_passes_and_is_recorded(isolation, engine):
    with metadata_server(isolation) as url:
        result = _check(url, engine)
    assert result.passed and result.detail == f"isolation: {isolation}"
    suite = SuiteResult(image="x", targets=(url,), checks=(result,), seconds=0.0)
    record = runtime_record({"engine": engine, "version": "1"}, {}, suite, suffix="", containers=1)
    assert record["isolation"] == isolation


def test_a_failed_check_records_no_mode():
    with metadata_server("sideways") as url:
        result = _check(url, "docker")
    suite = SuiteResult(image="x", targets=(url,), checks=(result,), seconds=0.0)
    assert runtime_record({"engine": "docker"}, {}, suite, suffix="", containers=1)["isolation"] is None
