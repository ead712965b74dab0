"""release.toml and trust.toml are one typed model (pipeline.config): an unknown key, a value
of the wrong type, a missing required key or a value that breaks its rule is refused with the
file, the table, the key and the nearest valid key; the committed files load; docs/release-toml.md
is the page generated from the model (pipeline.configschema).

The cases are made from the committed files (every table and key in them), not from the
schema, so a table or key the schema forgets or gets wrong fails here.
"""

from __future__ import annotations

import copy
import re
import shutil
import tomllib
from pathlib import Path

import pytest
import tomli_w

from pipeline import config, configschema
from pipeline.errors import ConfigError
from pipeline.records import trust

REPO = Path(__file__).resolve().parent.parent
RELEASE = tomllib.loads((REPO / "release.toml").read_text())
TRUST = tomllib.loads((REPO / "trust.toml").read_text())
# Tables whose keys are names the file chooses (a profile's): any name is accepted.
NAMED = {"profiles", "trust"}
# The keys of the committed files that may be left out, as `normal` writes their paths.
OPTIONAL = {
    "intoto",
    "intoto.layout_valid_days",
    "curriculum",
    "sources",
    "sources[].license_sha256",
    "sources[].profiles",
    "profiles.<name>.description",
    "profiles.<name>.publish_dataset",
    "dataset.hub_url",
    "external.subset",
    "external.id_field",
    "external.record_field",
    "external.hub_url",
    "external.rows_url",
    "external.tasks",
    "external.tasks[].record_sha256",
    "admission",
    "admission.sandbox_disk_gib",
    "admission.headroom_gib",
    "runtime",
    "runtime.engine",
    "runtime.health_timeout_s",
    "runtime.verify",
    "runtime.podman",
    "runtime.docker",
    "runtime.podman.global_args",
    "runtime.podman.run_args",
    "runtime.docker.global_args",
    "runtime.docker.run_args",
    "trust",
    "trust.<name>.keyids",
    "trust.<name>.identity",
    "trust.<name>.issuer",
}


def tables(data: dict, where: str = ""):
    """(where, table) of every table in a parsed file, the file itself first ("")."""
    yield where, data
    for key, value in data.items():
        path = f"{where}.{key}" if where else key
        if isinstance(value, dict):
            yield from tables(value, path)
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for i, entry in enumerate(value):
                yield from tables(entry, f"{path}[{i}]")


def keys(data: dict):
    """(where, key) of every key of every table, but the names of NAMED tables."""
    return [(where, key) for where, table in tables(data) if where not in NAMED for key in table]


def normal(path: str) -> str:
    """`sources[1].size` -> `sources[].size`, `profiles.arena.tag` -> `profiles.<name>.tag`."""
    path = re.sub(r"\[\d+\]", "[]", path)
    return re.sub(r"^(profiles|trust)\.[^.]+", r"\1.<name>", path)


def table_at(data: dict, where: str) -> dict:
    for part in filter(None, re.split(r"\.|(?=\[)", where)):
        data = data[int(part[1:-1])] if part.startswith("[") else data[part]
    return data


def label(where: str) -> str:
    return "at the top level" if not where else f"in {where}" if where.endswith("]") else f"in [{where}]"


def misspelt(key: str) -> str:
    """A typo: the key without its second-to-last letter (`publish_dataset` -> `publish_datast`)."""
    return key[:-2] + key[-1]


def edited(data: dict, where: str, edit) -> dict:
    data = copy.deepcopy(data)
    edit(table_at(data, where))
    return data


@pytest.fixture
def checkout(tmp_path):
    """A directory holding copies of the committed release.toml and trust.toml."""
    for name in ("release.toml", "trust.toml"):
        shutil.copy(REPO / name, tmp_path / name)
    return tmp_path


def load_both(root: Path) -> None:
    cfg = config.load(root / "release.toml")
    for profile in cfg.profiles:
        trust.pins(cfg, profile)


def refused(root: Path, name: str, data: dict) -> ConfigError:
    (root / name).write_text(tomli_w.dumps(data))
    with pytest.raises(ConfigError) as err:
        load_both(root)
    return err.value


