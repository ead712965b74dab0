"""release.toml and trust.toml: one typed, immutable model (pydantic v2).

Every table is a frozen model that forbids unknown keys; every key is one field, with its
type, its default, its value rules and its documentation (`description`). Loading a file
validates all of it at once, before anything reads a value: an unknown (misspelt) key, a
missing one, a value of the wrong type or out of range is refused with one ConfigError that
names the file read, the key, the expected and actual value and what to do (the nearest
valid key for a typo). Nothing reads the parsed TOML behind the model's back.

Adding a key is adding one field to its table's model: its loader checks it and
docs/release-toml.md (`python -m pipeline.configschema > docs/release-toml.md`, generated
from these models) lists it.

How a table checks itself: `Table._shape` (before pydantic's own validation) refuses unknown
and missing keys and values of the wrong TOML type with the messages of docs/release-toml.md;
the fields' annotations (`Gt(0)`, the `Sha256`, `Commit` ... types) and the validators of each
model check the values; `ReleaseConfig._across` checks what spans tables (a profile's `tasks`
names a source, an external task follows a curriculum block, ...).
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar

from annotated_types import Ge, Gt, Lt
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    model_validator,
)

from pipeline import curriculum as curriculum_mod
from pipeline.curriculum import Curriculum
from pipeline.errors import ConfigError
from pipeline.formats import SHORT_COMMIT, is_commit
from pipeline.imageref import PINNED_FORM, ImageRef, is_sha256

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = REPO_ROOT / "release.toml"
TRUST_FILE = "trust.toml"
DOC_PAGE = "docs/release-toml.md"
HUB_URL = "https://huggingface.co"
ROWS_URL = "https://datasets-server.huggingface.co"
RUNTIME_ENGINES = ("auto", "podman", "docker")
# The engines a release verifies its image under, each with the whole check suite.
VERIFY_ENGINES = ("podman", "docker")

_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


class Invalid(ValueError):
    """A value rule refused a value; the loader turns it into a ConfigError naming the file and
    where the value is (`key`: below the table the rule belongs to; `whole`: `what` already
    names the key from the top of the file; a `what` starting with ":" is about the whole
    table the rule belongs to)."""

    def __init__(
        self,
        what: str,
        *,
        key: str | None = None,
        expected: object | None = None,
        actual: object | None = None,
        hint: str | None = None,
        form: str = "value",
        whole: bool = False,
    ) -> None:
        super().__init__(what)
        self.what, self.key, self.expected, self.actual, self.hint = what, key, expected, actual, hint
        self.form, self.whole = form, whole


# ------------------------------------------------------------------ value types


def _sha256(value: str) -> str:
    if not is_sha256(value):
        raise Invalid(
            "is not a sha256",
            expected="64 lowercase hex digits",
            actual=value,
            hint="paste the file's sha256 (`sha256sum FILE`)",
        )
    return value


def _sha256_or_unpinned(value: str) -> str:
    if value and not is_sha256(value):
        raise Invalid(
            "is not a sha256",
            expected='64 lowercase hex or "" (unpinned)',
            actual=value,
            hint='paste the sha256 the first fetch reports, or "" to leave it unpinned',
        )
    return value


def _commit(value: str) -> str:
    if not is_commit(value):
        kind = "a short revision" if SHORT_COMMIT.fullmatch(value) else "a moving ref (branch or tag name)"
        raise Invalid(
            f"is {kind}, not a full commit id",
            expected="40 lowercase hex digits",
            actual=value,
            hint="pin the full commit id (`git rev-parse <ref>`)",
        )
    return value


def _by_digest(value: str) -> str:
    if not ImageRef.is_pinned(value):
        raise Invalid(
            "must be pinned by digest", expected=PINNED_FORM, actual=value, hint="pin the image by its manifest digest"
        )
    return value


def _repo_id(value: str) -> str:
    if not _REPO_ID.match(value):
        raise Invalid("is not a Hugging Face dataset repository id", expected="owner/name", actual=value)
    return value


def _dotted(value: str) -> str:
    if not all(value.split(".")):
        raise Invalid("is not a dotted path", expected="a dotted path into a dataset row", actual=value)
    return value


def _no_trailing_slash(value: str) -> str:
    return value.rstrip("/")


def _no_outer_slash(value: str) -> str:
    return value.strip("/")


def _non_empty(value: tuple[str, ...]) -> tuple[str, ...]:
    if not value or not all(value):
        raise Invalid("must not be empty", expected="a non-empty list of non-empty strings", actual=list(value))
    return value


Str = Annotated[str, Strict()]
Int = Annotated[int, Strict()]
Bool = Annotated[bool, Strict()]
Num = Annotated[float, Strict()]
Strings = tuple[Str, ...]
Ints = tuple[Int, ...]
Sha256 = Annotated[str, Strict(), AfterValidator(_sha256)]
Sha256OrUnpinned = Annotated[str, Strict(), AfterValidator(_sha256_or_unpinned)]
Commit = Annotated[str, Strict(), AfterValidator(_commit)]
ByDigest = Annotated[str, Strict(), AfterValidator(_by_digest)]
RepoId = Annotated[str, Strict(), AfterValidator(_repo_id)]
Dotted = Annotated[str, Strict(), AfterValidator(_dotted)]
Url = Annotated[str, Strict(), AfterValidator(_no_trailing_slash)]
RepoPath = Annotated[str, Strict(), AfterValidator(_no_outer_slash)]
NonEmptyStrings = Annotated[Strings, AfterValidator(_non_empty)]
KeyId = Annotated[str, Strict(), AfterValidator(lambda v: _keyid(v))]


def _keyid(value: str) -> str:
    if not is_sha256(value):
        raise Invalid(
            "holds a value that is not a keyid",
            expected="64 lowercase hex digits",
            actual=value,
            hint="`python -m pipeline key` prints the keyids line to pin",
        )
    return value


def hidden(default: Any, alias: str) -> Any:
    """A field the loader fills in (a profile's name from its table's name, the file's path),
    never a key of the file: its alias cannot be a bare TOML key, and the page leaves it out."""
    return Field(default, alias=alias, exclude=True, repr=False)


# ------------------------------------------------------------------ the table base

STRING, INTEGER, BOOLEAN, NUMBER = "string", "integer", "boolean", "number"
STRINGS, INTEGERS = "array of strings", "array of integers"
_SCALARS = {str: STRING, int: INTEGER, bool: BOOLEAN, float: NUMBER}
_IS = {
    STRING: lambda v: isinstance(v, str),
    INTEGER: lambda v: isinstance(v, int) and not isinstance(v, bool),
    BOOLEAN: lambda v: isinstance(v, bool),
    NUMBER: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    STRINGS: lambda v: isinstance(v, (list, tuple)) and all(isinstance(s, str) for s in v),
    INTEGERS: lambda v: isinstance(v, (list, tuple)) and all(isinstance(i, int) and not isinstance(i, bool) for i in v),
}
_WRITTEN = {
    STRING: 'a quoted string, "..."',
    INTEGER: "a whole number, unquoted",
    BOOLEAN: "true or false, unquoted",
    NUMBER: "a number, unquoted",
    STRINGS: 'an array of quoted strings, ["...", ...]',
    INTEGERS: "an array of whole numbers, unquoted, [1, 2, ...]",
}


class Kind(typing.NamedTuple):
    """What a key holds: a scalar kind (`name`), or a table (`table`) as one table, an array of
    tables (`many`) or tables under names the file chooses (`placeholder`)."""

    name: str
    table: type[Table] | None = None
    many: bool = False
    placeholder: str = ""


def _unwrap(annotation: Any) -> Any:
    while typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _unwrap(args[0])
    return annotation


def kind_of(field: Any) -> Kind:
    """The TOML kind of a model field (from its annotation)."""
    annotation = _unwrap(field.annotation)
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, Table):
        return Kind("table", annotation)
    if origin is tuple:
        item = _unwrap(typing.get_args(annotation)[0])
        if isinstance(item, type) and issubclass(item, Table):
            return Kind("array of tables", item, many=True)
        return Kind(STRINGS if item is str else INTEGERS)
    if origin is dict:
        item = _unwrap(typing.get_args(annotation)[1])
        placeholder = (field.json_schema_extra or {}).get("placeholder", "name")
        return Kind(f"tables by {placeholder}", item, placeholder=placeholder)
    return Kind(_SCALARS[annotation])


def toml_type(value: Any) -> str:
    for kind, name in (
        (bool, "boolean"),
        (int, "integer"),
        (float, "float"),
        (str, "string"),
        (list, "array"),
        (dict, "table"),
    ):
        if isinstance(value, kind):
            return name
    return "date-time"


def _shown(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


class Table(BaseModel):
    """A table of release.toml or trust.toml (the class docstring is its doc on the page)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=False)

    @classmethod
    def keys(cls) -> dict[str, tuple[str, Any]]:
        """The table's keys as the file writes them: key -> (field name, field)."""
        return {
            (f.alias or name): (name, f) for name, f in cls.model_fields.items() if not (f.alias or "").startswith("<")
        }

    @model_validator(mode="before")
    @classmethod
    def _shape(cls, data: Any) -> Any:
        """Refuse an unknown key, a missing required key or a value of the wrong TOML type."""
        if not isinstance(data, dict):
            return data
        keys = cls.keys()
        for key in data:
            if key not in keys and not key.startswith("<"):
                close = difflib.get_close_matches(key, list(keys), n=1, cutoff=0.6)
                raise Invalid(
                    "",
                    key=key,
                    form="unknown",
                    expected="one of " + ", ".join(keys),
                    actual=key,
                    hint=(f"did you mean `{close[0]}`? rename it" if close else "remove it")
                    + f" ({DOC_PAGE} lists every table and key)",
                )
        for key, (_, f) in keys.items():
            if f.is_required() and key not in data:
                kind = kind_of(f)
                if kind.table is not None and not kind.many:
                    hint = f"add the table [{{path}}] ({f.description})"
                elif kind.many:
                    hint = f"add [[{{path}}]] entries ({f.description})"
                else:
                    hint = f"add {key} = <{kind.name}>: {f.description}"
                raise Invalid("", key=key, form="missing", hint=hint)
        for key, value in data.items():
            # None is never read from a file (TOML has none): an optional key given as absent.
            if key in keys and not (value is None and keys[key][1].default is None):
                _check_type(key, value, kind_of(keys[key][1]))
        return data


