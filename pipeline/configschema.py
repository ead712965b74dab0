"""The one schema of release.toml and trust.toml: every table, its keys and their types.

Both loaders (`pipeline.config.load` and `pipeline.records.trust.load`) check a parsed file
against it before they read a value, so an unknown key (a misspelt one), a value of the
wrong type or a missing required key is refused with a ConfigError naming the file, the
table, the key and, for an unknown key, the nearest valid one. The loaders then check what
a type cannot say (a sha256 is 64 hex digits, a profile's `tasks` names a source, ...).

docs/release-toml.md is generated from it: `python -m pipeline.configschema >
docs/release-toml.md` (tests/test_configschema.py checks the committed page is the
generated one).
"""

from __future__ import annotations

import difflib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline import curriculum
from pipeline.errors import ConfigError

DOC_PAGE = "docs/release-toml.md"

# Scalar kinds: the name the page and the errors use, and whether a parsed value is one.
STRING, INTEGER, BOOLEAN, NUMBER, STRINGS = "string", "integer", "boolean", "number", "array of strings"
INTEGERS = "array of integers"
_IS = {
    STRING: lambda v: isinstance(v, str),
    INTEGER: lambda v: isinstance(v, int) and not isinstance(v, bool),
    BOOLEAN: lambda v: isinstance(v, bool),
    NUMBER: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    STRINGS: lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v),
    INTEGERS: lambda v: isinstance(v, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in v),
}
_WRITTEN = {STRING: 'a quoted string, "..."', INTEGER: "a whole number, unquoted",
            BOOLEAN: "true or false, unquoted", NUMBER: "a number, unquoted",
            STRINGS: 'an array of quoted strings, ["...", ...]',
            INTEGERS: "an array of whole numbers, unquoted, [1, 2, ...]"}


@dataclass(frozen=True)
class Table:
    """A table: its keys in the order the page lists them."""

    doc: str
    keys: dict[str, Key] = field(default_factory=dict)


@dataclass(frozen=True)
class Tables:
    """An array of tables, `[[name]]`."""

    table: Table


@dataclass(frozen=True)
class Named:
    """Tables under names the file chooses, `[name.<placeholder>]` (a profile's name, ...)."""

    table: Table
    placeholder: str


Kind = str | Table | Tables | Named


@dataclass(frozen=True)
class Key:
    kind: Kind
    doc: str
    required: bool = False


def req(kind: Kind, doc: str) -> Key:
    return Key(kind, doc, required=True)


def opt(kind: Kind, doc: str) -> Key:
    return Key(kind, doc)


# ------------------------------------------------------------------ release.toml

# The per-task budgets of the request, in the order of the request the platform accepted
# (docs/spec/mimo.md, "The Arena request and admission");
# pipeline.config.REQUEST_BUDGET_FIELDS.
REQUEST_BUDGETS = {
    "reset_wall_s": "wall-clock seconds a reset may take",
    "rollout_wall_s": "wall-clock seconds of a whole rollout",
    "verifier_wall_s": "wall-clock seconds of the grading",
    "tool_wall_s": "wall-clock seconds of one tool call (shell action)",
    "tool_calls_total": "tool calls of a rollout",
    "tool_calls_per_minute": "tool calls per minute",
    "completion_tokens": "completion tokens of the model",
    "context_tokens": "context tokens of the model",
    "memory_gib": "memory of the task's container, GiB",
    "cpu_floor_vcpus": "vCPUs the task's container is guaranteed",
    "workspace_gib": "workspace disk of a task, GiB (the platform's admission counts it)",
}
# Limits of the environment that are not request fields (recorded in provenance.json).
ENVIRONMENT_LIMITS = {
    "observation_tokens": "tokens of one observation (a limit of the environment, not a request field)",
}

