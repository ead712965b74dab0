"""The one adapter for git: fetch exactly one pinned commit and read files from it.

Every call runs git through `pipeline._proc.run` with a hermetic environment (no
system or user configuration, no credential prompts, C locale, UTC), so a
developer's `~/.gitconfig` (URL rewrites, hooks, signing) cannot change what is
fetched.

Fetching: `git fetch --depth 1 <url> <revision>` into a bare cache repository.
Protocol-v2 servers (and v0 servers with `uploadpack.allow*SHA1InWant`) hand over
a commit by id; dumb HTTP servers and strict v0 servers do not, so the fallback is a
full fetch of every branch and tag followed by a check that the commit is there.
A commit that is present in neither way was rewritten away upstream (force push,
then garbage collection) or deleted: that is "revision not found". A server that
still holds a force-pushed-away commit may keep serving it by id; its bytes are
then still exactly the pinned ones (commit id, then file sha256), so that is not
an integrity failure.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pipeline import _proc
from pipeline.errors import SourceError, ToolError
from pipeline.formats import SHORT_COMMIT, is_commit


def hermetic_env() -> dict[str, str]:
    """The environment every git command runs in: only PATH survives from the host."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "true",
        "SSH_ASKPASS": "true",
        "LC_ALL": "C",
        "LANG": "C",
        "TZ": "UTC",
    }


def check_revision(revision: str, *, where: str = "revision") -> str:
    """Return the revision if it is a full 40-hex commit id; otherwise say why not.

    A short id is ambiguous and a branch or tag name moves, so neither pins anything.
    """
    if is_commit(revision):
        return revision
    if SHORT_COMMIT.fullmatch(revision):
        raise SourceError(
            f"{where} is a short revision, which is ambiguous",
            expected="a full 40-hex commit id",
            actual=revision,
            hint="pin the full commit id (git rev-parse <short>)",
        )
    raise SourceError(
        f"{where} is a moving ref (branch, tag or symbolic name), not a commit id",
        expected="a full 40-hex commit id",
        actual=revision or "(empty)",
        hint="pin the commit it points to today (git ls-remote <url> <ref>)",
    )


def _git(*args: str | Path, cwd: Path | None = None, check: bool = True):
    return _proc.run([_proc.which("git"), *args], cwd=cwd, env=hermetic_env(), check=check)


@dataclass(frozen=True)
class Fetched:
    """A commit known to be present in a local cache repository."""

    cache: Path
    url: str
    revision: str
    method: str  # "cached", "by-id" or "full"


def ensure_cache(cache: Path) -> Path:
    """Create the bare cache repository if needed and return its path."""
    if not (cache / "objects").is_dir():
        cache.mkdir(parents=True, exist_ok=True)
        _git("init", "--quiet", "--bare", cache)
    return cache


def has_commit(cache: Path, revision: str) -> bool:
    """True when the cache holds the commit object `revision`."""
    proc = _git("-C", cache, "cat-file", "-e", f"{revision}^{{commit}}", check=False)
    return proc.returncode == 0


def fetch_revision(cache: Path, url: str, revision: str) -> Fetched:
    """Make `revision` present in `cache`, fetching from `url` only what it needs.

    Raises SourceError ("revision not found") when the remote does not have the
    commit, and ToolError when the remote cannot be reached at all.
    """
    check_revision(revision)
    ensure_cache(cache)
    if has_commit(cache, revision):
        return Fetched(cache, url, revision, "cached")
    try:
        _git("-C", cache, "fetch", "--quiet", "--no-tags", "--depth", "1", url, revision)
    except ToolError as by_id:
        _full_fetch(cache, url, first_error=by_id)
        method = "full"
    else:
        method = "by-id"
    if not has_commit(cache, revision):
        raise SourceError(
            f"revision not found at {url}: the pinned commit was rewritten away (force push) or deleted upstream",
            expected=f"commit {revision}",
            actual="absent from every branch and tag",
            hint="check the upstream history; pin a revision that exists, or use a mirror that kept it",
        )
    return Fetched(cache, url, revision, method)


def _full_fetch(cache: Path, url: str, *, first_error: ToolError) -> None:
    # The refspec keeps upstream refs in their own namespace so they never look like
    # local branches; "+" lets a force-pushed upstream replace what an earlier fetch saw.
    proc = _git(
        "-C",
        cache,
        "fetch",
        "--quiet",
        "--no-tags",
        url,
        "+refs/heads/*:refs/upstream/heads/*",
        "+refs/tags/*:refs/upstream/tags/*",
        check=False,
    )
    if proc.returncode != 0:
        err = (proc.stderr or b"").decode(errors="replace").strip().splitlines()
        raise ToolError(
            f"cannot fetch from {url}",
            expected="a reachable git repository",
            actual=err[-1] if err else first_error.one_line(),
            hint="check the URL and the network, or pass --mirror DIR with a local copy",
        )