def _wrong_type(key: str, kind: Kind, value: Any) -> Invalid:
    name = key.rsplit(".", 1)[-1]
    if kind.table is not None and not kind.many:
        hint = "make it a table: [{path}]"
    elif kind.many:
        hint = "write each entry as a table: [[{path}]]"
    else:
        hint = f"write {name} as {_WRITTEN[kind.name]}"
    return Invalid(
        "", key=key, form="type", expected=kind.name, actual=f"{toml_type(value)} {_shown(value)}", hint=hint
    )


def _check_type(key: str, value: Any, kind: Kind) -> None:
    """A table may also be given as its model (a value made in Python, not read from a file)."""

    def table(v: Any) -> bool:
        return isinstance(v, (dict, Table))

    if kind.table is None:
        if not _IS[kind.name](value):
            raise _wrong_type(key, kind, value)
    elif kind.many:
        if not isinstance(value, (list, tuple)) or not all(table(t) for t in value):
            raise _wrong_type(key, kind, value)
    elif kind.placeholder:
        if not isinstance(value, dict):
            raise _wrong_type(key, kind, value)
        for name, t in value.items():
            if not table(t):
                raise _wrong_type(f"{key}.{name}", Kind("table", kind.table), t)
    elif not table(value):
        raise _wrong_type(key, kind, value)