PROFILE = Table(
    "A release profile, chosen with `--profile <name>` (`local` by default): where the image goes, "
    "what it is built from and how it is signed.",
    {
        "description": opt(STRING, "what the profile is for (messages only)"),
        "registry": req(STRING, 'the registry pushed to, or "local": the loopback registry the release starts'),
        "repository": req(STRING, "the image's repository in that registry"),
        "tag": req(STRING, "the image's tag"),
        "base": req(STRING, '"local" (built by `nox -s base`, pinned in locks/base.json) or an image '
                            "pinned by digest, `name@sha256:<64 hex>`"),
        "tasks": req(STRING, '"first-party" (env/families) or `vendor:<source>`, `<source>` naming the '
                             "[[sources]] entry whose file the image serves"),
        "signing": req(STRING, '"key" (Ed25519 release key) or "sigstore" (keyless)'),
        "external_tasks_required": req(BOOLEAN, "refuse to publish unless every external task verifies"),
        "submission_id": req(STRING, "the request's `submission_id`"),
        "dataset": req(STRING, "the Hugging Face dataset repository the request names, owner/name"),
        "publish_dataset": opt(BOOLEAN, "upload dist/dataset/ to `dataset` and read it back "
                                        "(HF_TOKEN); false when absent"),
    })

SOURCE = Table(
    "A pinned upstream file: fetched at a full commit id, checked against its sha256 and size, "
    "vendored with its licence.",
    {
        "name": req(STRING, "the entry's name (unique), as profiles' `tasks` and external tasks' "
                            "`reference` name it"),
        "repository": req(STRING, "the git repository's URL"),
        "revision": req(STRING, "the full commit id (40 lowercase hex digits; no branch, tag or short id)"),
        "path": req(STRING, "the file's path in the repository"),
        "sha256": req(STRING, "the file's sha256 (64 lowercase hex digits)"),
        "size": req(INTEGER, "the file's size in bytes"),
        "license": req(STRING, "the file's licence, an SPDX expression"),
        "license_file": req(STRING, "the licence file's path in the repository (another file name than `path`)"),
        "license_sha256": opt(STRING, 'the licence file\'s sha256; "" or absent: not pinned yet '
                                      "(`python -m pipeline vendor` prints it)"),
        "profiles": opt(STRINGS, "the profiles that vendor the file; none when absent"),
    })

EXTERNAL_TASK = Table(
    "One unchanged MiMo repair task of the request: its image, its record in the dataset and its "
    "reference repair.",
    {
        "task_id": req(STRING, "the task's id"),
        "image": req(STRING, "the task's image pinned by digest, `name@sha256:<64 hex>`"),
        "compressed_bytes": req(INTEGER, "the image's compressed size as its registry manifests declare it"),
        "after_block": req(INTEGER, "the block of procedural tasks the task follows in the request, "
                                    "1 to the number of [curriculum] blocks"),
        "split": req(STRING, "the dataset split holding the record (not the request's split)"),
        "row": req(INTEGER, "the record's row in that split (>= 0)"),
        "reference": req(STRING, "the [[sources]] entry of the task's reference repair script"),
        "record_sha256": opt(STRING, 'the sha256 of the record\'s text; "" or absent: not pinned yet '
                                     "(the first fetch reports it)"),
    })

EXTERNAL_REPAIR = Table(
    "Retired: ignored when present. A release.toml of a commit before its removal still loads "
    "(`reproduce` reads the recorded commit's file).",
    {
        "reset_id_field": opt(STRING, "retired: the reset keyword naming the task"),
        "workspace": opt(STRING, "retired: the repository the agent repairs"),
        "grader_paths": opt(STRINGS, "retired: the paths the agent's shell must not read"),
        "reference_field": opt(STRING, "retired: where a row held the reference repair"),
    })

EXTERNAL = Table(
    "The dataset the external tasks' records come from and how one of its rows is read.",
    {
        "dataset": req(STRING, "the Hugging Face dataset, owner/name"),
        "revision": req(STRING, "the dataset's commit id (40 lowercase hex digits)"),
        "license": req(STRING, "the dataset's licence, an SPDX expression"),
        "subset": opt(STRING, 'the dataset\'s subset (config); "default" when absent'),
        "id_field": opt(STRING, "the dotted path of the task id in a row; extra_info.instance_id when absent"),
        "record_field": opt(STRING, "the dotted path of the record (a JSON string) in a row; "
                                    "extra_info.instance_json when absent"),
        "hub_url": opt(STRING, "the Hub serving the dataset; https://huggingface.co when absent"),
        "rows_url": opt(STRING, "the dataset viewer's rows API; https://datasets-server.huggingface.co "
                                "when absent"),
        "repair": opt(EXTERNAL_REPAIR, "retired, ignored"),
        "tasks": opt(Tables(EXTERNAL_TASK), "the external tasks, in the request's order; none when absent"),
    })

