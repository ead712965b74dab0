"""provenance.json: what went into a release, as one typed record with one loader and one writer.

It names every pinned input (git sources with their licences, external task
records, the base by digest, with the lock it was built from for the local base, the
wheel lock by hash), the project's own revision,
the image-input commit, the builder with its locked toolchain, the profile,
SOURCE_DATE_EPOCH and every value written into the image config. It holds no
wall-clock time, so the same inputs give byte-identical files.

The image-input commit is the last commit that changed what reaches the image
(pipeline.inputs): the image's revision label and (unless SOURCE_DATE_EPOCH is set
explicitly, which is then recorded as such) its SOURCE_DATE_EPOCH come from it, so a
commit that only adds release records, pins a key or edits budgets moves no digest.

Beside what went in, it records what the request (submission.json) leaves out: each
task's check results, the images' sizes in both measures, the budgets with the
environment's own limits, and the project revision the request's `source` points at.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Any

from pipeline import __version__
from pipeline._io import pretty_json, read_json, sha256_file, write_atomic
from pipeline.config import BUDGET_FIELDS, Budgets
from pipeline.errors import ConfigError, ReleaseError, SourceError
from pipeline.image import base as base_lock
from pipeline.image.base import BaseRecord
from pipeline.image.build import BuildRecord
from pipeline.image.imageconfig import ImageConfigValues
from pipeline.image.layerdiff import AppLayer
from pipeline.image.oci.layer import zlib_version
from pipeline.records.sizes import Sizes
from pipeline.records.verification import TaskRecord
from pipeline.sources import git, toolchain
from pipeline.sources import lock as runtime_lock
from pipeline.sources.dataset import ExternalRecord
from pipeline.sources.toolchain import Distribution
from pipeline.sources.vendor import VendoredFile

SCHEMA = "openenv-arena-release/provenance/v2"
WHEEL_LOCK = runtime_lock.LOCK_FILE
BASE_LOCK = base_lock.BASE_LOCK_FILE
# The release writes these records itself, so their changes do not make the checkout dirty.
RELEASE_OUTPUTS = ("provenance.json", "submission.json", "attestations/")


@dataclass(frozen=True)
class ProjectRevision:
    """The project checkout the release was made from."""

    commit: str
    tree: str
    dirty: bool
    dirty_paths: tuple[str, ...]
    allow_dirty: bool


@dataclass(frozen=True)
class ImageInputs:
    """The last commit that changed what reaches the image, its committer time, what
    counts (`paths`, in words) and the sha256 of those values at that commit."""

    commit: str
    time: int
    paths: tuple[str, ...]
    sha256: str


@dataclass(frozen=True)
class BaseOrigin:
    """What the locally built base was made from, as its lock (locks/base.json) records it.

    The base is named after a snapshot.debian.org snapshot (the apt source the image names,
    and its SOURCE_DATE_EPOCH), but mmdebstrap fetched the .debs from a Debian mirror, which
    serves a newer point release: what pins them is the lock's .deb list, with the base
    digest (pipeline.image.base.SNAPSHOT). The audit derives all of it again from the
    checkout's lock.
    """

    packages_pinned_by: str  # the lock's path in the checkout
    lock_sha256: str
    debian_suite: str
    named_after_snapshot: str
    debs: int  # how many .debs the lock pins
    packages_from: str | None  # the mirror the lock says they came from; None: the lock does not say
    statement: str

    @classmethod
    def of(cls, record: BaseRecord, *, lock: str, lock_sha256: str) -> BaseOrigin:
        return cls(
            packages_pinned_by=lock,
            lock_sha256=lock_sha256,
            debian_suite=record.debian_suite,
            named_after_snapshot=record.debian_snapshot,
            debs=len(record.debs),
            packages_from=record.debian_mirror,
            statement=(
                f"the .debs were fetched from a Debian mirror"
                f"{f' ({record.debian_mirror})' if record.debian_mirror else ''}, not from snapshot "
                f"{record.debian_snapshot}, which the base is only named after; they are pinned by the "
                f".deb list of {lock} (name, version, architecture and sha256 of each) and the base digest"
            ),
        )


@dataclass(frozen=True)
class Base:
    """The base image by name and digest; for the locally built base also what it was made from
    (`built_from`; None for a base pulled by digest, and in records written before it was recorded)."""

    name: str
    digest: str
    built_from: BaseOrigin | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "digest": self.digest}
        if self.built_from is not None:  # a pulled base records only what is known of it
            data["built_from"] = asdict(self.built_from)
        return data

    @classmethod
    def from_json(cls, data: Any) -> Base:
        data = {"built_from": None, **data} if isinstance(data, dict) else data
        fields = dict(_build(cls, data, "base").__dict__)
        if data["built_from"] is not None:
            fields["built_from"] = _build(BaseOrigin, data["built_from"], "base.built_from")
        return cls(**fields)


@dataclass(frozen=True)
class WheelLock:
    path: str
    sha256: str


@dataclass(frozen=True)
class Builder:
    """What ran the release: the pipeline's, Python's and zlib's versions, and the pipeline's
    toolchain, every distribution of its environment with the file uv.lock pins for it
    (pipeline.sources.toolchain; the audit checks it against uv.lock at `project.commit`)."""

    pipeline_version: str
    python_version: str
    zlib_version: str
    # Empty only in records written before the toolchain was recorded.
    toolchain: tuple[Distribution, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["toolchain"] = [d.to_json() for d in self.toolchain]
        return data

    @classmethod
    def from_json(cls, data: Any) -> Builder:
        data = {"toolchain": [], **data} if isinstance(data, dict) else data
        fields = dict(_build(cls, data, "builder").__dict__)
        if not isinstance(data["toolchain"], list):
            raise ConfigError("builder.toolchain is not a list", actual=type(data["toolchain"]).__name__)
        fields["toolchain"] = tuple(
            Distribution.from_json(d, f"builder.toolchain[{i}]") for i, d in enumerate(data["toolchain"])
        )
        return cls(**fields)


@dataclass(frozen=True)
class Image:
    """The image the release built: digests and compressed sizes, and its application
    layers member by member (what `reproduce` compares a rebuild with)."""

    name: str
    digest: str
    media_type: str
    config_digest: str
    compressed_size: int
    layer_count: int
    app_layers: tuple[AppLayer, ...]
    # None only in records written before the config was recorded.
    config: ImageConfigValues | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["app_layers"] = [l.to_json() for l in self.app_layers]
        data["config"] = self.config.to_json() if self.config else None
        return data

    @classmethod
    def of_build(cls, name: str, record: BuildRecord) -> Image:
        """The image a build stage made (`name`: the repository it is released under)."""
        return cls(
            name=name,
            digest=record.manifest_digest,
            media_type=record.media_type,
            config_digest=record.config_digest,
            compressed_size=record.compressed_size,
            layer_count=len(record.base_layers) + len(record.app_layers),
            app_layers=record.app_layers,
            config=record.config,
        )

    @classmethod
    def from_json(cls, data: Any) -> Image:
        data = {"config": None, **data} if isinstance(data, dict) else data
        fields = dict(_build(cls, data, "image").__dict__)
        fields["app_layers"] = tuple(AppLayer.from_json(l) for l in data["app_layers"])
        if data["config"] is not None:
            fields["config"] = ImageConfigValues.from_json(data["config"])
        return cls(**fields)


@dataclass(frozen=True)
class DatasetPublication:
    """Where the release's dataset folder (dist/dataset/) was published.

    `revision` is the Hub commit holding the task files (the card, tasks.jsonl and vendor/);
    the records themselves are added by the next commit, since a record cannot name the
    commit that holds it. `files_read_back` counts the files downloaded again anonymously at
    `revision`, every byte equal to the folder's.
    """

    repository: str
    published: bool
    revision: str | None
    url: str | None
    files_read_back: int
    reason: str  # why it was not published ("" when it was)


@dataclass(frozen=True)
class Provenance:
    schema: str
    profile: str
    source_date_epoch: int
    project: ProjectRevision
    base: Base
    wheel_lock: WheelLock
    builder: Builder
    sources: tuple[VendoredFile, ...]
    external: tuple[ExternalRecord, ...]
    image: Image | None = None
    image_inputs: ImageInputs | None = None
    # None only in records written before the release was a dataset.
    dataset: DatasetPublication | None = None
    # What the request leaves out: every task's verification (request order), both size
    # measures of every image, and each [budgets.*] table whole (split, the request's
    # budgets and the environment's own limits such as observation_tokens).
    tasks: tuple[TaskRecord, ...] = ()
    sizes: Sizes | None = None
    budgets: dict[str, dict[str, Any]] | None = None
    # The container runtimes the check suite ran under (pipeline/checks/runtimes.py
    # `provenance_runtimes`); None only in records written before the suite ran under two.
    runtimes: tuple[dict[str, Any], ...] | None = None


def budgets_record(budgets: Mapping[str, Budgets]) -> dict[str, dict[str, Any]]:
    """release.toml's [budgets.*] tables as provenance.json records them."""
    return {kind: {"split": b.split, **{k: b.values[k] for k in BUDGET_FIELDS}} for kind, b in sorted(budgets.items())}