# ------------------------------------------------------------------ release.toml


class ReleaseTable(Table):
    """What the image is: its name, where its code and interpreter are, its port."""

    name: Str = Field(description="the environment's name")
    app_dir: Str = Field(description="where the environment's code lives in the image (root-only)")
    python: Str = Field(description="the image's Python interpreter")
    port: Annotated[Int, Gt(0), Lt(65536)] = Field(description="the port the server listens on")
    source_url: Str = Field(description="the repository of this project")


class Profile(Table):
    """A release profile, chosen with `--profile <name>` (`local` by default): where the image goes, what it
    is built from and how it is signed."""

    name: str = hidden("", "<name>")
    description: Str = Field("", description="what the profile is for (messages only)")
    registry: Str = Field(description='the registry pushed to, or "local": the loopback registry the release starts')
    repository: Str = Field(description="the image's repository in that registry")
    tag: Str = Field(description="the image's tag")
    base: Str = Field(
        description='"local" (built by `nox -s base`, pinned in locks/base.json) or an image '
        "pinned by digest, `name@sha256:<64 hex>`"
    )
    tasks: Str = Field(
        description='"first-party" (env/families) or `vendor:<source>`, `<source>` naming the '
        "[[sources]] entry whose file the image serves"
    )
    signing: Str = Field(description='"key" (Ed25519 release key) or "sigstore" (keyless)')
    external_tasks_required: Bool = Field(description="refuse to publish unless every external task verifies")
    submission_id: Str = Field(description="the request's `submission_id`")
    dataset: RepoId = Field(description="the Hugging Face dataset repository the request names, owner/name")
    publish_dataset: Bool = Field(False, description="upload dist/dataset/ to `dataset` and read it back (HF_TOKEN)")

    @model_validator(mode="after")
    def _values(self) -> Profile:
        if self.base != "local" and not ImageRef.is_pinned(self.base):
            raise Invalid(
                "must be 'local' or an image pinned by digest", key="base", expected=PINNED_FORM, actual=self.base
            )
        if self.signing not in ("key", "sigstore"):
            raise Invalid("is not a signing method", key="signing", expected="key or sigstore", actual=self.signing)
        if self.tasks != "first-party" and self.vendored_source is None:
            raise Invalid(
                "names no task module", key="tasks", expected="first-party or vendor:<source>", actual=self.tasks
            )
        return self

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


class CurriculumTable(Table):
    """The curriculum: which procedural cases (family, difficulty, seed) the image serves, in request order.
    An image input: the build writes the cases into the image (`env/curriculum.json`), and the check suite,
    the request, tasks.jsonl and the dataset card follow them. The task modules limit the choice: the
    upstream generator vendored under vendor/ and the first-party env/families both implement
    docs/spec/families.md, "Module API" (pipeline/curriculum.py refuses anything else)."""

    families: Strings = Field(
        description="the families, in their order within a block; each one of "
        + ", ".join(curriculum_mod.TASK_FAMILIES)
    )
    difficulties: Ints = Field(
        description="the difficulties, each "
        + ", ".join(str(d) for d in curriculum_mod.DIFFICULTIES)
        + " (what make_task accepts, upstream and first-party)"
    )
    seeds: Ints = Field(description="the seeds (>= 0) of the generator, in their order within a difficulty")
    blocks: Str = Field(
        description='"difficulty-seed": one block per (difficulty, seed) pair, difficulties '
        "outermost, each block one case per family"
    )

    @model_validator(mode="after")
    def _cases(self) -> CurriculumTable:
        self.parsed()
        return self

    def parsed(self) -> Curriculum:
        try:
            return curriculum_mod.parse(self.model_dump())
        except ConfigError as exc:
            raise Invalid(exc.what, expected=exc.expected, actual=exc.actual, hint=exc.hint, whole=True) from None


