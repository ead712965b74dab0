"""Load and validate release.toml into typed, immutable records."""

from __future__ import annotations

import os
import re
import shlex
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline import configschema
from pipeline import curriculum as curriculum_mod
from pipeline.curriculum import Curriculum
from pipeline.errors import ConfigError
from pipeline.formats import SHORT_COMMIT, is_commit

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = REPO_ROOT / "release.toml"
TRUST_FILE = "trust.toml"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_IMAGE_BY_DIGEST = re.compile(r"^(?P<name>[a-z0-9.\-:/_]+)@(?P<digest>sha256:[0-9a-f]{64})$")

# The per-task budgets of the request, in the order of the request the platform accepted
# (docs/spec/mimo.md, "The Arena request and admission"); declared, with their meaning, in
# the schema.
REQUEST_BUDGET_FIELDS = tuple(configschema.REQUEST_BUDGETS)
# Every key of a [budgets.*] table: the request's, plus limits of the environment that are
# not request fields (recorded in provenance.json).
ENVIRONMENT_LIMIT_FIELDS = tuple(configschema.ENVIRONMENT_LIMITS)
BUDGET_FIELDS = REQUEST_BUDGET_FIELDS + ENVIRONMENT_LIMIT_FIELDS


@dataclass(frozen=True)
class Source:
    name: str
    repository: str
    revision: str
    path: str
    sha256: str
    size: int
    license: str
    license_file: str
    profiles: tuple[str, ...]
    # "" = not pinned yet: the commit id already fixes the licence's bytes, and the
    # first fetch reports its sha256 so it can be pinned here too.
    license_sha256: str = ""


@dataclass(frozen=True)
class Budgets:
    split: str
    values: dict[str, int]


@dataclass(frozen=True)
class ExternalTask:
    """One unchanged MiMo repair task: its image, where its record is, its reference repair.

    `split` and `row` locate the record in the DATASET (split "code"); the request's
    per-task split is the external budgets' split, never this one. `record_sha256` pins
    the record's text ("" = not pinned yet: the first fetch reports the value to pin).
    `reference` names the [[sources]] entry of the task's reference repair script.
    """

    task_id: str
    image: str
    compressed_bytes: int
    after_block: int
    split: str
    row: int
    reference: str
    record_sha256: str = ""

    @property
    def image_name(self) -> str:
        return self.image.split("@", 1)[0]

    @property
    def digest(self) -> str:
        return self.image.split("@", 1)[1]


@dataclass(frozen=True)
class External:
    """`[external]`: the dataset the records come from and how one of its rows is read.

    `id_field` and `record_field` are dotted paths into a row (a row of the MiMo dataset
    holds `extra_info.instance_id` and the record as the JSON string
    `extra_info.instance_json`).
    """

    dataset: str
    revision: str
    license: str
    tasks: tuple[ExternalTask, ...]
    subset: str = "default"
    id_field: str = "extra_info.instance_id"
    record_field: str = "extra_info.instance_json"
    hub_url: str = "https://huggingface.co"
    rows_url: str = "https://datasets-server.huggingface.co"


@dataclass(frozen=True)
class DatasetConfig:
    """`[dataset]`: the card's front matter of the dataset folder, and where the Hub is (each
    profile names its dataset repository, `dataset`).

    hub_url: the Hub serving it (HF_ENDPOINT in the environment overrides it);
    license_name, license_link: the card's `license: other` terms;
    language, tags, source_datasets: the card's front matter (the external tasks' dataset must
        be among the source datasets).
    """

    license_name: str
    license_link: str
    language: tuple[str, ...]
    tags: tuple[str, ...]
    source_datasets: tuple[str, ...]
    hub_url: str = "https://huggingface.co"


@dataclass(frozen=True)
class ExternalPolicy:
    """What a release does with an external task it could not verify: refuse to publish
    (`required`, the arena profile) or carry on and say so loudly. `profile` only names
    the release in messages."""

    required: bool
    profile: str