FILES = {"release.toml": RELEASE, "trust.toml": TRUST}
CASES = [(name, where, key) for name, data in FILES.items() for where, key in keys(data)]
IDS = [f"{name}:{where}.{key}".replace(":.", ":") for name, where, key in CASES]


def test_the_committed_files_load_and_every_one_of_their_tables_is_covered():
    cfg = config.load(REPO / "release.toml")
    assert cfg.profile("arena").publish_dataset is True and cfg.profile("local").publish_dataset is False
    assert [s.name for s in cfg.sources] == ["metaharness-tasks", "mimo-reference-000666", "mimo-reference-001926"]
    assert set(cfg.budgets) == {"procedural", "external"} and cfg.runtime.health_timeout_s == 120
    assert trust.pins(cfg, "local").keyids and trust.pins(cfg, "arena").issuer
    # Every table the committed files have is among the cases below (sources and external
    # tasks by each entry), and the retired [external.repair] is too (test_the_retired_...).
    where = {normal(w) for name, w, _ in CASES}
    assert {
        "",
        "release",
        "profiles.<name>",
        "dataset",
        "intoto",
        "sources[]",
        "external",
        "external.tasks[]",
        "budgets",
        "budgets.procedural",
        "budgets.external",
        "admission",
        "runtime",
        "runtime.podman",
        "runtime.docker",
        "trust.<name>",
    } <= where


@pytest.mark.parametrize("name, where, key", CASES, ids=IDS)
def test_a_misspelt_key_is_refused_naming_file_table_key_and_the_right_key(checkout, name, where, key):
    """A typo anywhere, e.g. `publish_datset = true` in [profiles.arena], which used to load as
    `publish_dataset = false`."""
    typo = misspelt(key)
    assert typo not in table_at(FILES[name], where)
    err = refused(checkout, name, edited(FILES[name], where, lambda t: t.__setitem__(typo, t.pop(key))))
    assert err.what == f"{checkout / name}: unknown key {typo!r} {label(where)}"
    assert err.actual == typo and key in err.expected
    assert err.hint.startswith(f"did you mean `{key}`? rename it")
    assert configschema.DOC_PAGE in err.hint
    assert f"{checkout / name}: unknown key {typo!r} {label(where)}; expected one of " in str(err)


def test_an_unlike_key_is_refused_without_a_suggestion(checkout):
    err = refused(checkout, "release.toml", edited(RELEASE, "profiles.arena", lambda t: t.__setitem__("zzz", 1)))
    assert err.what.endswith("unknown key 'zzz' in [profiles.arena]")
    assert err.hint.startswith("remove it") and "did you mean" not in err.hint


def test_the_retired_repair_table_loads_and_refuses_what_it_never_had(checkout):
    """[external.repair] of a commit before its removal (reproduce reads that commit's file)."""
    old = {
        "reset_id_field": "task_id",
        "workspace": "/workspace/repo",
        "grader_paths": ["/opt/arena"],
        "reference_field": "x",
    }
    (checkout / "release.toml").write_text(
        tomli_w.dumps(edited(RELEASE, "external", lambda t: t.__setitem__("repair", old)))
    )
    assert config.load(checkout / "release.toml").external == config.load(REPO / "release.toml").external
    err = refused(
        checkout,
        "release.toml",
        edited(RELEASE, "external", lambda t: t.__setitem__("repair", {**old, "workspce": "/w"})),
    )
    assert err.what.endswith("unknown key 'workspce' in [external.repair]")
    assert err.hint.startswith("did you mean `workspace`?")


def _other_type(value):
    """A value of another TOML type than `value`."""
    if isinstance(value, str):
        return 1
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return {"a": 1}
    return "x" if not isinstance(value, dict) else ["x"]


@pytest.mark.parametrize("name, where, key", CASES, ids=IDS)
def test_a_value_of_the_wrong_type_is_refused(checkout, name, where, key):
    value = table_at(FILES[name], where)[key]
    wrong = _other_type(value)
    err = refused(checkout, name, edited(FILES[name], where, lambda t: t.__setitem__(key, wrong)))
    path = f"{where}.{key}" if where else key
    assert err.what == f"{checkout / name}: {path} has the wrong type"
    assert err.actual.startswith({int: "integer", str: "string", dict: "table", list: "array"}[type(wrong)])