CURRICULUM = Table(
    "The curriculum: which procedural cases (family, difficulty, seed) the image serves, in "
    "request order. An image input: the build writes the cases into the image "
    f"(`{curriculum.CURRICULUM_PATH}`), and the check suite, the request, tasks.jsonl and the "
    "dataset card follow them. The task modules limit the choice: the upstream generator "
    "vendored under vendor/ and the first-party env/families both implement "
    'docs/spec/families.md, "Module API" (pipeline/curriculum.py refuses anything else).',
    {
        "families": req(STRINGS, "the families, in their order within a block; each one of "
                                 + ", ".join(curriculum.TASK_FAMILIES)),
        "difficulties": req(INTEGERS, "the difficulties, each "
                                      + ", ".join(str(d) for d in curriculum.DIFFICULTIES)
                                      + " (what make_task accepts, upstream and first-party)"),
        "seeds": req(INTEGERS, "the seeds (>= 0) of the generator, in their order within a difficulty"),
        "blocks": req(STRING, '"difficulty-seed": one block per (difficulty, seed) pair, difficulties '
                              "outermost, each block one case per family"),
    })

BUDGET = Table(
    "The request's per-task budgets of one kind of task (procedural: this image's; external: the "
    "MiMo images'), and the environment's own limits.",
    {
        "split": req(STRING, "the request's split of every task of the kind"),
        **{k: req(INTEGER, doc) for k, doc in REQUEST_BUDGETS.items()},
        **{k: req(INTEGER, doc) for k, doc in ENVIRONMENT_LIMITS.items()},
    })

ENGINE = Table(
    "Extra flags of one container CLI (this machine's quirks); RELEASE_RUNTIME_<ENGINE>_GLOBAL_ARGS "
    "and RELEASE_RUNTIME_<ENGINE>_RUN_ARGS (shell-quoted; e.g. RELEASE_RUNTIME_DOCKER_RUN_ARGS) replace "
    "them, else RELEASE_RUNTIME_GLOBAL_ARGS and RELEASE_RUNTIME_RUN_ARGS replace every engine's.",
    {
        "global_args": opt(STRINGS, "flags before the subcommand; none when absent"),
        "run_args": opt(STRINGS, "flags of `run`; none when absent"),
    })

RELEASE = Table(
    "release.toml: the declarative release; every upstream input is pinned here. It is an input "
    "of the image (pipeline/inputs.py says which values reach it).",
    {
        "release": req(Table("What the image is: its name, where its code and interpreter are, its port.", {
            "name": req(STRING, "the environment's name"),
            "app_dir": req(STRING, "where the environment's code lives in the image (root-only)"),
            "python": req(STRING, "the image's Python interpreter"),
            "port": req(INTEGER, "the port the server listens on"),
            "source_url": req(STRING, "the repository of this project"),
        }), "the image"),
        "profiles": req(Named(PROFILE, "name"), "the release profiles, by name"),
        "curriculum": opt(CURRICULUM, "the procedural cases the image serves and the request lists; "
                                      "required to release (absent only in the release.toml of a "
                                      "commit before it, which `reproduce` rebuilds as it was)"),
        "dataset": req(Table(
            "The card's front matter of the dataset folder (dist/dataset/), and the Hub serving it.", {
                "hub_url": opt(STRING, "the Hub (HF_ENDPOINT overrides it); https://huggingface.co when absent"),
                "license_name": req(STRING, "the card's `license_name` (its licence is `other`)"),
                "license_link": req(STRING, "the card's `license_link`, where the terms are stated"),
                "language": req(STRINGS, "the card's languages (non-empty)"),
                "tags": req(STRINGS, "the card's tags (non-empty)"),
                "source_datasets": req(STRINGS, "the card's source datasets (non-empty; holding [external] "
                                                "`dataset`)"),
            }), "the release as a Hugging Face dataset"),
        "intoto": opt(Table("The in-toto layout of a release.", {
            "layout_valid_days": opt(INTEGER, "days a new layout is valid (> 0); 365 when absent"),
        }), "in-toto layout policy"),
        "sources": opt(Tables(SOURCE), "pinned upstream files; none when absent"),
        "external": req(EXTERNAL, "the external (MiMo) repair tasks and their dataset"),
        "budgets": req(Table("The request's per-task budgets, one table per kind of task.", {
            "procedural": req(BUDGET, "budgets of the procedural tasks (this image)"),
            "external": req(BUDGET, "budgets of the external tasks (the MiMo images)"),
        }), "per-task budgets"),
        "admission": opt(Table(
            "The platform's disk rule as the admission preflight applies it: compressed image + "
            "`workspace_gib` + headroom must fit the sandbox disk.", {
                "sandbox_disk_gib": opt(NUMBER, "the sandbox disk, GiB (> 0); 50 when absent"),
                "headroom_gib": opt(NUMBER, "the platform's headroom, GiB (> 0, below sandbox_disk_gib); "
                                            "24 when absent"),
            }), "admission preflight"),
        "runtime": opt(Table(
            "Which container CLI the pipeline drives, and this machine's quirks for it.", {
                "engine": opt(STRING, '"auto" (podman, always), "podman" or "docker" (the private Docker '
                                      'engine); RELEASE_RUNTIME_ENGINE overrides it; "auto" when absent'),
                "verify": opt(STRINGS, 'the engines the release runs the whole check suite under, in order, '
                                       'each once ("podman", "docker": the private Docker engine with '
                                       "Docker's defaults), and the audit holds the records to; "
                                       "RELEASE_RUNTIME_VERIFY (comma-separated) overrides it for `verify`, "
                                       'never for a release; ["podman", "docker"] when absent'),
                "health_timeout_s": opt(INTEGER, "seconds a started image has to answer /health (> 0); "
                                                 "120 when absent"),
                "podman": opt(ENGINE, "podman's flags"),
                "docker": opt(ENGINE, "docker's flags"),
            }), "container runtime"),
    })