@dataclass(frozen=True)
class RequestIdentity:
    """What names a release's request on the platform: its `submission_id` and the
    `dataset` repository (a profile's, resolved by the plan)."""

    submission_id: str
    dataset: str


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    registry: str
    repository: str
    tag: str
    base: str
    tasks: str
    signing: str
    external_tasks_required: bool
    # The request's `submission_id` and `dataset` (the dataset repository it names, "owner/name").
    submission_id: str
    dataset: str
    # Whether the release uploads dist/dataset/ to that repository (and reads it back).
    publish_dataset: bool = False

    @property
    def local(self) -> bool:
        return self.registry == "local"

    @property
    def image_name(self) -> str:
        """The image's name in the records: `registry/repository`; for the local profile
        just the repository, since the loopback registry's address is not stable."""
        return self.repository if self.local else f"{self.registry}/{self.repository}"

    @property
    def vendored_source(self) -> str | None:
        """Name of the [[sources]] entry whose file the image serves, if any."""
        return self.tasks.split(":", 1)[1] if self.tasks.startswith("vendor:") else None


@dataclass(frozen=True)
class EngineArgs:
    """Extra flags for one container CLI: before the subcommand, and for `run`."""

    global_args: tuple[str, ...] = ()
    run_args: tuple[str, ...] = ()


RUNTIME_ENGINES = ("auto", "podman", "docker")
# The engines a release verifies its image under, each with the whole check suite.
VERIFY_ENGINES = ("podman", "docker")


@dataclass(frozen=True)
class Admission:
    """[admission]: the platform's disk rule as the preflight applies it.

    A task is admitted when its image (compressed, as the platform measures it) plus its
    `workspace_gib` plus `headroom_gib` fit `sandbox_disk_gib`. The platform does not
    publish its headroom; its answers bound it: above 5.4 GiB (a 0.63 GB image with a
    44 GiB workspace was refused) and below 39.3 GiB (a 0.67 GB image with 10 GiB was
    admitted). The default lies between, with room on both sides.
    """

    sandbox_disk_gib: float = 50.0
    headroom_gib: float = 24.0