@pytest.mark.parametrize(
    "where, key, value, expected, actual",
    [
        ("profiles.arena", "publish_dataset", "true", "boolean", "string 'true'"),
        ("release", "port", "8000", "integer", "string '8000'"),
        ("release", "port", True, "integer", "boolean True"),
        ("sources[0]", "size", 1.5, "integer", "float 1.5"),
        ("admission", "headroom_gib", True, "number", "boolean True"),
        ("dataset", "language", ["en", 1], "array of strings", "array ['en', 1]"),
        ("runtime.podman", "run_args", "--ulimit x", "array of strings", "string '--ulimit x'"),
        ("profiles", "arena", "x", "table", "string 'x'"),
    ],
)
def test_wrong_types_name_toml_types(checkout, where, key, value, expected, actual):
    err = refused(checkout, "release.toml", edited(RELEASE, where, lambda t: t.__setitem__(key, value)))
    assert (err.expected, err.actual) == (expected, actual)
    assert err.hint and str(checkout / "release.toml") in err.what


@pytest.mark.parametrize("name, where, key", CASES, ids=IDS)
def test_a_missing_required_key_is_refused_and_an_optional_one_is_not(checkout, name, where, key):
    data = edited(FILES[name], where, lambda t: t.pop(key))
    path = f"{where}.{key}" if where else key
    (checkout / name).write_text(tomli_w.dumps(data))
    if normal(path) in OPTIONAL:
        try:
            load_both(checkout)
        except ConfigError as exc:  # a check of the values may need it, never the schema
            assert "missing key" not in exc.what
        return
    err = refused(checkout, name, data)
    assert err.what == f"{checkout / name}: {where + ': ' if where else ''}missing key {key!r}"
    assert err.hint.startswith("add ")


def test_the_old_messages_still_match(checkout):
    """The missing-key message keeps its old form after the file (tests/sources match on it)."""
    text = (REPO / "release.toml").read_text().replace("row = 2610\n", "")
    (checkout / "release.toml").write_text(text)
    with pytest.raises(ConfigError, match=r"external.tasks\[1\]: missing key 'row'"):
        config.load(checkout / "release.toml")


def test_trust_toml_is_checked_by_its_loader(checkout):
    text = (REPO / "trust.toml").read_text().replace("keyids = [", "keyid = [")
    (checkout / "trust.toml").write_text(text)
    with pytest.raises(
        ConfigError,
        match=r"trust.toml: unknown key 'keyid' in \[trust.local\]; .*"
        r"did you mean `keyids`\?",
    ):
        trust.load(checkout / "trust.toml")


def test_budget_fields_come_from_the_schema_in_the_requests_order():
    assert config.REQUEST_BUDGET_FIELDS == (
        "reset_wall_s",
        "rollout_wall_s",
        "verifier_wall_s",
        "tool_wall_s",
        "tool_calls_total",
        "tool_calls_per_minute",
        "completion_tokens",
        "context_tokens",
        "memory_gib",
        "cpu_floor_vcpus",
        "workspace_gib",
    )
    assert config.BUDGET_FIELDS == config.REQUEST_BUDGET_FIELDS + ("observation_tokens",)


def test_the_committed_page_is_the_generated_one():
    page = REPO / configschema.DOC_PAGE
    assert page.read_text() == configschema.markdown(), (
        f"{configschema.DOC_PAGE} is stale: `python -m pipeline.configschema > {configschema.DOC_PAGE}`"
    )
    # Every table and key of the committed files is on it.
    for name, where, key in CASES:
        assert f"| `{key}` |" in page.read_text(), f"{name}: {where}.{key} is not documented"


# ------------------------------------------------------------------ value rules, in the model