def project_revision(repo_dir: Path, *, allow_dirty: bool = False) -> ProjectRevision:
    """Commit, tree and dirty state of the project checkout.

    A dirty checkout (changes or untracked files outside the release's own output
    records) is refused unless `allow_dirty`, which is then recorded.
    """
    try:
        commit, tree = git.head_commit(repo_dir), git.head_tree(repo_dir)
    except ReleaseError as exc:
        raise SourceError(
            f"{repo_dir} is not a git checkout with a commit",
            expected="a committed git checkout",
            actual=exc.one_line(),
        ) from None
    changed = tuple(
        sorted(p for p in git.changed_paths(repo_dir) if not any(p == o or p.startswith(o) for o in RELEASE_OUTPUTS))
    )
    if changed and not allow_dirty:
        shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        raise SourceError(
            "the project checkout is dirty, so its commit does not describe the release",
            expected="a clean checkout",
            actual=f"{len(changed)} changed path(s): {shown}",
            hint="commit or stash the changes, or allow it explicitly (--allow-dirty; recorded)",
        )
    return ProjectRevision(commit=commit, tree=tree, dirty=bool(changed), dirty_paths=changed, allow_dirty=allow_dirty)


def source_date_epoch(inputs: ImageInputs) -> int:
    """SOURCE_DATE_EPOCH from the environment if set (recorded in provenance.json beside
    the image-input commit's time), else the time of the image-input commit."""
    value = os.environ.get("SOURCE_DATE_EPOCH")
    if value is not None and value != "":
        if not value.isdigit():
            raise ConfigError(
                "SOURCE_DATE_EPOCH is not a number of seconds", expected="a non-negative integer", actual=value
            )
        return int(value)
    return inputs.time