# ------------------------------------------------------------------ trust.toml

TRUST = Table(
    "trust.toml (beside release.toml): who may sign a release, the audit's trust root. Not an "
    "image input: pinning a new key moves no image digest.",
    {
        "trust": opt(Named(Table(
            "The signers a profile's records may carry: pinned Ed25519 keyids and/or a sigstore "
            "identity with its issuer.", {
                "keyids": opt(STRINGS, "Ed25519 release keyids, 64 hex digits each (`python -m pipeline key` "
                                       "prints the line); none when absent"),
                "identity": opt(STRING, "the sigstore certificate identity; a trailing `*` matches a git ref "
                                        "name (goes with `issuer`)"),
                "issuer": opt(STRING, "the OIDC issuer of that identity (goes with `identity`)"),
            }), "profile"), "the trust root of each profile, by the profile's name"),
    })

FILES = {"release.toml": RELEASE, "trust.toml": TRUST}


# ------------------------------------------------------------------ checking


def _toml_type(value: Any) -> str:
    for kind, names in ((bool, "boolean"), (int, "integer"), (float, "float"), (str, "string"),
                        (list, "array"), (dict, "table")):
        if isinstance(value, kind):
            return names
    return "date-time"


def _kind_name(kind: Kind) -> str:
    if isinstance(kind, Table):
        return "table"
    if isinstance(kind, Tables):
        return "array of tables"
    if isinstance(kind, Named):
        return f"tables by {kind.placeholder}"
    return kind


def _label(where: str) -> str:
    """Where a key is: `in [profiles.arena]`, `in sources[1]` (an array's entry), `at the top level`."""
    if not where:
        return "at the top level"
    return f"in {where}" if where.endswith("]") else f"in [{where}]"


def _wrong_type(file: str, path: str, kind: Kind, value: Any) -> ConfigError:
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    key = path.rsplit(".", 1)[-1]
    if isinstance(kind, Table) or isinstance(kind, Named):
        hint = f"make it a table: [{path}]"
    elif isinstance(kind, Tables):
        hint = f"write each entry as a table: [[{path}]]"
    else:
        hint = f"write {key} as {_WRITTEN[kind]}"
    return ConfigError(f"{file}: {path} has the wrong type", expected=_kind_name(kind),
                       actual=f"{_toml_type(value)} {shown}", hint=hint)


