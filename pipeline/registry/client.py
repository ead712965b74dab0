"""A client for the OCI distribution API, on `requests`.

Manifests are returned as the exact bytes the registry sent (their sha256 is the
image identity) and checked against the digest they were fetched by. Blobs are
streamed to disk and checked (sha256 and size) before they are kept. Auth follows
the registry's challenge: the anonymous bearer-token flow (ghcr.io's: 401 +
`WWW-Authenticate: Bearer realm=...,service=...,scope=...` -> token -> retry), or
basic auth with push credentials from the environment. Plain http only for loopback
registries. 5xx answers and dropped connections are retried with exponential backoff
a bounded number of times; an unreachable registry is one RegistryError line. A registry
that does not answer is waited for at most `wait` seconds a request (default 120,
`RELEASE_REGISTRY_WAIT_S`), with a progress line every 30 s (a quarter of a shorter wait);
an error page (nginx's 502)
is summarised by its title, never pasted. A full disk while a blob is written is one
NoSpace line (the path, the blob's size, the fix).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit, urlunsplit

import requests

from pipeline._io import CHUNK
from pipeline.errors import ConfigError, DigestMismatch, NoSpace, RegistryError, is_no_space
from pipeline.image.oci import digest as _digest
from pipeline.image.oci.image import INDEX_TYPES, MANIFEST_TYPES
from pipeline.progress import Progress, say

log = logging.getLogger("pipeline.registry.client")

MANIFEST_ACCEPT = ", ".join(MANIFEST_TYPES + INDEX_TYPES)
MAX_MANIFEST_BYTES = 4 << 20
LOOPBACK = {"localhost", "127.0.0.1", "::1", "[::1]"}
RETRY_STATUS = {500, 502, 503, 504}
WAIT_ENV = "RELEASE_REGISTRY_WAIT_S"
DEFAULT_WAIT_S = 120.0
PROGRESS_S = 30.0


def default_wait() -> float:
    """How long one request waits for a registry that does not answer: RELEASE_REGISTRY_WAIT_S, else 120 s."""
    raw = os.environ.get(WAIT_ENV, "")
    try:
        value = float(raw) if raw else DEFAULT_WAIT_S
    except ValueError:
        raise ConfigError(f"{WAIT_ENV} is not a number of seconds", expected="e.g. 120", actual=raw) from None
    if value <= 0:
        raise ConfigError(f"{WAIT_ENV} must be positive", expected="> 0", actual=raw)
    return value


def summarise_body(text: str) -> str:
    """An error body in a few words: an HTML page by its title (or first heading), never pasted."""
    text = text.strip()
    if text[:1] == "<" or "<html" in text[:200].lower():
        m = re.search(r"<title[^>]*>(.*?)</title>", text, re.I | re.S) or re.search(
            r"<h1[^>]*>(.*?)</h1>", text, re.I | re.S
        )
        title = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", m.group(1))).strip() if m else ""
        return f"an HTML page{': ' + title[:80] if title else ''}"
    return re.sub(r"\s+", " ", text)[:120]


# What clears a corrupt blob: the registry's copy is pushed again. The local registry's own
# storage is checked blob by blob when it is started and when a release begins.
CORRUPT_HINT = (
    "the registry's copy is corrupt: push it again; for the local registry, run the release "
    "again, which removes corrupt blobs from its storage (.release/registry/storage) and pushes "
    "them again"
)


class RegistryUnavailable(RegistryError):
    """The registry could not be reached, or kept answering 5xx: worth a later retry."""


@dataclass(frozen=True)
class Credentials:
    user: str
    password: str

    @classmethod
    def from_env(cls, registry: str = "") -> Credentials | None:
        """RELEASE_REGISTRY_USER/PASSWORD; for ghcr.io a GITHUB_TOKEN also works."""
        user = os.environ.get("RELEASE_REGISTRY_USER")
        password = os.environ.get("RELEASE_REGISTRY_PASSWORD")
        if password:
            return cls(user or "token", password)
        if registry == "ghcr.io" and os.environ.get("GITHUB_TOKEN"):
            return cls(user or os.environ.get("GITHUB_ACTOR", "token"), os.environ["GITHUB_TOKEN"])
        return None


@dataclass(frozen=True)
class FetchedManifest:
    """A manifest exactly as the registry sent it."""

    raw: bytes
    media_type: str
    digest: str


def _challenge(header: str) -> tuple[str, dict[str, str]]:
    scheme, _, params = header.strip().partition(" ")
    return scheme.lower(), {k.lower(): v for k, v in re.findall(r'(\w+)="([^"]*)"', params)}


def is_loopback(registry: str) -> bool:
    host = registry.rsplit(":", 1)[0] if not registry.endswith("]") else registry
    return host in LOOPBACK


def _constant(data: bytes) -> Callable[[], bytes]:
    """A request body of `data`, the same bytes each time it is asked (a retry sends it again)."""
    return lambda: data


class RegistryClient:
    """One registry host. `credentials` are only needed to write (or for private reads)."""

    def __init__(
        self,
        registry: str,
        *,
        credentials: Credentials | None = None,
        attempts: int = 5,
        backoff: float = 0.25,
        timeout: float = 60.0,
        chunk_size: int = 64 << 20,
        wait: float | None = None,
        progress_s: float | None = None,
    ) -> None:
        self.registry = registry
        self.scheme = "http" if is_loopback(registry) else "https"
        self.base = f"{self.scheme}://{registry}"
        self.credentials = credentials
        self.attempts, self.backoff, self.timeout = max(1, attempts), backoff, timeout
        self.chunk_size = chunk_size
        self.wait = default_wait() if wait is None else wait
        # A progress line every 30 s, more often when the whole wait is shorter than two minutes.
        self.progress_s = progress_s if progress_s is not None else min(PROGRESS_S, self.wait / 4)
        self.session = requests.Session()
        # An anonymous client sends nothing the environment holds: requests would otherwise
        # add ~/.netrc credentials (and honour proxy and CA settings from the environment).
        self.session.trust_env = credentials is not None
        self.session.headers["User-Agent"] = "openenv-arena-release"
        self._tokens: dict[str, str] = {}
        self._basic = False
        self.requests_sent = 0

    # ------------------------------------------------------------ transport

    def _auth_headers(self, scope: str) -> dict[str, str]:
        if scope in self._tokens:
            return {"Authorization": f"Bearer {self._tokens[scope]}"}
        return {}

    def _authenticate(self, resp: requests.Response, scope: str) -> bool:
        """Answer a 401 challenge; False when there is nothing more to try."""
        scheme, params = _challenge(resp.headers.get("WWW-Authenticate", ""))
        # A cached token may have expired: fetch a fresh one (the caller bounds the rounds).
        if scheme == "bearer" and "realm" in params:
            query = {"service": params.get("service", "")}
            query["scope"] = params.get("scope") or scope
            auth = (self.credentials.user, self.credentials.password) if self.credentials else None
            try:
                tok = self.session.get(params["realm"], params=query, auth=auth, timeout=self.timeout)
            except requests.RequestException as exc:
                raise RegistryError(
                    f"token service {params['realm']} of {self.registry} unreachable: {type(exc).__name__}",
                    hint="check the network or the registry address",
                ) from None
            if tok.status_code != 200:
                raise RegistryError(
                    f"token service of {self.registry} refused scope {query['scope']}",
                    expected="HTTP 200",
                    actual=f"HTTP {tok.status_code}",
                    hint="the repository may be private or the credentials wrong",
                )
            body = tok.json()
            token = body.get("token") or body.get("access_token")
            if not token:
                raise RegistryError(f"token service of {self.registry} returned no token")
            self._tokens[scope] = token
            return True
        if scheme == "basic" and self.credentials is not None and not self._basic:
            self._basic = True
            self.session.auth = (self.credentials.user, self.credentials.password)
            return True
        return False

    def _request(
        self,
        method: str,
        url: str,
        *,
        scope: str,
        data: Callable[[], bytes | IO[bytes] | Iterator[bytes]] | None = None,
        headers: dict[str, str] | None = None,
        stream: bool = False,
        ok: tuple[int, ...] = (200,),
        retry: bool = True,
    ) -> requests.Response:
        """Send one request with auth and bounded retries; RegistryError if not `ok`."""
        url = url if url.startswith("http") else urljoin(self.base, url)
        attempts = self.attempts if retry else 1
        auth_rounds = 0
        attempt = 0
        started = said = time.monotonic()
        while True:
            attempt += 1
            hdrs = {**(headers or {}), **self._auth_headers(scope)}
            body = data() if data else None
            # No answer: each attempt waits at most until the next progress line, and all of
            # them together at most `wait` (a write may take the whole per-request timeout).
            left = max(0.5, self.wait - (time.monotonic() - started))
            read = min(self.timeout, left) if data else min(self.timeout, self.progress_s, left)
            try:
                self.requests_sent += 1
                resp = self.session.request(
                    method,
                    url,
                    data=body,
                    headers=hdrs,
                    stream=stream,
                    timeout=(min(10.0, read), read),
                    allow_redirects=True,
                )
            except (requests.ConnectionError, requests.Timeout) as exc:
                waited = time.monotonic() - started
                path = urlsplit(url).path
                if waited >= self.wait - 0.1 and isinstance(exc, requests.Timeout):
                    raise RegistryUnavailable(
                        f"registry {self.registry} did not answer {method} {path} within {self.wait:.0f} s",
                        hint=f"check that it runs (local: `python -m pipeline registry status`); a registry "
                        f"that is only slow: set {WAIT_ENV} to wait longer",
                    ) from None
                if attempt >= attempts and not isinstance(exc, requests.Timeout) or waited >= self.wait:
                    raise RegistryUnavailable(
                        f"cannot reach registry {self.registry} ({method} {path}: {type(exc).__name__})",
                        hint="check that it is running and the address is right "
                        "(local: `python -m pipeline registry start`)",
                    ) from None
                if time.monotonic() - said >= self.progress_s - 0.1:
                    said = time.monotonic()
                    say(
                        f"    waiting for {self.registry}, {waited:.0f} s... ({method} {path}: "
                        f"{type(exc).__name__}; giving up after {self.wait:.0f} s)"
                    )
                self._sleep(attempt, f"{type(exc).__name__}")
                continue
            finally:
                if body is not None and hasattr(body, "close"):
                    body.close()
            if resp.status_code == 401 and auth_rounds < 2 and self._authenticate(resp, scope):
                auth_rounds += 1
                attempt -= 1
                resp.close()
                continue
            if resp.status_code in RETRY_STATUS and attempt < attempts:
                resp.close()
                self._sleep(attempt, f"HTTP {resp.status_code}")
                continue
            if resp.status_code not in ok:
                raise self._error(method, url, resp, ok)
            return resp

    def _sleep(self, attempt: int, why: str) -> None:
        delay = self.backoff * (2 ** (attempt - 1))
        log.warning("%s: %s, retrying in %.2f s", self.registry, why, delay)
        time.sleep(delay)

    def _error(self, method: str, url: str, resp: requests.Response, ok: tuple[int, ...]) -> RegistryError:
        path = urlsplit(url).path
        detail = ""
        try:
            errors = resp.json().get("errors") or []
            detail = "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors)[:200]
        except (ValueError, AttributeError):
            detail = summarise_body(resp.text)
        hint = None
        if resp.status_code == 401:
            hint = (
                "set RELEASE_REGISTRY_USER/RELEASE_REGISTRY_PASSWORD to push"
                if self.credentials is None
                else "the credentials were refused"
            )
        elif resp.status_code == 404:
            hint = "check the repository name and digest"
        resp.close()
        cls = RegistryUnavailable if resp.status_code in RETRY_STATUS else RegistryError
        return cls(
            f"{self.registry} answered {method} {path} with HTTP {resp.status_code}"
            + (f" ({detail})" if detail else ""),
            expected="HTTP " + "/".join(map(str, ok)),
            actual=f"HTTP {resp.status_code}",
            hint=hint,
        )

    @staticmethod
    def _scope(repository: str, push: bool = False) -> str:
        return f"repository:{repository}:{'pull,push' if push else 'pull'}"

    # ------------------------------------------------------------ manifests

    def get_manifest(self, repository: str, ref: str) -> FetchedManifest:
        """The manifest (or index) `ref` (tag or digest) as exact bytes, digest-checked."""
        resp = self._request(
            "GET",
            f"/v2/{repository}/manifests/{ref}",
            scope=self._scope(repository),
            headers={"Accept": MANIFEST_ACCEPT},
            stream=True,
        )
        with resp:
            raw = resp.raw.read(MAX_MANIFEST_BYTES + 1, decode_content=True)
        if len(raw) > MAX_MANIFEST_BYTES:
            raise RegistryError(f"manifest {repository}@{ref} is larger than {MAX_MANIFEST_BYTES} bytes")
        actual = _digest.of_bytes(raw)
        expected = ref if _digest.is_digest(ref) else resp.headers.get("Docker-Content-Digest")
        if expected and expected != actual:
            raise DigestMismatch(
                f"manifest {self.registry}/{repository}@{ref} does not match its digest",
                expected=expected,
                actual=actual,
                hint="the registry served other bytes; do not use this image",
            )
        media_type = resp.headers.get("Content-Type", "").split(";")[0].strip()
        return FetchedManifest(raw, media_type, actual)

    def head_manifest(self, repository: str, ref: str) -> str | None:
        """The digest `ref` resolves to, or None when the registry does not have it."""
        resp = self._request(
            "HEAD",
            f"/v2/{repository}/manifests/{ref}",
            scope=self._scope(repository),
            headers={"Accept": MANIFEST_ACCEPT},
            ok=(200, 404),
        )
        if resp.status_code == 404:
            return None
        return resp.headers.get("Docker-Content-Digest") or (ref if _digest.is_digest(ref) else None)

    def put_manifest(self, repository: str, ref: str, raw: bytes, media_type: str) -> str:
        """Upload manifest bytes under `ref` (a tag or their own digest); return the digest."""
        return self._put_manifest(repository, ref, raw, media_type)[0]

    def put_referrer(self, repository: str, raw: bytes, media_type: str) -> bool:
        """Upload a manifest that has a `subject`, by its digest; True when the registry says
        it indexed it for the referrers API (the `OCI-Subject` header of OCI distribution 1.1),
        False when the client must keep the referrers tag itself."""
        _, headers = self._put_manifest(repository, _digest.of_bytes(raw), raw, media_type)
        return bool(headers.get("OCI-Subject"))

    def get_referrers(self, repository: str, digest: str) -> FetchedManifest | None:
        """The referrers API's index of the manifests whose subject is `digest`; None when the
        registry has no referrers API (HTTP 404: then the referrers tag schema applies)."""
        resp = self._request(
            "GET",
            f"/v2/{repository}/referrers/{digest}",
            scope=self._scope(repository),
            headers={"Accept": INDEX_TYPES[0]},
            ok=(200, 404),
            stream=True,
        )
        with resp:
            if resp.status_code == 404:
                return None
            raw = resp.raw.read(MAX_MANIFEST_BYTES + 1, decode_content=True)
        if len(raw) > MAX_MANIFEST_BYTES:
            raise RegistryError(f"referrers index of {repository}@{digest} is larger than {MAX_MANIFEST_BYTES} bytes")
        media_type = resp.headers.get("Content-Type", "").split(";")[0].strip()
        return FetchedManifest(raw, media_type, _digest.of_bytes(raw))

    def _put_manifest(self, repository: str, ref: str, raw: bytes, media_type: str) -> tuple[str, Mapping[str, str]]:
        dig = _digest.of_bytes(raw)
        if _digest.is_digest(ref) and ref != dig:
            raise DigestMismatch(f"manifest pushed as {ref} hashes differently", expected=ref, actual=dig)
        resp = self._request(
            "PUT",
            f"/v2/{repository}/manifests/{ref}",
            scope=self._scope(repository, push=True),
            data=lambda: raw,
            headers={"Content-Type": media_type},
            ok=(201, 200),
        )
        answered = resp.headers.get("Docker-Content-Digest")
        if answered and answered != dig:
            raise DigestMismatch(
                f"registry stored manifest {repository}:{ref} under another digest", expected=dig, actual=answered
            )
        return dig, resp.headers

    def list_tags(self, repository: str) -> list[str]:
        """Tags of `repository` (empty when the repository does not exist)."""
        resp = self._request("GET", f"/v2/{repository}/tags/list", scope=self._scope(repository), ok=(200, 404))
        return [] if resp.status_code == 404 else list(resp.json().get("tags") or [])

    # ------------------------------------------------------------ blobs

    def has_blob(self, repository: str, digest: str) -> bool:
        """HEAD the blob: True when the registry already holds it."""
        resp = self._request("HEAD", f"/v2/{repository}/blobs/{digest}", scope=self._scope(repository), ok=(200, 404))
        return resp.status_code == 200

    def get_blob_bytes(self, repository: str, digest: str, *, max_size: int = 16 << 20) -> bytes:
        """A small blob (a config), digest-checked."""
        resp = self._request("GET", f"/v2/{repository}/blobs/{digest}", scope=self._scope(repository), stream=True)
        with resp:
            data = resp.raw.read(max_size + 1, decode_content=False)
        if len(data) > max_size:
            raise RegistryError(f"blob {digest} is larger than {max_size} bytes")
        actual = _digest.of_bytes(data)
        if actual != digest:
            raise DigestMismatch(
                f"blob {digest} from {self.registry}/{repository} does not match its digest",
                expected=digest,
                actual=actual,
                hint=CORRUPT_HINT,
            )
        return data

    def get_blob(
        self, repository: str, digest: str, dest: Path, *, size: int | None = None, progress: Progress | None = None
    ) -> int:
        """Stream blob `digest` into `dest` (checked: sha256 and size); return its size.

        A dropped connection restarts the download (bounded); nothing is left at `dest`
        unless the bytes verify.
        """
        dest = Path(dest)
        # A temporary name of its own: another process (or thread) may be fetching the
        # same blob into a shared cache at the same time.
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}-{threading.get_ident()}.part")
        for attempt in range(1, self.attempts + 1):
            h, count = hashlib.sha256(), 0
            try:
                resp = self._request(
                    "GET", f"/v2/{repository}/blobs/{digest}", scope=self._scope(repository), stream=True
                )
                with resp, open(tmp, "wb") as out:
                    for chunk in resp.iter_content(CHUNK):
                        h.update(chunk)
                        out.write(chunk)
                        count += len(chunk)
                        if progress:
                            progress.advance(len(chunk))
                break
            except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError) as exc:
                if progress:
                    progress.advance(-count)
                if attempt >= self.attempts:
                    tmp.unlink(missing_ok=True)
                    raise RegistryError(
                        f"download of blob {digest} from {self.registry} kept failing ({type(exc).__name__})",
                        hint="retry later",
                    ) from None
                self._sleep(attempt, type(exc).__name__)
            except OSError as exc:
                if not is_no_space(exc):
                    raise
                tmp.unlink(missing_ok=True)
                raise NoSpace.at(
                    dest.parent,
                    need=size,
                    what=f"writing blob {digest} from {self.registry}",
                    fix="free space there (old images: `podman image prune`; caches under "
                    ".release/cache), then run again",
                ) from None
        actual = "sha256:" + h.hexdigest()
        if (size is not None and count != size) or actual != digest:
            tmp.unlink(missing_ok=True)
            raise DigestMismatch(
                f"blob {digest} from {self.registry}/{repository} does not match its descriptor",
                expected=f"{digest} ({size if size is not None else '?'} bytes)",
                actual=f"{actual} ({count} bytes)",
                hint=CORRUPT_HINT,
            )
        os.replace(tmp, dest)
        return count

    def mount_blob(self, repository: str, digest: str, from_repository: str) -> bool:
        """Cross-repository mount; True if the registry mounted it (no upload needed)."""
        resp = self._request(
            "POST",
            f"/v2/{repository}/blobs/uploads/?" + urlencode({"mount": digest, "from": from_repository}),
            scope=self._scope(repository, push=True),
            ok=(201, 202),
        )
        if resp.status_code == 202:
            self._cancel(resp, repository)
        return resp.status_code == 201

    def _cancel(self, resp: requests.Response, repository: str) -> None:
        location = resp.headers.get("Location")
        if location:
            self._request("DELETE", location, scope=self._scope(repository, push=True), ok=(204, 200, 404), retry=False)

    def upload_blob(
        self, repository: str, digest: str, source: Path | bytes, *, progress: Progress | None = None
    ) -> int:
        """Upload a blob (monolithic if small, else chunked); return the bytes sent.

        A failure mid-upload restarts the session from scratch (bounded); the caller
        checks `has_blob` first so existing blobs are never re-sent.
        """
        size = len(source) if isinstance(source, bytes) else Path(source).stat().st_size
        scope = self._scope(repository, push=True)
        last: Exception | None = None
        for attempt in range(1, self.attempts + 1):
            before = progress.done if progress else 0
            try:
                if attempt > 1 and self.has_blob(repository, digest):
                    # The previous attempt completed but its answer was lost.
                    return 0
                resp = self._request("POST", f"/v2/{repository}/blobs/uploads/", scope=scope, ok=(202,))
                location = resp.headers["Location"]
                if size <= self.chunk_size:
                    self._put_whole(location, repository, digest, source, size, progress)
                else:
                    self._put_chunked(location, repository, digest, source, size, progress)
                return size
            except RegistryUnavailable as exc:
                last = exc
            if progress:
                progress.done = before
            if attempt < self.attempts:
                self._sleep(attempt, f"upload of {digest}: {type(last).__name__}")
        raise RegistryUnavailable(
            f"upload of blob {digest} to {self.registry}/{repository} kept failing: {last}",
            hint="check that the registry is running, then re-run: blobs already uploaded are not sent again",
        )

    def _with_digest(self, location: str, digest: str) -> str:
        parts = urlsplit(urljoin(self.base, location))
        query = parse_qsl(parts.query, keep_blank_values=True) + [("digest", digest)]
        return urlunsplit(parts._replace(query=urlencode(query)))

    def _put_whole(
        self, location: str, repository: str, digest: str, source: Path | bytes, size: int, progress: Progress | None
    ) -> None:
        def body() -> bytes | IO[bytes]:
            return source if isinstance(source, bytes) else open(source, "rb")

        self._request(
            "PUT",
            self._with_digest(location, digest),
            scope=self._scope(repository, push=True),
            data=body,
            retry=False,
            headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)},
            ok=(201,),
        )
        if progress:
            progress.advance(size)

    def _put_chunked(
        self, location: str, repository: str, digest: str, source: Path | bytes, size: int, progress: Progress | None
    ) -> None:
        scope = self._scope(repository, push=True)
        with open(source, "rb") if isinstance(source, Path) else _BytesReader(source) as f:
            offset = 0
            while offset < size:
                chunk = f.read(self.chunk_size)
                end = offset + len(chunk) - 1
                resp = self._request(
                    "PATCH",
                    location,
                    scope=scope,
                    data=_constant(chunk),
                    retry=False,
                    ok=(202,),
                    headers={
                        "Content-Type": "application/octet-stream",
                        "Content-Range": f"{offset}-{end}",
                        "Content-Length": str(len(chunk)),
                    },
                )
                location = resp.headers["Location"]
                offset += len(chunk)
                if progress:
                    progress.advance(len(chunk))
        self._request(
            "PUT",
            self._with_digest(location, digest),
            scope=scope,
            retry=False,
            headers={"Content-Length": "0"},
            ok=(201,),
        )


class _BytesReader:
    """`open()`-like context for in-memory sources of a chunked upload."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def __enter__(self) -> _BytesReader:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def read(self, n: int) -> bytes:
        out = self.data[self.pos : self.pos + n]
        self.pos += len(out)
        return out