def object_type(cache: Path, revision: str, path: str) -> str | None:
    """The git object type at `revision:path` ("blob", "tree", ...), or None if absent."""
    proc = _git("-C", cache, "cat-file", "-t", f"{revision}:{path}", check=False)
    if proc.returncode != 0:
        return None
    return proc.stdout.decode().strip()


def read_file(cache: Path, revision: str, path: str) -> bytes:
    """The bytes of `path` at `revision`; SourceError if it is missing or not a file."""
    check_revision(revision)
    kind = object_type(cache, revision, path)
    if kind != "blob":
        raise SourceError(
            f"{path} is not a file at revision {revision}",
            expected="a file (blob)",
            actual=kind or "absent",
            hint="check the pinned path; the file may have been moved or deleted in that commit",
        )
    return _git("-C", cache, "cat-file", "blob", f"{revision}:{path}").stdout


def head_commit(repo: Path) -> str:
    """The commit id of HEAD in a working repository."""
    return _git("-C", repo, "rev-parse", "--verify", "HEAD^{commit}").stdout.decode().strip()


def commit_of(repo: Path, revision: str) -> str | None:
    """The commit id `revision` (a commit id, branch, tag, `HEAD~2`...) names in `repo`, or
    None when it names none (or `repo` is not a git repository)."""
    proc = _git(
        "-C", repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{revision}^{{commit}}", check=False
    )
    return proc.stdout.decode().strip() if proc.returncode == 0 else None


def head_tree(repo: Path) -> str:
    """The tree id of HEAD in a working repository."""
    return _git("-C", repo, "rev-parse", "--verify", "HEAD^{tree}").stdout.decode().strip()


def changed_paths(repo: Path) -> list[str]:
    """Paths that differ from HEAD (modified, staged, deleted or untracked, not ignored)."""
    out = _git("-C", repo, "status", "--porcelain=v1", "-z", "--untracked-files=all").stdout
    entries = out.decode(errors="surrogateescape").split("\0")
    paths = []
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if len(entry) < 4:
            continue
        paths.append(entry[3:])
        # A rename or copy is followed by its original path as a separate entry.
        if entry[0] in "RC":
            paths.append(entries[i])
            i += 1
    return paths


@dataclass(frozen=True)
class LoggedCommit:
    """A commit of a history walk: its id, first parent (None for a root) and committer time."""

    commit: str
    parent: str | None
    time: int


def history(repo: Path, paths: tuple[str, ...]) -> list[LoggedCommit]:
    """The commits reachable from HEAD that changed any of `paths`, newest first."""
    out = _git("-C", repo, "log", "--format=%H %ct %P", "HEAD", "--", *paths).stdout.decode()
    commits = []
    for line in out.splitlines():
        commit, time, *parents = line.split()
        commits.append(LoggedCommit(commit, parents[0] if parents else None, int(time)))
    return commits


@dataclass(frozen=True)
class TreeEntry:
    """One file of a commit's tree: its mode, object id and path."""

    mode: str
    oid: str
    path: str


def tree_files(repo: Path, commit: str, paths: tuple[str, ...]) -> list[TreeEntry]:
    """Every file at or under `paths` in `commit` (recursively; links and submodules included)."""
    out = _git("-C", repo, "ls-tree", "-r", "-z", "--full-tree", commit, "--", *paths).stdout
    entries = []
    for record in out.decode(errors="surrogateescape").split("\0"):
        if record:
            meta, path = record.split("\t", 1)
            mode, _kind, oid = meta.split()
            entries.append(TreeEntry(mode, oid, path))
    return entries


def blob(repo: Path, oid: str) -> bytes:
    """The bytes of the blob `oid` of `repo`."""
    return _git("-C", repo, "cat-file", "blob", oid).stdout


def changed_between(repo: Path, old: str, new: str, paths: tuple[str, ...]) -> list[str]:
    """Paths under `paths` whose content or mode differs between commits `old` and `new`."""
    out = _git("-C", repo, "diff", "--name-only", "-z", old, new, "--", *paths).stdout
    return sorted(p for p in out.decode(errors="surrogateescape").split("\0") if p)


def is_shallow(repo: Path) -> bool:
    return _git("-C", repo, "rev-parse", "--is-shallow-repository").stdout.decode().strip() == "true"


def worktree_add(repo: Path, path: Path, commit: str) -> None:
    """A detached worktree of `commit` at `path` (the repository's objects, no copy)."""
    _git("-C", repo, "worktree", "add", "--quiet", "--detach", path, commit)


def worktree_remove(repo: Path, path: Path) -> None:
    _git("-C", repo, "worktree", "remove", "--force", path, check=False)
    _git("-C", repo, "worktree", "prune", check=False)