@dataclass(frozen=True)
class RuntimeConfig:
    """[runtime]: which container CLI to drive and this machine's quirks for it."""

    engine: str = "auto"
    health_timeout_s: int = 120
    engines: dict[str, EngineArgs] = field(default_factory=dict)
    verify: tuple[str, ...] = VERIFY_ENGINES

    def args_for(self, engine: str, environ: Mapping[str, str] | None = None) -> EngineArgs:
        """The flags for `engine`; RELEASE_RUNTIME_<ENGINE>_GLOBAL_ARGS / _RUN_ARGS replace that
        engine's (`RELEASE_RUNTIME_DOCKER_RUN_ARGS`), else RELEASE_RUNTIME_GLOBAL_ARGS / _RUN_ARGS
        every engine's: a release drives two engines, whose flags differ."""
        environ = os.environ if environ is None else environ
        base = self.engines.get(engine, EngineArgs())
        own = f"RELEASE_RUNTIME_{engine.upper()}_"
        glob = environ.get(own + "GLOBAL_ARGS", environ.get("RELEASE_RUNTIME_GLOBAL_ARGS"))
        run = environ.get(own + "RUN_ARGS", environ.get("RELEASE_RUNTIME_RUN_ARGS"))
        return EngineArgs(
            global_args=tuple(shlex.split(glob)) if glob is not None else base.global_args,
            run_args=tuple(shlex.split(run)) if run is not None else base.run_args,
        )

    def engine_choice(self, environ: Mapping[str, str] | None = None) -> str:
        """`auto`, `podman` or `docker`; RELEASE_RUNTIME_ENGINE overrides the file."""
        environ = os.environ if environ is None else environ
        choice = environ.get("RELEASE_RUNTIME_ENGINE", self.engine)
        if choice not in RUNTIME_ENGINES:
            raise ConfigError("unknown container engine", expected=" or ".join(RUNTIME_ENGINES),
                              actual=choice)
        return choice

    def verify_engines(self, environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
        """The engines the release's verify stage runs the suite under; RELEASE_RUNTIME_VERIFY
        (comma-separated) overrides the file."""
        environ = os.environ if environ is None else environ
        raw = environ.get("RELEASE_RUNTIME_VERIFY")
        return self.verify if raw is None else _verify_engines(tuple(x.strip() for x in raw.split(",")),
                                                                "RELEASE_RUNTIME_VERIFY")


def _verify_engines(engines: tuple[str, ...], where: str) -> tuple[str, ...]:
    if not engines or any(e not in VERIFY_ENGINES for e in engines) or len(set(engines)) != len(engines):
        raise ConfigError(f"{where}: the engines to verify under", expected=f"each of {', '.join(VERIFY_ENGINES)} "
                          "at most once, at least one", actual=list(engines))
    return engines


def _runtime(t: dict[str, Any]) -> RuntimeConfig:
    """[runtime], its types already checked by the schema."""
    engines = {}
    for name in ("podman", "docker"):
        sub = t.get(name, {})
        engines[name] = EngineArgs(tuple(sub.get("global_args", [])), tuple(sub.get("run_args", [])))
    engine = t.get("engine", "auto")
    if engine not in RUNTIME_ENGINES:
        raise ConfigError("runtime.engine", expected=" or ".join(RUNTIME_ENGINES), actual=engine)
    timeout = t.get("health_timeout_s", RuntimeConfig.health_timeout_s)
    if timeout <= 0:
        raise ConfigError("runtime.health_timeout_s must be a positive integer", actual=timeout)
    verify = _verify_engines(tuple(t.get("verify", VERIFY_ENGINES)), "runtime.verify")
    return RuntimeConfig(engine=engine, health_timeout_s=timeout, engines=engines, verify=verify)


@dataclass(frozen=True)
class ReleaseConfig:
    path: Path
    name: str
    app_dir: str
    python: str
    port: int
    source_url: str
    profiles: dict[str, Profile]
    sources: tuple[Source, ...]
    external: External
    budgets: dict[str, Budgets]
    dataset: DatasetConfig
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    admission: Admission = field(default_factory=Admission)
    # None only for the release.toml of a commit before [curriculum] (reproduce).
    declared_curriculum: Curriculum | None = None

    @property
    def curriculum(self) -> Curriculum:
        """[curriculum]; ConfigError when the file has none (a release needs it)."""
        if self.declared_curriculum is None:
            raise ConfigError(f"{self.path} has no [curriculum]",
                              hint="declare the cases to release: [curriculum] with families, difficulties, "
                                   "seeds and blocks (docs/release-toml.md)")
        return self.declared_curriculum

    @property
    def trust_path(self) -> Path:
        """trust.toml beside release.toml: who may sign (not an image input)."""
        return self.path.with_name(TRUST_FILE)

    def profile(self, name: str) -> Profile:
        try:
            return self.profiles[name]
        except KeyError:
            raise ConfigError(
                f"unknown profile {name!r} in {self.path}",
                expected=" or ".join(sorted(self.profiles)),
                actual=name,
            ) from None

    def sources_for(self, profile: Profile) -> tuple[Source, ...]:
        return tuple(s for s in self.sources if profile.name in s.profiles)

    def source(self, name: str) -> Source:
        for s in self.sources:
            if s.name == name:
                return s
        raise ConfigError(f"no [[sources]] entry named {name!r} in {self.path}")


def _source(t: dict[str, Any], i: int) -> Source:
    where = f"sources[{i}]"
    rev = t["revision"]
    if not is_commit(rev):
        kind = "a short revision" if SHORT_COMMIT.fullmatch(rev) else "a moving ref (branch or tag name)"
        raise ConfigError(f"{where}.revision is {kind}, not a full commit id",
                          expected="40 lowercase hex digits", actual=rev)
    sha = t["sha256"]
    if not _SHA256.match(sha):
        raise ConfigError(f"{where}.sha256 is not a sha256", expected="64 lowercase hex", actual=sha)
    lic_sha = t.get("license_sha256", "")
    if lic_sha and not _SHA256.match(lic_sha):
        raise ConfigError(f"{where}.license_sha256 is not a sha256",
                          expected="64 lowercase hex or \"\" (unpinned)", actual=lic_sha)
    source = Source(
        name=t["name"],
        repository=t["repository"],
        revision=rev,
        path=t["path"].strip("/"),
        sha256=sha,
        size=t["size"],
        license=t["license"],
        license_file=t["license_file"].strip("/"),
        profiles=tuple(t.get("profiles", [])),
        license_sha256=lic_sha,
    )
    if Path(source.path).name == Path(source.license_file).name:
        raise ConfigError(f"{where}: the file and its licence would land on the same vendor path",
                          expected="different file names", actual=source.path)
    return source


def _external_task(t: dict[str, Any], i: int) -> ExternalTask:
    where = f"external.tasks[{i}]"
    image = t["image"]
    if not _IMAGE_BY_DIGEST.match(image):
        raise ConfigError(f"{where}.image must be pinned by digest", actual=image)
    row = t["row"]
    if row < 0:
        raise ConfigError(f"{where}.row", expected="a row index >= 0", actual=row)
    record_sha = t.get("record_sha256", "")
    if record_sha and not _SHA256.match(record_sha):
        raise ConfigError(f"{where}.record_sha256 is not a sha256",
                          expected="64 lowercase hex or \"\" (unpinned)", actual=record_sha)
    return ExternalTask(
        task_id=t["task_id"], image=image, compressed_bytes=t["compressed_bytes"],
        after_block=t["after_block"], split=t["split"], row=row,
        reference=t["reference"], record_sha256=record_sha,
    )


def _check_references(tasks: list[ExternalTask], sources: tuple[Source, ...],
                      profiles: dict[str, Profile]) -> None:
    """Each task's `reference` names a [[sources]] entry vendored by every profile that
    requires verified external tasks (there the repair check must have the script)."""
    by_name = {s.name: s for s in sources}
    for i, task in enumerate(tasks):
        where = f"external.tasks[{i}].reference"
        source = by_name.get(task.reference)
        if source is None:
            raise ConfigError(f"{where} names no [[sources]] entry", expected=sorted(by_name),
                              actual=task.reference)
        missing = sorted(p.name for p in profiles.values()
                         if p.external_tasks_required and p.name not in source.profiles)
        if missing:
            raise ConfigError(f"{where}: source {source.name} is not vendored by profile(s) "
                              f"{', '.join(missing)}, which require verified external tasks",
                              expected=f"profiles including {missing}", actual=list(source.profiles))


def curriculum_file(cfg: ReleaseConfig) -> bytes | None:
    """The image's env/curriculum.json from `cfg`'s [curriculum]; None for the release.toml of a
    commit from before [curriculum] (its catalog held the cases in code)."""
    return cfg.declared_curriculum.file_bytes() if cfg.declared_curriculum is not None else None


def _check_after_blocks(tasks: list[ExternalTask], declared: Curriculum) -> None:
    """Each external task follows a block the curriculum has."""
    count = len(declared.blocks())
    for i, task in enumerate(tasks):
        if not 1 <= task.after_block <= count:
            raise ConfigError(f"release.toml: external.tasks[{i}].after_block ({task.task_id}) names no block "
                              f"of the curriculum, which has {count}",
                              expected=f"a block from 1 to {count}", actual=task.after_block,
                              hint="[curriculum] makes one block per (difficulty, seed) pair; "
                                   "move the task or declare more blocks")


_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def _strings(t: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = t[key]
    if not value or not all(value):
        raise ConfigError(f"{where}.{key}", expected="a non-empty list of strings", actual=value)
    return tuple(value)


def _dataset(t: dict[str, Any], external_dataset: str) -> DatasetConfig:
    where = "dataset"
    source_datasets = _strings(t, "source_datasets", where)
    if external_dataset not in source_datasets:
        raise ConfigError(f"{where}.source_datasets does not name the external tasks' dataset",
                          expected=f"a list holding {external_dataset}", actual=list(source_datasets))
    return DatasetConfig(
        license_name=t["license_name"],
        license_link=t["license_link"], language=_strings(t, "language", where),
        tags=_strings(t, "tags", where), source_datasets=source_datasets,
        hub_url=t.get("hub_url", "https://huggingface.co").rstrip("/"))


def _admission(raw: dict[str, Any]) -> Admission:
    where = "admission"
    default = Admission()
    values = {}
    for key in ("headroom_gib", "sandbox_disk_gib"):
        value = raw.get(key, getattr(default, key))
        if value <= 0:
            raise ConfigError(f"{where}.{key} must be a positive number of GiB", actual=value)
        values[key] = float(value)
    if values["headroom_gib"] >= values["sandbox_disk_gib"]:
        raise ConfigError(f"{where}.headroom_gib leaves no room in the sandbox disk",
                          expected=f"less than sandbox_disk_gib ({values['sandbox_disk_gib']:g})",
                          actual=values["headroom_gib"])
    return Admission(**values)


def _field_path(ext: dict[str, Any], key: str, default: str) -> str:
    value = ext.get(key, default)
    if not all(value.split(".")):
        raise ConfigError(f"external.{key}", expected="a dotted path into a dataset row", actual=value)
    return value


def load(path: Path | str = DEFAULT_CONFIG) -> ReleaseConfig:
    """Parse and validate release.toml; ConfigError names the first bad key.

    The file is first checked against its schema (pipeline.configschema: no unknown key, every
    required key, every value of its type), then its values are read and checked."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"release config {path} not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"release config {path} is not valid TOML: {exc}") from None
    configschema.check(raw, configschema.RELEASE, path)
    rel = raw["release"]
    profiles = {}
    for name, t in raw["profiles"].items():
        where = f"profiles.{name}"
        base = t["base"]
        if base != "local" and not _IMAGE_BY_DIGEST.match(base):
            raise ConfigError(f"{where}.base must be 'local' or an image pinned by digest",
                              expected="name@sha256:<64 hex>", actual=base)
        profiles[name] = Profile(
            name=name,
            description=t.get("description", ""),
            registry=t["registry"],
            repository=t["repository"],
            tag=t["tag"],
            base=base,
            tasks=t["tasks"],
            signing=t["signing"],
            external_tasks_required=t["external_tasks_required"],
            submission_id=t["submission_id"],
            dataset=t["dataset"],
            publish_dataset=t.get("publish_dataset", False),
        )
        if not _REPO_ID.match(profiles[name].dataset):
            raise ConfigError(f"{where}.dataset is not a Hugging Face dataset repository id",
                              expected="owner/name", actual=profiles[name].dataset)
    sources = tuple(_source(t, i) for i, t in enumerate(raw.get("sources", [])))
    names = [s.name for s in sources]
    if len(set(names)) != len(names):
        raise ConfigError("duplicate [[sources]] names", actual=names)
    for p in profiles.values():
        if p.signing not in ("key", "sigstore"):
            raise ConfigError(f"profiles.{p.name}.signing", expected="key or sigstore", actual=p.signing)
        vs = p.vendored_source
        if vs is not None and vs not in names:
            raise ConfigError(f"profiles.{p.name}.tasks names an unknown source", expected=names, actual=vs)
        if p.tasks != "first-party" and vs is None:
            raise ConfigError(f"profiles.{p.name}.tasks", expected="first-party or vendor:<source>",
                              actual=p.tasks)
    ext = raw["external"]
    # [external.repair] is gone (the repair checks drive the images by the protocol of
    # docs/spec/mimo.md, "The protocol of the repair images");
    # the release.toml of a commit before its removal still loads, for reproduce: the schema
    # knows its keys, and nothing reads them.
    ext_tasks = [_external_task(t, i) for i, t in enumerate(ext.get("tasks", []))]
    _check_references(ext_tasks, sources, profiles)
    ext_rev = ext["revision"]
    if not is_commit(ext_rev):
        raise ConfigError("external.revision must be a full 40-hex revision", actual=ext_rev)
    declared = curriculum_mod.parse(raw["curriculum"]) if "curriculum" in raw else None
    if declared is not None:
        _check_after_blocks(ext_tasks, declared)
    budgets = {}
    for kind, t in raw["budgets"].items():
        budgets[kind] = Budgets(split=t["split"], values={k: t[k] for k in BUDGET_FIELDS})
    return ReleaseConfig(
        path=path,
        name=rel["name"],
        app_dir=rel["app_dir"],
        python=rel["python"],
        port=rel["port"],
        source_url=rel["source_url"],
        profiles=profiles,
        sources=sources,
        external=External(dataset=ext["dataset"], revision=ext_rev,
                          license=ext["license"], tasks=tuple(ext_tasks),
                          subset=ext.get("subset", "default"),
                          id_field=_field_path(ext, "id_field", External.id_field),
                          record_field=_field_path(ext, "record_field", External.record_field),
                          hub_url=ext.get("hub_url", "https://huggingface.co").rstrip("/"),
                          rows_url=ext.get("rows_url",
                                           "https://datasets-server.huggingface.co").rstrip("/")),
        budgets=budgets,
        dataset=_dataset(raw["dataset"], ext["dataset"]),
        raw=raw,
        runtime=_runtime(raw.get("runtime", {})),
        admission=_admission(raw.get("admission", {})),
        declared_curriculum=declared,
    )
