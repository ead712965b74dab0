"""Stage 1: vendor the pinned upstream files of a profile, byte for byte.

Each `[[sources]]` entry of release.toml pins a git repository, a full commit id, a
file path, its sha256 and size, and a licence file. `vendor` fetches only that commit
(over HTTPS, from a `file://` URL, or from a local mirror directory), checks the
bytes against the pins, and writes

    <out>/<source-name>/<basename of path>
    <out>/<source-name>/<basename of license_file>

atomically and read-only. It never modifies what is there: verified bytes already in
place mean nothing to do (no network needed); different bytes are an error.

Mirror layout (`--mirror DIR`): one git repository per upstream, bare or not, at the
upstream URL's host and path, with or without `.git`:

    DIR/github.com/ruvnet/metaharness.git     (bare, e.g. `git clone --mirror`)
    DIR/github.com/ruvnet/metaharness         (bare or a working clone)

Git objects are cached in bare repositories under `.release/git/<host>/<path>.git`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from pipeline import config as config_mod
from pipeline._io import sha256_bytes, write_atomic
from pipeline.errors import ConfigError, DigestMismatch, SourceError
from pipeline.progress import say
from pipeline.sources import git

DEFAULT_OUT = config_mod.REPO_ROOT / "vendor"
DEFAULT_CACHE = config_mod.REPO_ROOT / ".release" / "git"
READ_ONLY = 0o444


@dataclass(frozen=True)
class VendoredFile:
    """One verified upstream file and its licence, as written under the vendor directory.

    `vendor_path` and `license_path` are relative to the vendor directory
    ("<source>/<basename>"), the same relative paths the image uses under its own
    vendor directory.
    """

    source: str
    repository: str
    revision: str
    path: str
    sha256: str
    size: int
    license: str
    license_file: str
    license_sha256: str
    vendor_path: str
    license_path: str


def vendor_paths(source: config_mod.Source) -> tuple[str, str]:
    """Where a source's file and licence land, relative to the vendor directory."""
    return (f"{source.name}/{Path(source.path).name}", f"{source.name}/{Path(source.license_file).name}")


def repository_key(url: str) -> str | None:
    """ "host/path" of a network URL (the mirror and cache layout), None for local ones."""
    parsed = urlparse(url)
    if parsed.scheme in ("", "file") or not parsed.hostname:
        return None
    path = parsed.path.strip("/")
    if path.endswith(".git"):
        path = path[: -len(".git")]
    return f"{parsed.hostname}/{path}"


def mirror_url(mirror: Path, repository: str) -> str:
    """The `file://` URL of the mirror copy of `repository`; SourceError if there is none."""
    key = repository_key(repository)
    if key is None:
        return repository
    candidates = [mirror / f"{key}.git", mirror / key]
    for candidate in candidates:
        if (candidate / "objects").is_dir() or (candidate / ".git").exists():
            return candidate.resolve().as_uri()
    raise SourceError(
        f"no mirror of {repository} in {mirror}",
        expected=" or ".join(str(c) for c in candidates),
        actual="neither exists",
        hint="clone it there (git clone --mirror <url> <path>.git) or drop --mirror",
    )


def cache_path(cache_root: Path, repository: str) -> Path:
    """The bare cache repository for an upstream (shared by its mirrors: commit ids are global)."""
    key = repository_key(repository)
    if key is None:
        key = "local/" + hashlib.sha256(repository.encode()).hexdigest()[:16]
    return cache_root / f"{key}.git"


def _verify_file(source: config_mod.Source, data: bytes, where: str) -> str:
    digest = sha256_bytes(data)
    if digest != source.sha256:
        raise DigestMismatch(
            f"hash mismatch for source {source.name}: {source.path} {where}",
            expected=f"sha256 {source.sha256} ({source.size} bytes)",
            actual=f"sha256 {digest} ({len(data)} bytes)",
            hint="the bytes differ from the pin in release.toml; review the upstream change before changing the pin",
        )
    if len(data) != source.size:
        raise DigestMismatch(
            f"size mismatch for source {source.name}: {source.path} {where}",
            expected=f"{source.size} bytes",
            actual=f"{len(data)} bytes",
            hint="the sha256 matches, so the size pin in release.toml is wrong",
        )
    return digest


def _verify_license(source: config_mod.Source, data: bytes, where: str) -> str:
    digest = sha256_bytes(data)
    if source.license_sha256 and digest != source.license_sha256:
        raise DigestMismatch(
            f"licence hash mismatch for source {source.name}: {source.license_file} {where}",
            expected=f"sha256 {source.license_sha256}",
            actual=f"sha256 {digest}",
            hint="the licence differs from its pin in release.toml; review it",
        )
    return digest