class DatasetConfig(Table):
    """The card's front matter of the dataset folder (dist/dataset/), and the Hub serving it."""

    hub_url: Url = Field(HUB_URL, description="the Hub (HF_ENDPOINT overrides it)")
    license_name: Str = Field(description="the card's `license_name` (its licence is `other`)")
    license_link: Str = Field(description="the card's `license_link`, where the terms are stated")
    language: NonEmptyStrings = Field(description="the card's languages (non-empty)")
    tags: NonEmptyStrings = Field(description="the card's tags (non-empty)")
    source_datasets: NonEmptyStrings = Field(
        description="the card's source datasets (non-empty; holding [external] `dataset`)"
    )


class Intoto(Table):
    """The in-toto layout of a release."""

    layout_valid_days: Annotated[Int, Gt(0)] = Field(365, description="days a new layout is valid")


class Source(Table):
    """A pinned upstream file: fetched at a full commit id, checked against its sha256 and size, vendored
    with its licence."""

    name: Str = Field(
        description="the entry's name (unique), as profiles' `tasks` and external tasks' `reference` name it"
    )
    repository: Str = Field(description="the git repository's URL")
    revision: Commit = Field(description="the full commit id (40 lowercase hex digits; no branch, tag or short id)")
    path: RepoPath = Field(description="the file's path in the repository")
    sha256: Sha256 = Field(description="the file's sha256 (64 lowercase hex digits)")
    size: Annotated[Int, Ge(0)] = Field(description="the file's size in bytes")
    license: Str = Field(description="the file's licence, an SPDX expression")
    license_file: RepoPath = Field(
        description="the licence file's path in the repository (another file name than `path`)"
    )
    # "" = not pinned yet: the commit id already fixes the licence's bytes, and the first fetch
    # reports its sha256 so it can be pinned here too.
    license_sha256: Sha256OrUnpinned = Field(
        "",
        description='the licence file\'s sha256; "" or absent: not pinned yet (`python -m pipeline vendor` prints it)',
    )
    profiles: Strings = Field((), description="the profiles that vendor the file")

    @model_validator(mode="after")
    def _paths(self) -> Source:
        if Path(self.path).name == Path(self.license_file).name:
            raise Invalid(
                ": the file and its licence would land on the same vendor path",
                expected="different file names",
                actual=self.path,
                hint="vendor the licence from a file of another name",
            )
        return self


class ExternalTask(Table):
    """One unchanged MiMo repair task of the request: its image, its record in the dataset and its reference
    repair."""

    # `split` and `row` locate the record in the DATASET (split "code"); the request's per-task
    # split is the external budgets' split, never this one.
    task_id: Str = Field(description="the task's id")
    image: ByDigest = Field(description="the task's image pinned by digest, `name@sha256:<64 hex>`")
    compressed_bytes: Annotated[Int, Gt(0)] = Field(
        description="the image's compressed size as its registry manifests declare it"
    )
    after_block: Int = Field(
        description="the block of procedural tasks the task follows in the request, 1 to "
        "the number of [curriculum] blocks"
    )
    split: Str = Field(description="the dataset split holding the record (not the request's split)")
    row: Annotated[Int, Ge(0)] = Field(description="the record's row in that split")
    reference: Str = Field(description="the [[sources]] entry of the task's reference repair script")
    record_sha256: Sha256OrUnpinned = Field(
        "", description='the sha256 of the record\'s text; "" or absent: not pinned yet (the first fetch reports it)'
    )

    @property
    def image_name(self) -> str:
        return ImageRef.parse(self.image).name

    @property
    def digest(self) -> str:
        return str(ImageRef.parse(self.image).digest)


class ExternalRepair(Table):
    """Retired: ignored when present. A release.toml of a commit before its removal still loads (`reproduce`
    reads the recorded commit's file)."""

    # The repair checks drive the images by the protocol of docs/spec/mimo.md, "The protocol of
    # the repair images"; nothing reads these keys.
    reset_id_field: Str | None = Field(None, description="retired: the reset keyword naming the task")
    workspace: Str | None = Field(None, description="retired: the repository the agent repairs")
    grader_paths: Strings = Field((), description="retired: the paths the agent's shell must not read")
    reference_field: Str | None = Field(None, description="retired: where a row held the reference repair")


