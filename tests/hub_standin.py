"""A stand-in for the few huggingface.co endpoints the release's Hub adapter uses (tests only).

huggingface.co cannot be reached here, so this serves, on loopback, what huggingface_hub
(the real client, pinned in pyproject.toml) asks of the Hub when pipeline.records.hub
publishes and reads back a dataset; written from the requests that client was seen to make:

    POST /api/validate-yaml                                   README.md's metadata block
    POST /api/datasets/<repo>/preupload/<rev>                 upload mode per file (always "regular")
    POST /api/datasets/<repo>/commit/<rev>                    an NDJSON commit (files inline, deletions)
    GET  /api/datasets/<repo>/tree/<rev>?recursive=...         the files (and folders) of a revision
    HEAD|GET /datasets/<repo>/resolve/<rev>/<path>            a file at a revision (by branch or commit id)

Writes need `Authorization: Bearer <token>`; reads are anonymous unless the repository is
private. Commits are content-addressed like git's (blob ids are git blob sha1s). Faults for the
teeth tests: `changed_byte` (paths whose download has one byte flipped, same length) and
`write_behind` (a file someone else commits right after the next commit). Every request is
logged with whether it carried a token; a request for anything else is logged in `unknown`
and answered 404, so a test sees it when the client starts asking for more.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

REPO = r"(?P<repo>[^/]+/[^/]+)"
ROUTES = (
    ("POST", re.compile(r"^/api/validate-yaml$"), "validate_yaml"),
    ("POST", re.compile(rf"^/api/datasets/{REPO}/preupload/(?P<rev>[^/]+)$"), "preupload"),
    ("POST", re.compile(rf"^/api/datasets/{REPO}/commit/(?P<rev>[^/]+)$"), "commit"),
    ("GET", re.compile(rf"^/api/datasets/{REPO}/tree/(?P<rev>[^/]+)(?:/(?P<path>.*))?$"), "tree"),
    ("HEAD", re.compile(rf"^/datasets/{REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)$"), "resolve"),
    ("GET", re.compile(rf"^/datasets/{REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)$"), "resolve"),
)
GITATTRIBUTES = b"*.parquet filter=lfs diff=lfs merge=lfs -text\n"


def blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Commit:
    oid: str
    parent: str | None
    files: dict[str, bytes]
    summary: str


@dataclass
class Repo:
    private: bool = False
    commits: dict[str, Commit] = field(default_factory=dict)
    head: str = ""

    def resolve(self, rev: str) -> Commit | None:
        if rev == "main":
            return self.commits[self.head]
        return self.commits.get(rev)


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    token: str | None


class HubStandin:
    """The stand-in's state and its server; `url` is what HF_ENDPOINT points at."""

    def __init__(self, token: str = "hf_standin_write_token") -> None:
        self.token = token
        self.repos: dict[str, Repo] = {}
        self.requests: list[Request] = []
        self.unknown: list[str] = []
        self.changed_byte: set[str] = set()
        self.write_behind: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> HubStandin:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def create_repo(self, repo_id: str, *, private: bool = False) -> None:
        """A new dataset repository, holding the .gitattributes the Hub creates it with."""
        repo = Repo(private=private)
        self.repos[repo_id] = repo
        self._commit(repo, {".gitattributes": GITATTRIBUTES}, "initial commit")

    def files_at(self, repo_id: str, rev: str) -> dict[str, bytes]:
        return dict(self.repos[repo_id].resolve(rev).files)

    def commits(self, repo_id: str) -> list[Commit]:
        """The commits of `repo_id`, oldest first (following parents from the head)."""
        repo, out = self.repos[repo_id], []
        oid: str | None = repo.head
        while oid:
            out.append(repo.commits[oid])
            oid = repo.commits[oid].parent
        return out[::-1]

    def _commit(self, repo: Repo, files: dict[str, bytes], summary: str) -> Commit:
        parent = repo.head or None
        digest = hashlib.sha1(
            json.dumps(
                [parent, summary, sorted((p, blob_oid(d)) for p, d in files.items()), len(repo.commits)]
            ).encode()
        ).hexdigest()
        commit = Commit(digest, parent, files, summary)
        repo.commits[digest] = commit
        repo.head = digest
        return commit


