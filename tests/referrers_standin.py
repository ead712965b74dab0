"""A registry with the OCI 1.1 referrers API, for tests: a loopback proxy in front of the real
local registry (Debian's docker-registry has no referrers API, and no registry package that
has one is at hand; ghcr.io and other hosted registries cannot be reached here).

Every request is passed to the real registry as it came; on top of that, as the
distribution spec's referrers API has it:

    PUT /v2/<name>/manifests/<digest>   a manifest with a `subject`, once stored, is indexed
                                        by its subject and answered with `OCI-Subject`
    GET /v2/<name>/referrers/<digest>   the image index of the manifests whose subject it is
                                        (`artifactType` and annotations carried over)

It never keeps the referrers tag schema's `sha256-<hex>` tags itself: a client that writes one
against this registry is not using the API.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

_MANIFEST = re.compile(r"^/v2/(?P<name>.+)/manifests/(?P<ref>sha256:[0-9a-f]{64})$")
_REFERRERS = re.compile(r"^/v2/(?P<name>.+)/referrers/(?P<digest>sha256:[0-9a-f]{64})$")
INDEX = "application/vnd.oci.image.index.v1+json"
HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


class ReferrersStandin:
    """`with ReferrersStandin(backend_address) as standin:` serves on `standin.address`."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.index: dict[tuple[str, str], list[dict]] = {}
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> ReferrersStandin:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    def _handler(self):
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _forward(self, body: bytes) -> requests.Response:
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
                headers["Host"] = standin.address
                return requests.request(
                    self.command,
                    f"http://{standin.backend}{self.path}",
                    data=body or None,
                    headers=headers,
                    allow_redirects=False,
                    timeout=60,
                )

            def _answer(self, status: int, headers: dict[str, str], body: bytes) -> None:
                self.send_response(status)
                for k, v in headers.items():
                    if k.lower() not in HOP:
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _any(self) -> None:
                path = self.path.split("?")[0]
                m = _REFERRERS.match(path)
                if self.command == "GET" and m:
                    with standin.lock:
                        listed = list(standin.index.get((m["name"], m["digest"]), ()))
                    body = json.dumps({"schemaVersion": 2, "mediaType": INDEX, "manifests": listed}).encode()
                    return self._answer(200, {"Content-Type": INDEX}, body)
                body = self._body()
                resp = self._forward(body)
                headers = dict(resp.headers)
                m = _MANIFEST.match(path)
                if self.command == "PUT" and m and resp.status_code == 201:
                    doc = json.loads(body)
                    subject = (doc.get("subject") or {}).get("digest")
                    if subject:
                        entry = {"mediaType": doc.get("mediaType"), "digest": m["ref"], "size": len(body)}
                        if doc.get("artifactType"):
                            entry["artifactType"] = doc["artifactType"]
                        if doc.get("annotations"):
                            entry["annotations"] = doc["annotations"]
                        with standin.lock:
                            listed = standin.index.setdefault((m["name"], subject), [])
                            if entry not in listed:
                                listed.append(entry)
                        headers["OCI-Subject"] = subject
                self._answer(resp.status_code, headers, resp.content)

            do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _any

        return Handler
