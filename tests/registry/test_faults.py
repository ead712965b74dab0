"""Faults: 5xx and dropped connections (through a loopback fault-injecting proxy in
front of the real registry), a registry killed mid-push, an unreachable registry, one that
accepts and never answers, an HTML error page, a full disk under a download, a base index
without linux/amd64."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from pipeline.errors import ConfigError, NoSpace, RegistryError
from pipeline.image.oci import digest
from pipeline.image.oci.image import OCI_INDEX, UnsupportedPlatform
from pipeline.registry import local as localregistry
from pipeline.registry.client import RegistryClient
from pipeline.registry.pull import pull
from pipeline.registry.push import push_layout

HOP = {"connection", "transfer-encoding", "keep-alive", "content-length", "content-encoding"}


class FaultProxy:
    """Forwards to `upstream`; each queued fault ("503", "502", "drop") hits one request."""

    def __init__(self, upstream: str) -> None:
        self.upstream, self.faults, self.seen = upstream, [], []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _any(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                proxy.seen.append((self.command, self.path))
                fault = proxy.faults.pop(0) if proxy.faults else None
                if fault == "drop":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if fault:
                    self.send_response(int(fault))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
                resp = requests.request(
                    self.command,
                    f"http://{proxy.upstream}{self.path}",
                    headers=headers,
                    data=body,
                    allow_redirects=False,
                )
                self.send_response(resp.status_code)
                for k, v in resp.headers.items():
                    if k.lower() not in HOP:
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(resp.content)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(resp.content)

            do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def proxy(local_registry):
    p = FaultProxy(local_registry.address)
    yield p
    p.close()


def test_5xx_and_dropped_connections_are_retried(local_registry, proxy, repo_name, tmp_path, build_image, writer):
    img = build_image(tmp_path / "src")
    push_layout(writer(local_registry), repo_name, tmp_path / "src")
    proxy.faults = ["503", "drop", "502"]
    client = RegistryClient(proxy.address, backoff=0.01)
    got = client.get_manifest(repo_name, img.manifest_digest)
    assert got.raw == img.manifest_bytes
    manifest_gets = [p for m, p in proxy.seen if m == "GET" and "/manifests/" in p]
    assert len(manifest_gets) == 4
    proxy.faults = ["drop", "503"]
    pulled = pull(
        f"{proxy.address}/{repo_name}@{img.manifest_digest}",
        tmp_path / "dst",
        client=RegistryClient(proxy.address, backoff=0.01),
    )
    assert pulled.manifest_digest == img.manifest_digest


def test_retries_are_bounded(local_registry, proxy, repo_name):
    proxy.faults = ["503"] * 10
    with pytest.raises(RegistryError, match="HTTP 503"):
        RegistryClient(proxy.address, attempts=3, backoff=0.01).get_manifest(repo_name, "v1")
    assert len(proxy.seen) == 3


def test_unreachable_registry_is_one_line_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = RegistryClient(f"127.0.0.1:{port}", attempts=2, backoff=0.01)
    with pytest.raises(RegistryError) as err:
        client.get_manifest("a/b", "sha256:" + "0" * 64)
    line = err.value.one_line()
    assert "\n" not in line
    assert f"cannot reach registry 127.0.0.1:{port}" in line and "registry start" in line


def test_push_interrupted_by_killing_registry_resumes_without_resending(
    fresh_registry, repo_name, tmp_path, build_image, writer
):
    img = build_image(tmp_path / "src", layer_sizes=(40_000, 40_000, 40_000, 40_000))
    all_blobs = [img.manifest.config.digest] + [l.digest for l in img.manifest.layers]

    class KillsRegistryAfterTwoBlobs(RegistryClient):
        uploads = 0

        def upload_blob(self, repository, digest_, source, **kw):
            if self.uploads == 2:
                os.kill(fresh_registry.registry_pid, signal.SIGKILL)
            self.uploads += 1
            return super().upload_blob(repository, digest_, source, **kw)

    killer = writer(fresh_registry, attempts=2, backoff=0.01)
    killer.__class__ = KillsRegistryAfterTwoBlobs
    with pytest.raises(RegistryError):
        push_layout(killer, repo_name, tmp_path / "src", tag="v1")
    assert localregistry.status(fresh_registry.root) is None

    restarted = localregistry.start(fresh_registry.root)
    assert restarted.address == fresh_registry.address
    assert restarted.registry_pid != fresh_registry.registry_pid
    again = push_layout(writer(restarted), repo_name, tmp_path / "src", tag="v1")
    assert set(again.blobs_skipped) == set(all_blobs[:2])
    assert set(again.blobs_sent) == set(all_blobs[2:])
    pulled = pull(f"{restarted.address}/{repo_name}@{img.manifest_digest}", tmp_path / "dst")
    assert pulled.layer_count == 4


def _index_bytes(img, platforms):
    return json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [
                {
                    "mediaType": img.media_type,
                    "digest": img.manifest_digest,
                    "size": len(img.manifest_bytes),
                    "platform": {"os": "linux", "architecture": arch},
                }
                for arch in platforms
            ],
        }
    ).encode()


def test_non_amd64_index_refused_naming_platforms(local_registry, repo_name, tmp_path, build_image, writer):
    img = build_image(tmp_path / "src")
    push_layout(writer(local_registry), repo_name, tmp_path / "src")
    raw = _index_bytes(img, ["arm64", "ppc64le"])
    writer(local_registry).put_manifest(repo_name, digest.of_bytes(raw), raw, OCI_INDEX)
    with pytest.raises(UnsupportedPlatform) as err:
        pull(f"{local_registry.address}/{repo_name}@{digest.of_bytes(raw)}", tmp_path / "dst")
    assert "linux/arm64, linux/ppc64le" in str(err.value)


def test_index_resolves_to_its_amd64_manifest(local_registry, repo_name, tmp_path, build_image, writer):
    img = build_image(tmp_path / "src")
    push_layout(writer(local_registry), repo_name, tmp_path / "src")
    raw = _index_bytes(img, ["arm64", "amd64"])
    writer(local_registry).put_manifest(repo_name, digest.of_bytes(raw), raw, OCI_INDEX)
    pulled = pull(f"{local_registry.address}/{repo_name}@{digest.of_bytes(raw)}", tmp_path / "dst")
    assert pulled.index_digest == digest.of_bytes(raw)
    assert pulled.manifest_digest == img.manifest_digest


@pytest.fixture
def silent_port():
    """A loopback port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield s.getsockname()[1]


