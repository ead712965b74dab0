"""What reaches a profile's image, and the last commit that changed it.

The derived image's revision label and (unless SOURCE_DATE_EPOCH is set) its
SOURCE_DATE_EPOCH come from the *image-input commit*: the newest commit of HEAD's history
at which what reaches the image changed. A commit that changes nothing of it (release
records, the README, trust.toml's pins, budgets, a base-builder module whose base digest
stays the same) moves no digest. What reaches the image of a profile:

- the checkout files the build packs (`pipeline.image.payload.packed`): the code files of
  `env/` (without `env/families` when the profile serves a vendored task file) and
  `LICENSE`, by content and mode;
- the `[release]` values the image config is made of: `name`, `app_dir`, `python`,
  `port`, `source_url`;
- the profile's base as the image names it: its pin in release.toml, or for the local
  base the `name` and `digest` of locks/base.json (how it was made, such as the
  builder's hash, is already in that digest);
- the profile's `tasks` and the pin of the `[[sources]]` file it serves;
- `[curriculum]`, which the build writes into the image as `env/curriculum.json`.

These values are read from each commit's own files (git objects, not the work tree), so
older commits whose release.toml predates today's keys are read too; a file that does
not parse counts by its bytes.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from pipeline._io import canonical_json, sha256_bytes
from pipeline.errors import ReleaseError, SourceError
from pipeline.image.payload import packed
from pipeline.records.provenance import ImageInputs
from pipeline.sources import git

# The paths whose commits can change an image input (a superset: each candidate commit is
# then compared value by value with its parent).
CANDIDATE_PATHS = ("env", "LICENSE", "release.toml", "locks/base.json")
RELEASE_KEYS = ("name", "app_dir", "python", "port", "source_url")
SOURCE_KEYS = ("name", "repository", "revision", "path", "sha256", "license_file", "license_sha256")
COUNTED = (
    "env/ and LICENSE: the files the image packs (content and mode)",
    "release.toml: [release] " + ", ".join(RELEASE_KEYS) + "; the profile's base and tasks; "
    "the pin of the [[sources]] file it serves; [curriculum]",
    "locks/base.json: name and digest (the local base)",
)


class _Reader:
    """A profile's image-input values at commits of one repository (git objects cached)."""

    def __init__(self, repo: Path, profile: str) -> None:
        self.repo, self.profile = repo, profile
        self._values: dict[str, dict[str, Any]] = {}
        self._blobs: dict[str, bytes] = {}

    def _blob(self, oid: str) -> bytes:
        if oid not in self._blobs:
            self._blobs[oid] = git.blob(self.repo, oid)
        return self._blobs[oid]

    def _toml(self, oid: str | None) -> dict[str, Any]:
        if oid is None:
            return {}
        try:
            return tomllib.loads(self._blob(oid).decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError):
            return {"unparsable": oid}

    def _base_lock(self, oid: str | None) -> Any:
        if oid is None:
            return None
        try:
            lock = json.loads(self._blob(oid))
            return f"{lock['name']}@{lock['digest']}"
        except (ValueError, KeyError, TypeError):
            return {"unparsable": oid}

    def values(self, commit: str) -> dict[str, Any]:
        """What reaches the profile's image, as the files of `commit` say."""
        if commit not in self._values:
            files = {e.path: e for e in git.tree_files(self.repo, commit, CANDIDATE_PATHS)}
            toml_entry = files.get("release.toml")
            raw = self._toml(toml_entry.oid if toml_entry else None)
            table = _table(_table(raw.get("profiles")).get(self.profile))
            tasks = table.get("tasks")
            vendored = tasks.split(":", 1)[1] if isinstance(tasks, str) and tasks.startswith("vendor:") else None
            base = table.get("base")
            if base == "local":
                lock = files.get("locks/base.json")
                base = self._base_lock(lock.oid if lock else None)
            sources = raw.get("sources")
            if not isinstance(sources, list):
                sources = []
            served = next((s for s in sources if isinstance(s, dict) and s.get("name") == vendored), None)
            first_party = tasks == "first-party"
            self._values[commit] = {
                "files": {
                    path: f"{e.mode} {e.oid}"
                    for path, e in sorted(files.items())
                    if packed(path, first_party_tasks=first_party)
                },
                "release": {k: _table(raw.get("release")).get(k) for k in RELEASE_KEYS},
                "base": base,
                "tasks": tasks,
                "task_source": {k: served.get(k) for k in SOURCE_KEYS} if served else None,
                # Absent before [curriculum]: an older commit's values (and their digest) stay as they were.
                **({"curriculum": raw["curriculum"]} if "curriculum" in raw else {}),
                **({"unparsable": raw["unparsable"]} if "unparsable" in raw else {}),
            }
        return self._values[commit]


def _table(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def digest(values: dict[str, Any]) -> str:
    return sha256_bytes(canonical_json(values))


def image_inputs(repo: Path, profile: str) -> ImageInputs:
    """The last commit of `repo` (from HEAD) that changed what reaches `profile`'s image."""
    repo = Path(repo)
    reader = _Reader(repo, profile)
    try:
        for logged in git.history(repo, CANDIDATE_PATHS):
            here = reader.values(logged.commit)
            if logged.parent is None or reader.values(logged.parent) != here:
                return ImageInputs(commit=logged.commit, time=logged.time, paths=COUNTED, sha256=digest(here))
    except ReleaseError as exc:
        raise SourceError(
            f"{repo} has no readable history of the image inputs",
            expected="a committed git checkout",
            actual=exc.one_line(),
        ) from None
    raise SourceError(
        f"no commit of {repo} holds the image inputs ({', '.join(CANDIDATE_PATHS)})",
        hint="commit the image inputs first",
    )


def differences(repo: Path, old: str, new: str, profile: str) -> list[str]:
    """What reaches `profile`'s image that differs between commits `old` and `new`: file
    paths, `release.<key>`, `base`, `tasks`, `task_source`, `curriculum`."""
    reader = _Reader(Path(repo), profile)
    a, b = reader.values(old), reader.values(new)
    found = sorted(p for p in set(a["files"]) | set(b["files"]) if a["files"].get(p) != b["files"].get(p))
    found += [f"release.{k}" for k in RELEASE_KEYS if a["release"][k] != b["release"][k]]
    found += [k for k in ("base", "tasks", "task_source", "curriculum", "unparsable") if a.get(k) != b.get(k)]
    return found
