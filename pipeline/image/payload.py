"""What the derived image adds to its base: the application layers' entries.

Three layers, each a pure function of files in the checkout (and the vendored file
when a profile serves one):

1. `env`      - the environment server (`env/` without the task families), with its
                OpenEnv manifest `env/openenv.yaml` and the curriculum it serves,
                `env/curriculum.json`, written from release.toml's `[curriculum]` (a
                checkout's own file of that name is never packed);
2. `tasks`    - the task module the image serves: first-party `env/families/`, or the
                vendored upstream file with its licence under `vendor/<source>/`;
3. `licenses` - the project's licence (and the vendored file's licence).

Everything lives under the root-only app dir (0700 directories, 0600 files, owned by
root) so that UID 2000 can neither list nor read it. A checkout file whose owner
executable bit is set (git's 100755) becomes 0700: the bit is part of the commit, so a
mode change changes the image (and `reproduce` names the file).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from pipeline.curriculum import CURRICULUM_PATH
from pipeline.errors import ReleaseError
from pipeline.image.oci.layer import FileEntry, parents_of

DIR_MODE = 0o700
FILE_MODE = 0o600
EXEC_MODE = 0o700
_CODE_SUFFIXES = (".py", ".md", ".json", ".txt", ".yaml")
_SKIP_DIRS = {"__pycache__"}


@dataclass(frozen=True)
class VendoredTaskFile:
    """A verified vendored task module: its file and its licence inside `vendor/`."""

    source: str
    file: Path
    license_file: Path


@dataclass(frozen=True)
class LayerSpec:
    """One application layer: a name (for history and reports) and its entries."""

    name: str
    entries: tuple[FileEntry, ...]


def packed(path: str, *, first_party_tasks: bool) -> bool:
    """Whether the checkout file at `path` (relative to the checkout) goes into an image whose
    tasks are first-party (`env/families`) or vendored: the rule `app_layers` packs by."""
    if path == "LICENSE":
        return True
    if path == CURRICULUM_PATH:
        return False
    parts = PurePosixPath(path).parts
    if parts[:1] != ("env",) or any(p in _SKIP_DIRS for p in parts) or not path.endswith(_CODE_SUFFIXES):
        return False
    return first_party_tasks or parts[1:2] != ("families",)


def _dirs_for(paths: list[str], stop: str) -> list[FileEntry]:
    """Root-only directory entries for every parent of `paths` at or below `stop`.

    `opt` stays world-traversable (0755) as in the base; from the app dir down,
    directories are 0700.
    """
    stop_parts = PurePosixPath(stop).parts
    return [
        replace(d, mode=DIR_MODE) if PurePosixPath(d.path).parts[: len(stop_parts)] == stop_parts else d
        for d in parents_of(paths)
    ]


def _files(root: Path, dest: str, *, exclude: AbstractSet[str] = frozenset()) -> list[FileEntry]:
    """Code files under `root` (sorted walk, no caches), placed under `dest`; `exclude`
    names directories and files relative to `root`."""
    found: list[FileEntry] = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        dirnames[:] = sorted(
            d for d in dirnames if d not in _SKIP_DIRS and (f"{rel_dir}/{d}".lstrip("./") not in exclude)
        )
        for name in sorted(filenames):
            if not name.endswith(_CODE_SUFFIXES) or f"{rel_dir}/{name}".lstrip("./") in exclude:
                continue
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            mode = EXEC_MODE if full.stat().st_mode & stat.S_IXUSR else FILE_MODE
            found.append(FileEntry(path=f"{dest}/{rel}", type="file", mode=mode, source=full.read_bytes()))
    return found


def _layer(name: str, files: list[FileEntry], app_dir: str) -> LayerSpec:
    if not files:
        raise ReleaseError(
            f"application layer {name!r} would be empty", hint="check the checkout: env/ and the task module must exist"
        )
    dirs = _dirs_for([f.path for f in files], app_dir)
    return LayerSpec(name=name, entries=tuple(dirs + files))


def app_layers(
    repo: Path, app_dir: str, vendored: VendoredTaskFile | None, curriculum: bytes | None
) -> list[LayerSpec]:
    """The application layers, in order, for a checkout at `repo`; `curriculum` is the
    `env/curriculum.json` to serve (None: a commit from before `[curriculum]`, whose
    catalog held its cases in code)."""
    app = app_dir.strip("/")
    env_root = Path(repo) / "env"
    if not (env_root / "server").is_dir():
        raise ReleaseError(
            f"no environment server at {env_root / 'server'}", hint="run the build from the project checkout"
        )
    in_env = CURRICULUM_PATH.removeprefix("env/")
    env_files = _files(env_root, f"{app}/env", exclude={"families", in_env})
    if curriculum is not None:
        env_files.append(FileEntry(path=f"{app}/{CURRICULUM_PATH}", type="file", mode=FILE_MODE, source=curriculum))
    layers = [_layer("env", env_files, app)]
    licenses = [
        FileEntry(
            path=f"{app}/licenses/LICENSE", type="file", mode=FILE_MODE, source=(Path(repo) / "LICENSE").read_bytes()
        )
    ]
    if vendored is None:
        layers.append(_layer("tasks", _files(env_root / "families", f"{app}/env/families"), app))
    else:
        base = f"{app}/vendor/{vendored.source}"
        layers.append(
            _layer(
                "tasks",
                [
                    FileEntry(
                        path=f"{base}/{vendored.file.name}",
                        type="file",
                        mode=FILE_MODE,
                        source=vendored.file.read_bytes(),
                    ),
                    FileEntry(
                        path=f"{base}/{vendored.license_file.name}",
                        type="file",
                        mode=FILE_MODE,
                        source=vendored.license_file.read_bytes(),
                    ),
                ],
                app,
            )
        )
        licenses.append(
            FileEntry(
                path=f"{app}/licenses/{vendored.source}.{vendored.license_file.name}",
                type="file",
                mode=FILE_MODE,
                source=vendored.license_file.read_bytes(),
            )
        )
    layers.append(_layer("licenses", licenses, app))
    return layers


def tasks_file_in_image(app_dir: str, vendored: VendoredTaskFile | None) -> str | None:
    """The ARENA_TASKS_FILE value for the image (None: first-party module)."""
    if vendored is None:
        return None
    return f"{app_dir.rstrip('/')}/vendor/{vendored.source}/{vendored.file.name}"