class External(Table):
    """The dataset the external tasks' records come from and how one of its rows is read."""

    # A row of the MiMo dataset holds `extra_info.instance_id` and the record as the JSON string
    # `extra_info.instance_json`.
    dataset: Str = Field(description="the Hugging Face dataset, owner/name")
    revision: Commit = Field(description="the dataset's commit id (40 lowercase hex digits)")
    license: Str = Field(description="the dataset's licence, an SPDX expression")
    subset: Str = Field("default", description="the dataset's subset (config)")
    id_field: Dotted = Field("extra_info.instance_id", description="the dotted path of the task id in a row")
    record_field: Dotted = Field(
        "extra_info.instance_json", description="the dotted path of the record (a JSON string) in a row"
    )
    hub_url: Url = Field(HUB_URL, description="the Hub serving the dataset")
    rows_url: Url = Field(ROWS_URL, description="the dataset viewer's rows API")
    # Checked like any table, then dropped: nothing reads it, and a file with it equals one without.
    repair: Annotated[ExternalRepair | None, AfterValidator(lambda _: None)] = Field(
        None, description="retired, ignored"
    )
    tasks: tuple[ExternalTask, ...] = Field((), description="the external tasks, in the request's order")


class Budgets(Table):
    """The request's per-task budgets of one kind of task (procedural: this image's; external: the MiMo
    images'), and the environment's own limits."""

    # The request's budgets in the order of the request the platform accepted
    # (docs/spec/mimo.md, "The Arena request and admission"), then the environment's own
    # limits (ENVIRONMENT_LIMIT_FIELDS: recorded in provenance.json, not request fields).
    split: Str = Field(description="the request's split of every task of the kind")
    reset_wall_s: Annotated[Int, Gt(0)] = Field(description="wall-clock seconds a reset may take")
    rollout_wall_s: Annotated[Int, Gt(0)] = Field(description="wall-clock seconds of a whole rollout")
    verifier_wall_s: Annotated[Int, Gt(0)] = Field(description="wall-clock seconds of the grading")
    tool_wall_s: Annotated[Int, Gt(0)] = Field(description="wall-clock seconds of one tool call (shell action)")
    tool_calls_total: Annotated[Int, Gt(0)] = Field(description="tool calls of a rollout")
    tool_calls_per_minute: Annotated[Int, Gt(0)] = Field(description="tool calls per minute")
    completion_tokens: Annotated[Int, Gt(0)] = Field(description="completion tokens of the model")
    context_tokens: Annotated[Int, Gt(0)] = Field(description="context tokens of the model")
    memory_gib: Annotated[Int, Gt(0)] = Field(description="memory of the task's container, GiB")
    cpu_floor_vcpus: Annotated[Int, Gt(0)] = Field(description="vCPUs the task's container is guaranteed")
    workspace_gib: Annotated[Int, Gt(0)] = Field(
        description="workspace disk of a task, GiB (the platform's admission counts it)"
    )
    observation_tokens: Annotated[Int, Gt(0)] = Field(
        description="tokens of one observation (a limit of the environment, not a request field)"
    )

    ENVIRONMENT_LIMITS: ClassVar[tuple[str, ...]] = ("observation_tokens",)

    @property
    def values(self) -> dict[str, int]:
        """Every budget and limit by key (BUDGET_FIELDS), without `split`."""
        return {k: getattr(self, k) for k in BUDGET_FIELDS}


class BudgetTables(Table):
    """The request's per-task budgets, one table per kind of task."""

    procedural: Budgets = Field(description="budgets of the procedural tasks (this image)")
    external: Budgets = Field(description="budgets of the external tasks (the MiMo images)")


# Every key of a [budgets.*] table but `split`: the request's, in its order, then the limits of
# the environment that are not request fields (recorded in provenance.json).
ENVIRONMENT_LIMIT_FIELDS = Budgets.ENVIRONMENT_LIMITS
REQUEST_BUDGET_FIELDS = tuple(k for k in Budgets.model_fields if k != "split" and k not in ENVIRONMENT_LIMIT_FIELDS)
BUDGET_FIELDS = REQUEST_BUDGET_FIELDS + ENVIRONMENT_LIMIT_FIELDS


class Admission(Table):
    """The platform's disk rule as the admission preflight applies it: compressed image + `workspace_gib` +
    headroom must fit the sandbox disk."""

    # The platform does not publish its headroom; its answers bound it: above 5.4 GiB (a
    # 0.63 GB image with a 44 GiB workspace was refused) and below 39.3 GiB (a 0.67 GB image
    # with 10 GiB was admitted). The default lies between, with room on both sides.
    sandbox_disk_gib: Annotated[Num, Gt(0)] = Field(50.0, description="the sandbox disk, GiB")
    headroom_gib: Annotated[Num, Gt(0)] = Field(
        24.0, description="the platform's headroom, GiB (below sandbox_disk_gib)"
    )

    @model_validator(mode="after")
    def _room(self) -> Admission:
        if self.headroom_gib >= self.sandbox_disk_gib:
            raise Invalid(
                "leaves no room in the sandbox disk",
                key="headroom_gib",
                expected=f"less than sandbox_disk_gib ({self.sandbox_disk_gib:g})",
                actual=self.headroom_gib,
                hint="lower headroom_gib or raise sandbox_disk_gib",
            )
        return self