@pytest.mark.parametrize(
    "name, where, key, value, says, expected",
    [
        ("release.toml", "intoto", "layout_valid_days", 0, "intoto.layout_valid_days is out of range", "> 0"),
        ("release.toml", "runtime", "health_timeout_s", 0, "runtime.health_timeout_s is out of range", "> 0"),
        ("release.toml", "release", "port", 0, "release.port is out of range", "> 0"),
        ("release.toml", "admission", "sandbox_disk_gib", 0, "admission.sandbox_disk_gib is out of range", "> 0"),
        (
            "release.toml",
            "admission",
            "headroom_gib",
            60,
            "admission.headroom_gib leaves no room in the sandbox disk",
            "less than sandbox_disk_gib (50)",
        ),
        ("release.toml", "external.tasks[0]", "row", -1, "external.tasks[0].row is out of range", ">= 0"),
        ("release.toml", "budgets.external", "memory_gib", 0, "budgets.external.memory_gib is out of range", "> 0"),
        ("release.toml", "sources[1]", "sha256", "abc", "sources[1].sha256 is not a sha256", "64 lowercase hex digits"),
        (
            "release.toml",
            "sources[0]",
            "revision",
            "main",
            "sources[0].revision is a moving ref (branch or tag name), not a full commit id",
            "40 lowercase hex digits",
        ),
        (
            "release.toml",
            "external.tasks[1]",
            "image",
            "ghcr.io/x:latest",
            "external.tasks[1].image must be pinned by digest",
            "name@sha256:<64 hex>",
        ),
        (
            "release.toml",
            "runtime",
            "engine",
            "lxc",
            "runtime.engine is not a container engine",
            "auto or podman or docker",
        ),
        (
            "release.toml",
            "runtime",
            "verify",
            ["podman", "podman"],
            "runtime.verify is not a list of the engines to verify under",
            "each of podman, docker at most once, at least one",
        ),
        (
            "release.toml",
            "profiles.arena",
            "signing",
            "gpg",
            "profiles.arena.signing is not a signing method",
            "key or sigstore",
        ),
        (
            "release.toml",
            "dataset",
            "tags",
            [],
            "dataset.tags must not be empty",
            "a non-empty list of non-empty strings",
        ),
        (
            "trust.toml",
            "trust.local",
            "keyids",
            ["dd46"],
            "trust.local.keyids[0] holds a value that is not a keyid",
            "64 lowercase hex digits",
        ),
    ],
)
def test_a_value_out_of_its_rule_is_refused_naming_file_and_key(checkout, name, where, key, value, says, expected):
    err = refused(checkout, name, edited(FILES[name], where, lambda t: t.__setitem__(key, value)))
    assert err.what == f"{checkout / name}: {says}"
    assert err.expected == expected and err.hint
    assert "expected None" not in str(err)


def test_identity_without_issuer_is_refused(checkout):
    err = refused(checkout, "trust.toml", edited(TRUST, "trust.arena", lambda t: t.pop("issuer")))
    assert err.what == f"{checkout / 'trust.toml'}: trust.arena: identity and issuer go together"
    assert str(err).count("expected") == 0 and "got identity=" in str(err)


def test_the_model_is_frozen_and_has_no_raw_escape():
    cfg = config.load()
    assert not hasattr(cfg, "raw")
    with pytest.raises(Exception, match="frozen"):
        cfg.runtime.health_timeout_s = 1  # type: ignore[misc]
    # The defaults of absent keys come from the model: one place each.
    assert config.External.model_fields["hub_url"].default == config.DatasetConfig.model_fields["hub_url"].default


def test_every_key_of_the_model_is_documented():
    """Adding a key is adding a field; the page needs its description."""
    undocumented = [
        f"{model.__name__}.{key}"
        for model in _tables(config.ReleaseConfig) | _tables(config.TrustFile)
        for key, (_, field) in model.keys().items()
        if not field.description
    ]
    assert undocumented == []
    assert all(model.__doc__ for model in _tables(config.ReleaseConfig) | _tables(config.TrustFile))


def _tables(model) -> set:
    found = {model}
    for _, field in model.keys().values():
        table = config.kind_of(field).table
        if table is not None:
            found |= _tables(table)
    return found