def wheel_lock(repo_dir: Path) -> WheelLock:
    """The hash of the image's wheel lock."""
    path = repo_dir / WHEEL_LOCK
    if not path.is_file():
        raise SourceError(
            "the wheel lock is missing", expected=str(path), actual="absent", hint="run `nox -s lock` to write it"
        )
    return WheelLock(path=WHEEL_LOCK, sha256=sha256_file(path))


def local_base(repo_dir: Path, name: str, digest: str) -> Base:
    """The locally built base `name@digest` and what it was made from, as the checkout's
    locks/base.json records it (SourceError if that lock pins another base)."""
    path = repo_dir / BASE_LOCK
    record = base_lock.load_record(path)
    if record is None or (record.name, record.digest) != (name, digest):
        raise SourceError(
            f"{BASE_LOCK} does not pin the base the release builds on",
            expected=f"{name}@{digest}",
            actual=record.reference if record else "absent",
            hint="run `nox -s base` and commit locks/base.json, then release",
        )
    return Base(
        name=name, digest=digest, built_from=BaseOrigin.of(record, lock=BASE_LOCK, lock_sha256=sha256_file(path))
    )


def builder() -> Builder:
    """The versions that can change the bytes the pipeline writes, and the toolchain this
    process runs with (every installed distribution, as the checkout's uv.lock pins it)."""
    return Builder(
        pipeline_version=__version__,
        python_version=platform.python_version(),
        zlib_version=zlib_version(),
        toolchain=toolchain.installed(toolchain.load_lock()),
    )