class EngineArgs(Table):
    """Extra flags of one container CLI (this machine's quirks); RELEASE_RUNTIME_<ENGINE>_GLOBAL_ARGS and
    RELEASE_RUNTIME_<ENGINE>_RUN_ARGS (shell-quoted; e.g. RELEASE_RUNTIME_DOCKER_RUN_ARGS) replace them, else
    RELEASE_RUNTIME_GLOBAL_ARGS and RELEASE_RUNTIME_RUN_ARGS replace every engine's."""

    global_args: Strings = Field((), description="flags before the subcommand")
    run_args: Strings = Field((), description="flags of `run`")


def _engine(value: str) -> str:
    if value not in RUNTIME_ENGINES:
        raise Invalid("is not a container engine", expected=" or ".join(RUNTIME_ENGINES), actual=value)
    return value


def _verify_engines(engines: tuple[str, ...]) -> tuple[str, ...]:
    if not engines or any(e not in VERIFY_ENGINES for e in engines) or len(set(engines)) != len(engines):
        raise Invalid(
            "is not a list of the engines to verify under",
            actual=list(engines),
            expected=f"each of {', '.join(VERIFY_ENGINES)} at most once, at least one",
        )
    return engines


class RuntimeConfig(Table):
    """Which container CLI the pipeline drives, and this machine's quirks for it."""

    engine: Annotated[Str, AfterValidator(_engine)] = Field(
        "auto",
        description='"auto" (podman, always), "podman" or "docker" (the private Docker engine); '
        "RELEASE_RUNTIME_ENGINE overrides it",
    )
    verify: Annotated[Strings, AfterValidator(_verify_engines)] = Field(
        VERIFY_ENGINES,
        description="the engines the release runs the whole check suite under, in order, each "
        'once ("podman", "docker": the private Docker engine with Docker\'s '
        "defaults), and the audit holds the records to; RELEASE_RUNTIME_VERIFY "
        "(comma-separated) overrides it for `verify`, never for a release",
    )
    health_timeout_s: Annotated[Int, Gt(0)] = Field(120, description="seconds a started image has to answer /health")
    podman: EngineArgs = Field(EngineArgs(), description="podman's flags")
    docker: EngineArgs = Field(EngineArgs(), description="docker's flags")

    @property
    def engines(self) -> dict[str, EngineArgs]:
        return {"podman": self.podman, "docker": self.docker}

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
            raise ConfigError(
                "RELEASE_RUNTIME_ENGINE names an unknown container engine",
                expected=" or ".join(RUNTIME_ENGINES),
                actual=choice,
                hint="set it to one of them, or unset it to use [runtime] engine",
            )
        return choice

    def verify_engines(self, environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
        """The engines the release's verify stage runs the suite under; RELEASE_RUNTIME_VERIFY
        (comma-separated) overrides the file."""
        environ = os.environ if environ is None else environ
        raw = environ.get("RELEASE_RUNTIME_VERIFY")
        if raw is None:
            return self.verify
        try:
            return _verify_engines(tuple(x.strip() for x in raw.split(",")))
        except Invalid as exc:
            raise ConfigError(
                f"RELEASE_RUNTIME_VERIFY {exc.what}",
                expected=exc.expected,
                actual=exc.actual,
                hint="name podman and/or docker, comma-separated, or unset it",
            ) from None


class ReleaseConfig(Table):
    """release.toml: the declarative release; every upstream input is pinned here. It is an input of the image
    (pipeline/inputs.py says which values reach it)."""

    path: Path = hidden(Path("release.toml"), "<path>")
    release: ReleaseTable = Field(description="the image")
    profiles: dict[str, Profile] = Field(
        description="the release profiles, by name", json_schema_extra={"placeholder": "name"}
    )
    # None only for the release.toml of a commit before [curriculum] (reproduce).
    curriculum_table: CurriculumTable | None = Field(
        None,
        alias="curriculum",
        description="the procedural cases the image serves and the request lists; "
        "required to release (absent only in the release.toml of a "
        "commit before it, which `reproduce` rebuilds as it was)",
    )
    dataset: DatasetConfig = Field(description="the release as a Hugging Face dataset")
    intoto: Intoto = Field(Intoto(), description="in-toto layout policy")
    sources: tuple[Source, ...] = Field((), description="pinned upstream files")
    external: External = Field(description="the external (MiMo) repair tasks and their dataset")
    budget_tables: BudgetTables = Field(alias="budgets", description="per-task budgets")
    admission: Admission = Field(Admission(), description="admission preflight")
    runtime: RuntimeConfig = Field(RuntimeConfig(), description="container runtime")

    @model_validator(mode="before")
    @classmethod
    def _names(cls, data: Any) -> Any:
        """Each profile's name is its table's name."""
        if isinstance(data, dict) and isinstance(data.get("profiles"), dict):
            data = {
                **data,
                "profiles": {
                    name: {**t, "<name>": name} if isinstance(t, dict) else t for name, t in data["profiles"].items()
                },
            }
        return data

    @model_validator(mode="after")
    def _across(self) -> ReleaseConfig:
        """The rules that span tables."""
        names = [s.name for s in self.sources]
        if len(set(names)) != len(names):
            raise Invalid(
                "duplicate [[sources]] names",
                actual=names,
                whole=True,
                hint="give each [[sources]] entry a name of its own",
            )
        for p in self.profiles.values():
            vs = p.vendored_source
            if vs is not None and vs not in names:
                raise Invalid(
                    "names an unknown source",
                    key=f"profiles.{p.name}.tasks",
                    expected=names,
                    actual=vs,
                    hint="name a [[sources]] entry, or use first-party",
                )
        by_name = {s.name: s for s in self.sources}
        for i, task in enumerate(self.external.tasks):
            where = f"external.tasks[{i}].reference"
            source = by_name.get(task.reference)
            if source is None:
                raise Invalid(
                    "names no [[sources]] entry",
                    key=where,
                    expected=sorted(by_name),
                    actual=task.reference,
                    hint="name the [[sources]] entry of its reference repair",
                )
            missing = sorted(
                p.name for p in self.profiles.values() if p.external_tasks_required and p.name not in source.profiles
            )
            if missing:
                raise Invalid(
                    f": source {source.name} is not vendored by profile(s) {', '.join(missing)}, "
                    "which require verified external tasks",
                    key=where,
                    expected=f"profiles including {missing}",
                    actual=list(source.profiles),
                    hint=f"add {', '.join(missing)} to the source's profiles",
                )
        if self.external.dataset not in self.dataset.source_datasets:
            raise Invalid(
                "does not name the external tasks' dataset",
                key="dataset.source_datasets",
                expected=f"a list holding {self.external.dataset}",
                actual=list(self.dataset.source_datasets),
                hint="add it to source_datasets",
            )
        declared = self.declared_curriculum
        if declared is not None:
            count = len(declared.blocks())
            for i, task in enumerate(self.external.tasks):
                if not 1 <= task.after_block <= count:
                    raise Invalid(
                        f"({task.task_id}) names no block of the curriculum, which has {count}",
                        key=f"external.tasks[{i}].after_block",
                        expected=f"a block from 1 to {count}",
                        actual=task.after_block,
                        hint="[curriculum] makes one block per (difficulty, seed) pair; "
                        "move the task or declare more blocks",
                    )
        return self

    # -- the [release] table's values, by their old names
    @property
    def name(self) -> str:
        return self.release.name

    @property
    def app_dir(self) -> str:
        return self.release.app_dir

    @property
    def python(self) -> str:
        return self.release.python

    @property
    def port(self) -> int:
        return self.release.port

    @property
    def source_url(self) -> str:
        return self.release.source_url

    def with_app_dir(self, app_dir: str) -> ReleaseConfig:
        """This configuration with another [release] app_dir (a server started elsewhere)."""
        return self.model_copy(update={"release": self.release.model_copy(update={"app_dir": app_dir})})

    @property
    def budgets(self) -> Mapping[str, Budgets]:
        """[budgets.<kind>] by kind (procedural, external)."""
        return types.MappingProxyType({k: getattr(self.budget_tables, k) for k in BudgetTables.model_fields})

    @property
    def declared_curriculum(self) -> Curriculum | None:
        """[curriculum]; None only for the release.toml of a commit before it."""
        return self.curriculum_table.parsed() if self.curriculum_table is not None else None

    @property
    def curriculum(self) -> Curriculum:
        """[curriculum]; ConfigError when the file has none (a release needs it)."""
        if self.curriculum_table is None:
            raise ConfigError(
                f"{self.path} has no [curriculum]",
                hint="declare the cases to release: [curriculum] with families, difficulties, "
                f"seeds and blocks ({DOC_PAGE})",
            )
        return self.curriculum_table.parsed()

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
                hint=f"choose one of them, or add [profiles.{name}]",
            ) from None

    def sources_for(self, profile: Profile) -> tuple[Source, ...]:
        return tuple(s for s in self.sources if profile.name in s.profiles)

    def source(self, name: str) -> Source:
        for s in self.sources:
            if s.name == name:
                return s
        raise ConfigError(
            f"no [[sources]] entry named {name!r} in {self.path}", expected=[s.name for s in self.sources], actual=name
        )


