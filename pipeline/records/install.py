"""The one commit point of a release's records.

A release stages its whole set of records (provenance.json, submission.json,
attestations/ and the dataset folder dist/dataset/) in `.release/staging/<id>/`, laid out
as the checkout lays them out, with hard links of the checkout's other files beside them
(`audit_view`): the self-audit reads that staged set, never the committed one. Only once
every stage passed, the self-audit included, `commit` switches the set in:

1. the journal `.release/install.json` is written (and synced): the staging directory,
   and each path with the sha256 of its new content (a tree digest for a directory);
2. each path is exchanged with its staged copy in one `renameat2(RENAME_EXCHANGE)` (a
   path the checkout lacks, or a file system without the call: a plain rename), so a path
   is never missing;
3. the journal is removed, then the staging directory, which now holds the old set.

A kill at any instant leaves either no journal (the old set in place, whole) or a journal
whose new set is complete in the staging directory or in place: `recover`, which the next
release runs first, rolls it forward path by path (each path's digest says which side it is
on) and says so in one line. Staging directories of runs that are gone, and the
`<id>.old-*` directories an older release's two-step install left, are removed (an
`old-*` copy is first moved back when its path is missing).
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path

from pipeline import _proc, runs
from pipeline._io import write_atomic
from pipeline.errors import ReleaseError
from pipeline.progress import say

# The records and the dataset folder: each a path relative to the checkout.
PATHS = ("provenance.json", "submission.json", "attestations", "dist/dataset")
JOURNAL = Path(".release") / "install.json"
STAGING = Path(".release") / "staging"
OWNER_FILE = ".owner.json"
RENAME_EXCHANGE = 2
AT_FDCWD = -100
# What the view leaves out: the checkout's own state and the paths it stages.
_NOT_IN_VIEW = {".git", ".release", ".nox", "dist", *PATHS}


class InstallError(ReleaseError):
    """The records could not be switched in, or an interrupted switch not completed."""


def new_staging(repo: Path) -> Path:
    """A fresh staging directory, marked with this run as its owner."""
    staging = Path(repo) / STAGING / uuid.uuid4().hex[:12]
    staging.mkdir(parents=True)
    write_atomic(staging / OWNER_FILE, json.dumps(runs.current().to_json()).encode())
    return staging


def digest(path: Path) -> str | None:
    """sha256 over a file's bytes, or over a tree's sorted relative paths and file bytes; None if absent."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return None
    h = hashlib.sha256()
    if path.is_file() and not path.is_symlink():
        h.update(b"F\0" + path.read_bytes())
        return h.hexdigest()
    h.update(b"D\0")
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames.sort()
        for name in sorted(filenames):
            f = Path(dirpath) / name
            rel = f.relative_to(path).as_posix().encode()
            h.update(len(rel).to_bytes(8, "big") + rel)
            data = f.read_bytes()
            h.update(len(data).to_bytes(8, "big") + data)
    return h.hexdigest()


_libc = None


def _exchange(a: Path, b: Path) -> bool:
    """Swap `a` and `b` in one step; False when the file system or kernel lacks the call."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    fn = getattr(_libc, "renameat2", None)
    if fn is None:
        return False
    if fn(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def _switch(staged: Path, target: Path) -> None:
    """Put `staged` at `target`; the previous `target` ends at `staged`."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists() or target.is_symlink():
        if _exchange(staged, target):
            return
        aside = staged.with_name(staged.name + ".old")
        os.replace(target, aside)
        os.replace(staged, target)
        os.replace(aside, staged)
        return
    os.replace(staged, target)


def _sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def audit_view(repo: Path, staging: Path) -> Path:
    """Lay the checkout's other files beside the staged records in `staging` (hard links;
    `.git` linked), so the audit reads the staged set as the checkout will hold it."""
    repo, staging = Path(repo), Path(staging)
    for entry in sorted(repo.iterdir()):
        if entry.name in _NOT_IN_VIEW:
            continue
        _link_copy(entry, staging / entry.name)
    git = repo / ".git"
    if git.is_dir():
        (staging / ".git").symlink_to(git.resolve())
    elif git.is_file():
        shutil.copy2(git, staging / ".git")
    (staging / "dist").mkdir(exist_ok=True)
    if (repo / "dist").is_dir():
        for entry in sorted((repo / "dist").iterdir()):
            if entry.name != "dataset" and not entry.name.startswith("."):
                _link_copy(entry, staging / "dist" / entry.name)
    return staging


def _link_copy(src: Path, dest: Path) -> None:
    """Hard links of `src` at `dest` (links kept as links); a copy where the file system
    does not allow them (another mount)."""
    if not (src.is_dir() or src.is_file() or src.is_symlink()):
        return  # a socket or a pipe: nothing the audit reads
    if _proc.run(["cp", "-a", "--link", str(src), str(dest)], check=False).returncode != 0:
        shutil.rmtree(dest, ignore_errors=True) if dest.is_dir() and not dest.is_symlink() else dest.unlink(
            missing_ok=True
        )
        _proc.run(["cp", "-a", "--reflink=auto", str(src), str(dest)])