def assemble(
    repo_dir: Path,
    profile: str,
    *,
    base: Base,
    sources: tuple[VendoredFile, ...],
    external: tuple[ExternalRecord, ...],
    inputs: ImageInputs,
    allow_dirty: bool = False,
) -> Provenance:
    """What went into a release made from `repo_dir` with the profile named `profile` (`inputs`:
    pipeline.inputs' image-input commit of that profile). What the release made (the image, the
    tasks' verification, sizes, budgets, runtimes, the dataset) each stage adds to the record
    with `dataclasses.replace`, so a new field touches only the stage that makes it."""
    return Provenance(
        schema=SCHEMA,
        profile=profile,
        source_date_epoch=source_date_epoch(inputs),
        project=project_revision(repo_dir, allow_dirty=allow_dirty),
        base=base,
        wheel_lock=wheel_lock(repo_dir),
        builder=builder(),
        sources=tuple(sources),
        external=tuple(external),
        image_inputs=inputs,
    )


def to_json(record: Provenance) -> bytes:
    """The exact bytes of provenance.json (sorted keys, stable indentation)."""
    data = asdict(record)
    data["base"] = record.base.to_json()
    data["builder"] = record.builder.to_json()
    if record.image is not None:
        data["image"] = record.image.to_json()
    data["tasks"] = [t.to_json() for t in record.tasks]
    data["sizes"] = record.sizes.to_json() if record.sizes is not None else None
    return pretty_json(data)


def write(path: Path, record: Provenance) -> None:
    """Write provenance.json atomically."""
    write_atomic(path, to_json(record))


def _build(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{where} is not an object", actual=type(data).__name__)
    names = [f.name for f in dataclass_fields(cls)]
    if sorted(data) != sorted(names):
        raise ConfigError(f"{where} has unexpected fields", expected=sorted(names), actual=sorted(data))
    return cls(**data)


def _image_inputs(data: Any) -> ImageInputs | None:
    if data is None:
        return None
    data = dict(data) if isinstance(data, dict) else data
    if isinstance(data, dict):
        data["paths"] = tuple(data.get("paths", ()))
    return _build(ImageInputs, data, "image_inputs")


def load(path: Path) -> Provenance:
    """Read provenance.json back into its typed record; ConfigError if it is malformed."""
    data = read_json(path)
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ConfigError(
            f"{path} is not a provenance record",
            expected=SCHEMA,
            actual=data.get("schema") if isinstance(data, dict) else type(data).__name__,
        )
    project = dict(data.get("project") or {})
    project["dirty_paths"] = tuple(project.get("dirty_paths", ()))
    fields = dict(data)
    fields.update(
        project=_build(ProjectRevision, project, "project"),
        base=Base.from_json(data.get("base")),
        wheel_lock=_build(WheelLock, data.get("wheel_lock"), "wheel_lock"),
        builder=Builder.from_json(data.get("builder")),
        sources=tuple(_build(VendoredFile, s, f"sources[{i}]") for i, s in enumerate(data.get("sources") or [])),
        external=tuple(_build(ExternalRecord, e, f"external[{i}]") for i, e in enumerate(data.get("external") or [])),
        image=Image.from_json(data["image"]) if data.get("image") is not None else None,
        image_inputs=_image_inputs(data.get("image_inputs")),
        dataset=_build(DatasetPublication, data["dataset"], "dataset") if data.get("dataset") is not None else None,
        tasks=tuple(TaskRecord.from_json(t) for t in data.get("tasks") or []),
        sizes=Sizes.from_json(data["sizes"]) if data.get("sizes") is not None else None,
        runtimes=tuple(data["runtimes"]) if data.get("runtimes") is not None else None,
    )
    return _build(Provenance, fields, str(path))