def _value(value: Any, kind: Kind, file: str, path: str) -> None:
    if isinstance(kind, str):
        if not _IS[kind](value):
            raise _wrong_type(file, path, kind, value)
    elif isinstance(kind, Table):
        if not isinstance(value, dict):
            raise _wrong_type(file, path, kind, value)
        check(value, kind, file, path)
    elif isinstance(kind, Tables):
        if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
            raise _wrong_type(file, path, kind, value)
        for i, t in enumerate(value):
            check(t, kind.table, file, f"{path}[{i}]")
    else:
        if not isinstance(value, dict):
            raise _wrong_type(file, path, kind, value)
        for name, t in value.items():
            if not isinstance(t, dict):
                raise _wrong_type(file, f"{path}.{name}", kind.table, t)
            check(t, kind.table, file, f"{path}.{name}")


def check(data: dict[str, Any], table: Table, file: Path | str, where: str = "") -> None:
    """Refuse the first unknown key, missing required key or value of the wrong type of
    `data` (table `where` of `file`, "" for the file itself) and of every table in it."""
    file = str(file)
    for key in data:
        if key not in table.keys:
            close = difflib.get_close_matches(key, list(table.keys), n=1, cutoff=0.6)
            hint = (f"did you mean `{close[0]}`? rename it" if close else "remove it") + \
                   f" ({DOC_PAGE} lists every table and key)"
            raise ConfigError(f"{file}: unknown key {key!r} {_label(where)}",
                              expected="one of " + ", ".join(table.keys), actual=key, hint=hint)
    for key, spec in table.keys.items():
        if spec.required and key not in data:
            path = f"{where}.{key}" if where else key
            if isinstance(spec.kind, (Table, Named)):
                hint = f"add the table [{path}] ({spec.doc})"
            elif isinstance(spec.kind, Tables):
                hint = f"add [[{path}]] entries ({spec.doc})"
            else:
                hint = f"add {key} = <{spec.kind}>: {spec.doc}"
            raise ConfigError(f"{file}: {where + ': ' if where else ''}missing key {key!r}", hint=hint)
    for key, value in data.items():
        _value(value, table.keys[key].kind, file, f"{where}.{key}" if where else key)


# ------------------------------------------------------------------ the page


def _sections(table: Table, path: str, out: list[tuple[str, Table]]) -> None:
    """(heading, table) of `table` and every table below it, depth first in key order."""
    out.append((path, table))
    for key, spec in table.keys.items():
        sub = f"{path}.{key}" if path else key
        if isinstance(spec.kind, Table):
            _sections(spec.kind, sub, out)
        elif isinstance(spec.kind, Tables):
            _sections(spec.kind.table, f"[{sub}]", out)
        elif isinstance(spec.kind, Named):
            _sections(spec.kind.table, f"{sub}.<{spec.kind.placeholder}>", out)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown() -> str:
    """docs/release-toml.md: every table of both files, its keys, their types and meaning."""
    lines = [
        "# release.toml and trust.toml",
        "",
        "<!-- Generated from pipeline/configschema.py by `python -m pipeline.configschema > "
        "docs/release-toml.md`; do not edit by hand (tests/test_configschema.py checks it). -->",
        "",
        "Both files are checked against this schema when they are loaded: an unknown key (a "
        "misspelt one), a value of the wrong type or a missing required key is refused, naming "
        "the file, the table, the key and the nearest valid key. `<name>` and `<profile>` stand "
        "for a profile's name. The loaders then check the values (a sha256 is 64 "
        "lowercase hex digits, a profile's `tasks` names a source, ...).",
    ]
    for file, schema in FILES.items():
        lines += ["", f"## {file}", ""]
        sections: list[tuple[str, Table]] = []
        _sections(schema, "", sections)
        headings: dict[int, list[str]] = {}
        for heading, table in sections:
            headings.setdefault(id(table), []).append(heading)
        done: set[int] = set()
        for heading, table in sections:
            if id(table) in done:
                continue
            done.add(id(table))
            if heading:
                lines += ["", "### " + ", ".join(f"`[{h}]`" for h in headings[id(table)]), ""]
            lines += [table.doc, "", "| key | type | required or optional | description |", "|---|---|---|---|"]
            lines += [f"| `{key}` | {_kind_name(spec.kind)} | {'required' if spec.required else 'optional'} "
                      f"| {_cell(spec.doc)} |" for key, spec in table.keys.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
