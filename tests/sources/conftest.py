"""Real git repositories made in the test, and loopback servers that serve them.

`upstream`: a working repository with a task file and a LICENSE, and a bare copy
under a served root at `team/tasks.git`. The bare copy is served as `file://`, by
`git http-backend` (smart HTTP, through a small WSGI wrapper) and by a plain static
file server (dumb HTTP). Only the public internet is replaced: these are real git
servers on loopback.
"""

from __future__ import annotations

import functools
import http.server
import socketserver
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest

from pipeline import config
from pipeline._io import sha256_bytes
from pipeline.sources import git

TASK_PATH = "integrations/arena/tasks.py"
TASK_BYTES = b"# upstream task module\nTASKS = ['a', 'b']\n" * 40
LICENSE_BYTES = b"MIT License\n\nCopyright (c) upstream authors\n"


def run_git(*args: str | Path, cwd: Path | None = None) -> str:
    env = git.hermetic_env() | {
        "GIT_AUTHOR_NAME": "Upstream",
        "GIT_AUTHOR_EMAIL": "up@example.org",
        "GIT_COMMITTER_NAME": "Upstream",
        "GIT_COMMITTER_EMAIL": "up@example.org",
        "GIT_AUTHOR_DATE": "1700000000 +0000",
        "GIT_COMMITTER_DATE": "1700000000 +0000",
    }
    proc = subprocess.run(["git", *map(str, args)], cwd=cwd, env=env, capture_output=True, check=True)
    return proc.stdout.decode().strip()


def commit_files(work: Path, files: dict[str, bytes | None], message: str) -> str:
    """Write (or delete, for None) files in `work`, commit, return the new commit id."""
    for rel, data in files.items():
        path = work / rel
        if data is None:
            run_git("rm", "-q", rel, cwd=work)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        run_git("add", rel, cwd=work)
    run_git("commit", "-q", "-m", message, cwd=work)
    return run_git("rev-parse", "HEAD", cwd=work)


@dataclass
class Upstream:
    work: Path
    served_root: Path
    bare: Path
    revision: str

    @property
    def file_url(self) -> str:
        return self.bare.as_uri()

    def publish(self, *, force: bool = False) -> None:
        """Push the working repository's main to the served bare copy."""
        run_git("push", "-q", *(["--force"] if force else []), str(self.bare), "main:main", cwd=self.work)
        run_git("update-server-info", cwd=self.bare)

    def rewrite_history(self) -> str:
        """Force-push a history without the pinned commit and garbage-collect it away."""
        run_git("checkout", "-q", "--orphan", "rewritten", cwd=self.work)
        new = commit_files(
            self.work, {TASK_PATH: TASK_BYTES + b"# rewritten\n", "LICENSE": LICENSE_BYTES}, "rewritten history"
        )
        run_git("push", "-q", "--force", str(self.bare), "rewritten:main", cwd=self.work)
        run_git("reflog", "expire", "--expire=now", "--all", cwd=self.bare)
        run_git("gc", "-q", "--prune=now", cwd=self.bare)
        run_git("update-server-info", cwd=self.bare)
        return new

    def source(self, url: str, **overrides) -> config.Source:
        fields = dict(
            name="upstream-tasks",
            repository=url,
            revision=self.revision,
            path=TASK_PATH,
            sha256=sha256_bytes(TASK_BYTES),
            size=len(TASK_BYTES),
            license="MIT",
            license_file="LICENSE",
            profiles=("arena",),
            license_sha256="",
        )
        fields.update(overrides)
        return config.Source(**fields)


@pytest.fixture
def upstream(tmp_path) -> Upstream:
    work = tmp_path / "upstream-work"
    work.mkdir()
    run_git("init", "-q", "-b", "main", cwd=work)
    commit_files(work, {"README.md": b"upstream\n"}, "initial")
    revision = commit_files(work, {TASK_PATH: TASK_BYTES, "LICENSE": LICENSE_BYTES}, "tasks")
    served_root = tmp_path / "srv"
    bare = served_root / "team" / "tasks.git"
    bare.parent.mkdir(parents=True)
    run_git("init", "-q", "--bare", "-b", "main", str(bare))
    up = Upstream(work=work, served_root=served_root, bare=bare, revision=revision)
    up.publish()
    return up


class _QuietWSGIHandler(WSGIRequestHandler):
    def log_message(self, format, *args):
        pass


class _ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


def _git_http_backend(project_root: Path, *, protocol_v2: bool = True):
    """A WSGI app running `git http-backend` as a CGI program for each request.

    With `protocol_v2=False` the client's protocol request is dropped, so the server
    speaks protocol v0, which refuses wants of unadvertised commits by default.
    """

    def app(environ, start_response):
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        env = git.hermetic_env() | {
            "GIT_PROJECT_ROOT": str(project_root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": environ["REQUEST_METHOD"],
            "PATH_INFO": environ.get("PATH_INFO", ""),
            "QUERY_STRING": environ.get("QUERY_STRING", ""),
            "CONTENT_TYPE": environ.get("CONTENT_TYPE", ""),
            "CONTENT_LENGTH": str(len(body)),
            "HTTP_CONTENT_ENCODING": environ.get("HTTP_CONTENT_ENCODING", ""),
            "GIT_PROTOCOL": environ.get("HTTP_GIT_PROTOCOL", "") if protocol_v2 else "",
            "REMOTE_ADDR": "127.0.0.1",
        }
        proc = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, check=False)
        sep = b"\r\n\r\n" if b"\r\n\r\n" in proc.stdout else b"\n\n"
        head, _, payload = proc.stdout.partition(sep)
        status, headers = "200 OK", []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = value.strip()
            elif name:
                headers.append((name, value.strip()))
        start_response(status, headers)
        return [payload]

    return app


def _serve(server) -> str:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def smart_http(upstream):
    """Base URL of `git http-backend` serving the upstream's served root on loopback."""
    yield from _smart_http(upstream, protocol_v2=True)


@pytest.fixture
def smart_http_v0(upstream):
    """Like smart_http, but the server only speaks git protocol v0."""
    yield from _smart_http(upstream, protocol_v2=False)


def _smart_http(upstream, *, protocol_v2: bool):
    app = _git_http_backend(upstream.served_root, protocol_v2=protocol_v2)
    server = make_server("127.0.0.1", 0, app, server_class=_ThreadingWSGIServer, handler_class=_QuietWSGIHandler)
    try:
        yield _serve(server)
    finally:
        server.shutdown()
        server.server_close()


class _QuietStaticHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


@pytest.fixture
def dumb_http(upstream):
    """Base URL of a static file server over the served root (git's dumb HTTP protocol)."""
    handler = functools.partial(_QuietStaticHandler, directory=str(upstream.served_root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    try:
        yield _serve(server)
    finally:
        server.shutdown()
        server.server_close()