def test_a_registry_that_does_not_answer_shows_progress_and_gives_up_within_its_wait(silent_port, capsys):
    client = RegistryClient(f"127.0.0.1:{silent_port}", wait=3, progress_s=1, backoff=0.01)
    started = time.monotonic()
    with pytest.raises(RegistryError) as err:
        client.get_manifest("a/b", "sha256:" + "0" * 64)
    took = time.monotonic() - started
    assert 2.5 <= took < 6, took
    line = err.value.one_line()
    assert f"registry 127.0.0.1:{silent_port} did not answer GET /v2/a/b/manifests/" in line
    assert "within 3 s" in line and "RELEASE_REGISTRY_WAIT_S" in line and "\n" not in line
    said = capsys.readouterr().err
    assert f"waiting for 127.0.0.1:{silent_port}, 1 s..." in said and "giving up after 3 s" in said


def test_the_wait_for_a_registry_is_configurable_and_two_minutes_by_default(monkeypatch):
    monkeypatch.delenv("RELEASE_REGISTRY_WAIT_S", raising=False)
    assert RegistryClient("127.0.0.1:1").wait == 120
    monkeypatch.setenv("RELEASE_REGISTRY_WAIT_S", "7.5")
    assert RegistryClient("127.0.0.1:1").wait == 7.5
    monkeypatch.setenv("RELEASE_REGISTRY_WAIT_S", "soon")
    with pytest.raises(ConfigError, match="RELEASE_REGISTRY_WAIT_S is not a number"):
        RegistryClient("127.0.0.1:1")


NGINX_502 = (
    b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway"
    b"</h1></center>\r\n<hr><center>nginx/1.22.1</center>\r\n</body>\r\n</html>\r\n"
)


def test_an_html_error_page_is_summarised_not_pasted():
    class Bad(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            self.send_response(502)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(NGINX_502)))
            self.end_headers()
            self.wfile.write(NGINX_502)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Bad)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = RegistryClient(f"127.0.0.1:{server.server_address[1]}", attempts=2, backoff=0.01)
        with pytest.raises(RegistryError) as err:
            client.get_manifest("a/b", "v1")
    finally:
        server.shutdown()
        server.server_close()
    line = err.value.one_line()
    assert "HTTP 502 (an HTML page: 502 Bad Gateway)" in line
    assert "<" not in line and "\n" not in line


@pytest.mark.root
def test_a_full_disk_while_a_blob_is_written_is_one_line_with_the_path_and_the_size(
    local_registry, repo_name, tmp_path, build_image, writer
):
    img = build_image(tmp_path / "src", layer_sizes=(3_000_000,))
    push_layout(writer(local_registry), repo_name, tmp_path / "src")
    layer = img.manifest.layers[0]
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)], check=True)
    try:
        with pytest.raises(NoSpace) as err:
            RegistryClient(local_registry.address).get_blob(repo_name, layer.digest, small / "blob", size=layer.size)
        assert list(small.iterdir()) == []  # the partial download is gone
    finally:
        subprocess.run(["umount", str(small)], check=True)
    line = err.value.one_line()
    assert line.startswith(f"no space left on the file system of {small} (writing blob {layer.digest}")
    assert f"expected about {layer.size / 1e6:,.0f} MB free" in line and "free space there" in line
    assert "\n" not in line