# ------------------------------------------------------------------ trust.toml


class TrustPins(Table):
    """The signers a profile's records may carry: pinned Ed25519 keyids and/or a sigstore identity with its
    issuer."""

    keyids: tuple[KeyId, ...] = Field(
        (), description="Ed25519 release keyids, 64 hex digits each (`python -m pipeline key` prints the line)"
    )
    identity: Str | None = Field(
        None,
        description="the sigstore certificate identity; a trailing `*` matches a git ref name (goes with `issuer`)",
    )
    issuer: Str | None = Field(None, description="the OIDC issuer of that identity (goes with `identity`)")

    @model_validator(mode="after")
    def _together(self) -> TrustPins:
        if (self.identity is None) != (self.issuer is None):
            raise Invalid(
                ": identity and issuer go together",
                actual=f"identity={self.identity!r}, issuer={self.issuer!r}",
                hint="pin both, or neither",
            )
        return self


class TrustFile(Table):
    """trust.toml (beside release.toml): who may sign a release, the audit's trust root. Not an image input:
    pinning a new key moves no image digest."""

    path: Path = hidden(Path("trust.toml"), "<path>")
    trust: dict[str, TrustPins] = Field(
        {},
        description="the trust root of each profile, by the profile's name",
        json_schema_extra={"placeholder": "profile"},
    )

    def pins(self, profile: str) -> TrustPins:
        """`[trust.<profile>]`; nothing pinned when the file has no such table."""
        return self.trust.get(profile, TrustPins())