def _record(source: config_mod.Source, digest: str, size: int, license_digest: str) -> VendoredFile:
    file_rel, license_rel = vendor_paths(source)
    return VendoredFile(
        source=source.name,
        repository=source.repository,
        revision=source.revision,
        path=source.path,
        sha256=digest,
        size=size,
        license=source.license,
        license_file=source.license_file,
        license_sha256=license_digest,
        vendor_path=file_rel,
        license_path=license_rel,
    )


def check_vendored(source: config_mod.Source, out_dir: Path, *, license_sha256: str | None = None) -> VendoredFile:
    """Verify an already vendored source from the vendor directory alone (no git, no network).

    The licence is checked against `license_sha256` when given (e.g. from
    provenance.json), else against the pin in release.toml when there is one.
    """
    file_rel, license_rel = vendor_paths(source)
    target, license_target = out_dir / file_rel, out_dir / license_rel
    for path, what in ((target, "vendored file"), (license_target, "vendored licence")):
        if not path.is_file():
            raise SourceError(
                f"{what} of source {source.name} is missing",
                expected=str(path),
                actual="absent",
                hint="run `python -m pipeline vendor`",
            )
    where = f"in {target} (modified after vendoring?)"
    data = target.read_bytes()
    digest = _verify_file(source, data, where)
    license_digest = sha256_bytes(license_target.read_bytes())
    expected_license = license_sha256 or source.license_sha256
    if expected_license and license_digest != expected_license:
        raise DigestMismatch(
            f"vendored licence of source {source.name} was modified: {license_target}",
            expected=f"sha256 {expected_license}",
            actual=f"sha256 {license_digest}",
            hint=f"delete {target.parent} and run `python -m pipeline vendor` again",
        )
    return _record(source, digest, len(data), license_digest)


def _read_pinned(cache: Path, source: config_mod.Source, path: str, what: str) -> bytes:
    kind = git.object_type(cache, source.revision, path)
    if kind != "blob":
        raise SourceError(
            f"{what} of source {source.name} is missing at revision {source.revision}",
            expected=f"file {path}",
            actual=f"{kind}" if kind else "absent",
            hint="check the pinned path in release.toml against the upstream commit",
        )
    return git.read_file(cache, source.revision, path)


def _place(target: Path, data: bytes, source: config_mod.Source) -> None:
    if target.exists():
        current = target.read_bytes()
        if current == data:
            return
        raise DigestMismatch(
            f"vendor file {target} of source {source.name} differs from the pinned upstream bytes",
            expected=f"sha256 {sha256_bytes(data)}",
            actual=f"sha256 {sha256_bytes(current)}",
            hint=f"vendored files are never overwritten: delete {target.parent} and vendor again",
        )
    write_atomic(target, data, mode=READ_ONLY)


def vendor_source(
    source: config_mod.Source, out_dir: Path, *, mirror: Path | None = None, cache_root: Path = DEFAULT_CACHE
) -> VendoredFile:
    """Fetch, verify and write one pinned source; return its record.

    Nothing is fetched when the vendor directory already holds the verified file and
    a licence that matches its pin.
    """
    git.check_revision(source.revision, where=f"sources.{source.name}.revision")
    file_rel, license_rel = vendor_paths(source)
    target, license_target = out_dir / file_rel, out_dir / license_rel
    if target.exists():
        _verify_file(source, target.read_bytes(), f"in {target} (modified after vendoring?)")
        if license_target.exists() and source.license_sha256:
            return check_vendored(source, out_dir)
    url = mirror_url(mirror, source.repository) if mirror is not None else source.repository
    fetched = git.fetch_revision(cache_path(cache_root, source.repository), url, source.revision)
    data = _read_pinned(fetched.cache, source, source.path, "file")
    digest = _verify_file(source, data, f"at revision {source.revision}")
    license_data = _read_pinned(fetched.cache, source, source.license_file, "licence")
    license_digest = _verify_license(source, license_data, f"at revision {source.revision}")
    _place(target, data, source)
    _place(license_target, license_data, source)
    return _record(source, digest, len(data), license_digest)


def vendor(
    sources: Sequence[config_mod.Source],
    out_dir: Path = DEFAULT_OUT,
    *,
    mirror: Path | None = None,
    cache_root: Path = DEFAULT_CACHE,
) -> tuple[VendoredFile, ...]:
    """Vendor each of `sources` (a release plan's), in order."""
    if mirror is not None and not mirror.is_dir():
        raise ConfigError("--mirror is not a directory", expected="an existing directory", actual=str(mirror))
    records = []
    for source in sources:
        say(f"vendor {source.name}: {source.repository} @ {source.revision}")
        record = vendor_source(source, out_dir, mirror=mirror, cache_root=cache_root)
        say(
            f"  {record.vendor_path}: sha256 {record.sha256}, {record.size} bytes; "
            f"licence {record.license} sha256 {record.license_sha256}"
        )
        records.append(record)
    return tuple(records)