def commit(repo: Path, staging: Path) -> list[Path]:
    """Switch the staged set in (see the module doc); the paths now in place."""
    repo, staging = Path(repo), Path(staging)
    entries = []
    for rel in PATHS:
        new = digest(staging / rel)
        if new is None:
            raise InstallError(
                f"the staged records lack {rel}",
                expected=f"{staging / rel}",
                actual="absent",
                hint="a bug: the release staged an incomplete set; the records were not changed",
            )
        entries.append({"path": rel, "sha256": new})
    journal = repo / JOURNAL
    write_atomic(
        journal,
        json.dumps({"staging": str(staging), "entries": entries, "owner": runs.current().to_json()}, indent=2).encode(),
    )
    _sync_dir(journal.parent)
    runs.pause_at("install:journal")
    for e in entries:
        _switch(staging / e["path"], repo / e["path"])
        runs.pause_at(f"install:{e['path']}")
    for d in {(repo / e["path"]).parent for e in entries}:
        _sync_dir(d)
    journal.unlink()
    _sync_dir(journal.parent)
    shutil.rmtree(staging, ignore_errors=True)
    return [repo / e["path"] for e in entries]


def journaled(repo: Path, staging: Path) -> bool:
    """Whether an install journal names `staging` (it must be kept for `recover`)."""
    try:
        return json.loads((Path(repo) / JOURNAL).read_text()).get("staging") == str(staging)
    except (OSError, ValueError, AttributeError):
        return False


def recover(repo: Path) -> list[str]:
    """Complete an interrupted install, remove what dead runs staged; one line each said and returned."""
    repo = Path(repo)
    lines = []
    journal = repo / JOURNAL
    if journal.exists():
        lines.append(_roll_forward(repo, journal))
    lines += _remove_dead_staging(repo)
    for line in lines:
        say(line)
    return lines


def _roll_forward(repo: Path, journal: Path) -> str:
    try:
        raw = json.loads(journal.read_text())
        staging = Path(raw["staging"])
        entries = [(str(e["path"]), str(e["sha256"])) for e in raw["entries"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InstallError(
            f"the install journal {journal} is unreadable",
            expected="the journal a release wrote",
            actual=str(exc),
            hint="check the records with `nox -s audit`, then remove the journal and release again",
        ) from None
    owner = runs.Owner.from_json(raw.get("owner"))
    if owner is not None and owner.alive and owner != runs.current():
        raise InstallError(
            f"another release (PID {owner.pid}) is switching its records into this checkout",
            expected="one release at a time in a checkout",
            actual=f"{journal} is that release's",
            hint="wait for it to finish, then release again",
        )
    moved = 0
    for rel, new in entries:
        target, staged = repo / rel, staging / rel
        if digest(target) == new:
            continue
        if digest(staged) != new:
            raise InstallError(
                f"an interrupted install cannot be completed: {rel} is neither in place nor staged",
                expected=f"sha256 {new[:16]}… at {target} or {staged}",
                actual=f"{(digest(target) or 'absent')[:16]} and {(digest(staged) or 'absent')[:16]}",
                hint=f"restore the records with `git checkout -- {' '.join(p for p, _ in entries[:3])}`, "
                f"remove {journal}, and release again",
            )
        _switch(staged, target)
        moved += 1
    journal.unlink()
    shutil.rmtree(staging, ignore_errors=True)
    return (
        f"recovered: a killed release had committed its records and not finished switching them in; "
        f"completed ({moved} of {len(entries)} path(s) switched now), removed {staging}"
    )


def _remove_dead_staging(repo: Path) -> list[str]:
    root = repo / STAGING
    if not root.is_dir():
        return []
    removed, restored = [], []
    for entry in sorted(root.iterdir()):
        if ".old-" in entry.name:
            # An older release's two-step install: moved aside, never moved back.
            rel = {"attestations": "attestations", "dataset": "dist/dataset"}.get(entry.name.split(".old-", 1)[1])
            if rel is not None and not (repo / rel).exists():
                (repo / rel).parent.mkdir(parents=True, exist_ok=True)
                os.replace(entry, repo / rel)
                restored.append(f"{rel} (from {entry.name})")
                continue
        else:
            try:
                owner = runs.Owner.from_json(json.loads((entry / OWNER_FILE).read_text()))
            except (OSError, ValueError):
                owner = None
            if owner is not None and owner.alive:
                continue
        shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)
        removed.append(entry.name)
    lines = []
    if restored:
        lines.append(f"recovered: a killed release's install had left {', '.join(restored)} missing; moved back")
    if removed:
        lines.append(
            f"removed {len(removed)} staging director{'y' if len(removed) == 1 else 'ies'} of releases "
            f"that are gone, under {root}: {', '.join(removed[:5])}"
        )
    return lines