FILES: dict[str, type[Table]] = {"release.toml": ReleaseConfig, TRUST_FILE: TrustFile}
T = typing.TypeVar("T", bound=Table)


# ------------------------------------------------------------------ loading


def _where(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _label(where: str) -> str:
    """Where a key is: `in [profiles.arena]`, `in sources[1]` (an array's entry), `at the top level`."""
    if not where:
        return "at the top level"
    return f"in {where}" if where.endswith("]") else f"in [{where}]"


_RULES = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}


def _error(
    what: str, *, expected: object | None = None, actual: object | None = None, hint: str | None = None
) -> ConfigError:
    """A ConfigError stating only the parts there are (no "expected None")."""
    given = {k: v for k, v in (("expected", expected), ("actual", actual)) if v is not None}
    return ConfigError(what, hint=hint, **given)


def _config_error(path: Path, exc: ValidationError) -> ConfigError:
    """The first error of a validation, as one ConfigError naming `path` and the key."""
    err = exc.errors()[0]
    loc = tuple(p for p in err["loc"] if p not in ("function-after",))
    where = _where(loc)
    invalid = (err.get("ctx") or {}).get("error")
    if isinstance(invalid, Invalid):
        full = f"{where}.{invalid.key}" if where and invalid.key else (invalid.key or where)
        hint = invalid.hint.replace("{path}", full) if invalid.hint else None
        if invalid.form == "unknown":
            return _error(
                f"{path}: unknown key {invalid.key!r} {_label(where)}",
                expected=invalid.expected,
                actual=invalid.actual,
                hint=hint,
            )
        if invalid.form == "missing":
            return _error(f"{path}: {where + ': ' if where else ''}missing key {invalid.key!r}", hint=hint)
        if invalid.form == "type":
            return _error(
                f"{path}: {full} has the wrong type", expected=invalid.expected, actual=invalid.actual, hint=hint
            )
        if invalid.whole:
            what = invalid.what
        elif invalid.what.startswith(":"):
            what = f"{full}{invalid.what}"
        else:
            what = f"{full} {invalid.what}" if full else invalid.what
        return _error(
            f"{path}: {what}",
            expected=invalid.expected,
            actual=invalid.actual,
            hint=hint or f"fix {full or 'it'} in {path} ({DOC_PAGE})",
        )
    rule = _RULES.get(err["type"])
    if rule is not None:
        bound = next(iter((err.get("ctx") or {}).values()))
        bound = f"{bound:g}" if isinstance(bound, float) else bound
        return _error(
            f"{path}: {where} is out of range",
            expected=f"{rule} {bound}",
            actual=err["input"],
            hint=f"set {where} to a value {rule} {bound} ({DOC_PAGE})",
        )
    return _error(
        f"{path}: {where} is invalid: {err['msg']}",
        actual=_shown(err.get("input")),
        hint=f"fix it ({DOC_PAGE} lists every table and key)",
    )


def _parse(path: Path, what: str, missing_hint: str | None) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{what} {path} not found", hint=missing_hint) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{what} {path} is not valid TOML: {exc}", hint="fix its syntax") from None


def validate(model: type[T], data: dict[str, Any], path: Path | str) -> T:
    """`data` (a parsed file) as `model`; ConfigError naming `path` and the first bad key."""
    path = Path(path)
    try:
        return model.model_validate({**data, "<path>": path})
    except ValidationError as exc:
        raise _config_error(path, exc) from None


def load(path: Path | str = DEFAULT_CONFIG) -> ReleaseConfig:
    """Parse and validate release.toml, all of it; ConfigError names the file and the first bad key."""
    path = Path(path)
    return validate(ReleaseConfig, _parse(path, "release config", None), path)


def load_trust(path: Path | str) -> TrustFile:
    """Parse and validate a trust file (trust.toml), all of it; ConfigError when it is missing, not
    TOML, or breaks a rule of its model."""
    path = Path(path)
    return validate(
        TrustFile,
        _parse(
            path,
            "trust file",
            "restore trust.toml, which pins who may sign a release (`python -m pipeline key` prints the pin line)",
        ),
        path,
    )


def curriculum_file(cfg: ReleaseConfig) -> bytes | None:
    """The image's env/curriculum.json from `cfg`'s [curriculum]; None for the release.toml of a
    commit from before [curriculum] (its catalog held the cases in code)."""
    declared = cfg.declared_curriculum
    return declared.file_bytes() if declared is not None else None


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