def _handler(hub: HubStandin):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # the tests read hub.requests instead
            pass

        def _token(self) -> str | None:
            auth = self.headers.get("Authorization", "")
            return auth[len("Bearer ") :] if auth.startswith("Bearer ") else None

        def _send(
            self,
            code: int,
            body: bytes = b"",
            *,
            headers: dict[str, str] | None = None,
            content_type: str = "application/json",
            head: bool = False,
        ) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def _json(self, code: int, obj, **kw) -> None:
            self._send(code, json.dumps(obj).encode(), **kw)

        def _error(self, code: int, message: str, error_code: str | None = None, head: bool = False) -> None:
            self._json(code, {"error": message}, headers={"X-Error-Code": error_code} if error_code else {}, head=head)

        def _body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _dispatch(self, method: str) -> None:
            url = urlsplit(self.path)
            path = unquote(url.path)
            with hub._lock:
                hub.requests.append(Request(method, path, self._token()))
            for m, pattern, name in ROUTES:
                match = pattern.match(path)
                if m == method and match:
                    return getattr(self, name)(match.groupdict(), parse_qs(url.query), head=method == "HEAD")
            with hub._lock:
                hub.unknown.append(f"{method} {self.path}")
            self._body()
            self._error(404, f"the stand-in does not serve {method} {path}")

        def do_GET(self) -> None:
            self._dispatch("GET")

        def do_HEAD(self) -> None:
            self._dispatch("HEAD")

        def do_POST(self) -> None:
            self._dispatch("POST")

        def _repo(self, groups, *, write: bool = False, head: bool = False) -> Repo | None:
            if write and self._token() != hub.token:
                self._body()
                self._error(401, "Invalid credentials in Authorization header", head=head)
                return None
            repo = hub.repos.get(groups["repo"])
            if repo is None or (repo.private and self._token() != hub.token):
                self._body()
                self._error(404, "Repository not found", "RepoNotFound", head=head)
                return None
            return repo

        def validate_yaml(self, groups, query, head=False) -> None:
            content = json.loads(self._body())["content"]
            match = re.match(r"^---\n(.*?)\n---\n", content, re.S)
            try:
                meta = yaml.safe_load(match.group(1)) if match else {}
            except yaml.YAMLError as exc:
                return self._json(400, {"errors": [{"message": str(exc)}]})
            if not isinstance(meta, dict):
                return self._json(400, {"errors": [{"message": "metadata is not a mapping"}]})
            self._json(200, {"errors": [], "warnings": []})

        def preupload(self, groups, query, head=False) -> None:
            repo = self._repo(groups, write=True)
            if repo is None:
                return
            commit = repo.resolve(groups["rev"])
            files = json.loads(self._body())["files"]
            self._json(
                200,
                {
                    "files": [
                        {
                            "path": f["path"],
                            "uploadMode": "regular",
                            "shouldIgnore": False,
                            "oid": blob_oid(commit.files[f["path"]]) if f["path"] in commit.files else None,
                        }
                        for f in files
                    ],
                    "commitOid": repo.head,
                },
            )

        def commit(self, groups, query, head=False) -> None:
            repo = self._repo(groups, write=True)
            if repo is None:
                return
            if groups["rev"] != "main":
                self._body()
                return self._error(400, "the stand-in commits to main only")
            lines = [json.loads(line) for line in self._body().splitlines() if line.strip()]
            header = lines[0]["value"]
            with hub._lock:
                parent = header.get("parentCommit")
                if parent is not None and parent != repo.head:
                    return self._error(412, "A commit has happened since. Please refresh and try again.")
                files = dict(repo.commits[repo.head].files)
                for item in lines[1:]:
                    value = item["value"]
                    if item["key"] == "file":
                        files[value["path"]] = base64.b64decode(value["content"])
                    elif item["key"] == "deletedFile":
                        if value["path"] not in files:
                            return self._error(404, "A file with this name doesn't exist", "EntryNotFound")
                        del files[value["path"]]
                    elif item["key"] == "deletedFolder":
                        files = {p: d for p, d in files.items() if not p.startswith(value["path"].rstrip("/") + "/")}
                    else:
                        return self._error(400, f"the stand-in does not take {item['key']} operations")
                commit = hub._commit(repo, files, header["summary"])
                for path, data in list(hub.write_behind.items()):
                    hub._commit(repo, {**files, path: data}, "someone else's commit")
                    del hub.write_behind[path]
            self._json(
                200,
                {
                    "commitUrl": f"{hub.url}/datasets/{groups['repo']}/commit/{commit.oid}",
                    "commitOid": commit.oid,
                    "success": True,
                    "hookOutput": "",
                },
            )

        def tree(self, groups, query, head=False) -> None:
            repo = self._repo(groups)
            if repo is None:
                return
            commit = repo.resolve(groups["rev"])
            if commit is None:
                return self._error(404, f"Invalid rev id: {groups['rev']}", "RevisionNotFound")
            prefix = (groups.get("path") or "").strip("/")
            recursive = query.get("recursive", ["false"])[0].lower() == "true"
            entries, folders = [], set()
            for p, data in sorted(commit.files.items()):
                if prefix and not p.startswith(prefix + "/"):
                    continue
                parts = (p[len(prefix) + 1 :] if prefix else p).split("/")
                if len(parts) > 1 and not recursive:
                    folders.add(parts[0])
                    continue
                folders.update("/".join(parts[:i]) for i in range(1, len(parts)))
                entries.append({"type": "file", "oid": blob_oid(data), "size": len(data), "path": p})
            entries += [
                {
                    "type": "directory",
                    "oid": hashlib.sha1(f.encode()).hexdigest(),
                    "size": 0,
                    "path": f"{prefix}/{f}" if prefix else f,
                }
                for f in sorted(folders)
            ]
            self._json(200, entries)

        def resolve(self, groups, query, head=False) -> None:
            repo = self._repo(groups, head=head)
            if repo is None:
                return
            commit = repo.resolve(groups["rev"])
            if commit is None:
                return self._error(404, f"Invalid rev id: {groups['rev']}", "RevisionNotFound", head=head)
            data = commit.files.get(groups["path"])
            if data is None:
                return self._error(404, "Entry not found", "EntryNotFound", head=head)
            etag = blob_oid(data)
            if groups["path"] in hub.changed_byte and data:
                data = bytes([data[0] ^ 0x01]) + data[1:]
            self._send(
                200,
                data,
                content_type="application/octet-stream",
                head=head,
                headers={"X-Repo-Commit": commit.oid, "ETag": f'"{etag}"'},
            )

    return Handler
