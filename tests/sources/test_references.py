"""The reference repairs: pinned upstream scripts, vendored by the arena profile from a
mirror of the seed's repository (a real git repository made here; GitHub is the public
internet), handed to the repair checks with their source name, path and bytes."""

from __future__ import annotations

import pytest

from pipeline import config, plan
from pipeline._io import sha256_bytes
from pipeline.errors import DigestMismatch
from pipeline.image.payload import VendoredTaskFile, app_layers
from pipeline.sources import vendor
from pipeline.sources.references import reference_scripts

from .conftest import commit_files, run_git

SCRIPTS = {
    "format-code-task-000666": b"from pathlib import Path\nprint('repair 000666')\n",
    "format-code-task-001926": b"print('repair 001926')\n",
}
NOTICE = b"Stand-in NOTICE of the seed repository (tests only).\n"


def _seed_repository(tmp_path):
    """github.com/akseljoonas/mimo-openenv-software, mirrored: solutions/ and NOTICE."""
    work = tmp_path / "mirror" / "github.com" / "akseljoonas" / "mimo-openenv-software"
    work.mkdir(parents=True)
    run_git("init", "-q", "-b", "main", cwd=work)
    files = {f"solutions/{t}.py": data for t, data in SCRIPTS.items()}
    revision = commit_files(work, {**files, "NOTICE": NOTICE}, "solutions")
    return tmp_path / "mirror", revision


def _cfg(revision: str):
    """release.toml with the reference sources pinned to the stand-in repository's bytes."""
    cfg = config.load()
    sources = []
    for s in cfg.sources:
        if s.name.startswith("mimo-reference-"):
            data = SCRIPTS["format-code-task-" + s.name.rsplit("-", 1)[1]]
            s = s.model_copy(
                update=dict(
                    revision=revision, sha256=sha256_bytes(data), size=len(data), license_sha256=sha256_bytes(NOTICE)
                )
            )
        sources.append(s)
    return cfg.model_copy(update={"sources": tuple(sources)})


def test_release_toml_pins_the_seed_reference_scripts():
    cfg = config.load()
    pins = {t.task_id: cfg.source(t.reference) for t in cfg.external.tasks}
    assert {
        t: (s.revision, s.path, s.size, s.sha256, s.license_file, s.license_sha256, s.profiles) for t, s in pins.items()
    } == {
        "format-code-task-000666": (
            "7763f6515b7876e45381333f566d98f43995d888",
            "solutions/format-code-task-000666.py",
            480,
            "83966abd68ca8a87f4dbc56d7f21ce91f4045c50512bc2cd4a9071d488595b81",
            "NOTICE",
            "bd878bbb2929e2bc6c244f9c2ac988687849a09702c802277b50889f50bed69f",
            ("arena",),
        ),
        "format-code-task-001926": (
            "7763f6515b7876e45381333f566d98f43995d888",
            "solutions/format-code-task-001926.py",
            1027,
            "2a88f9f883de4c10337fb6826902a309e954a10a6339871e0106f17155e15cb1",
            "NOTICE",
            "bd878bbb2929e2bc6c244f9c2ac988687849a09702c802277b50889f50bed69f",
            ("arena",),
        ),
    }
    assert {s.repository for s in pins.values()} == {"https://github.com/akseljoonas/mimo-openenv-software"}


def test_arena_vendors_the_scripts_and_hands_them_to_the_checks(tmp_path):
    mirror, revision = _seed_repository(tmp_path)
    cfg = _cfg(revision)
    rp = plan.resolve(cfg, "arena")
    wanted = [s for s in rp.sources if s.name.startswith("mimo-reference-")]
    out = tmp_path / "vendor"
    vendor.vendor(wanted, out, mirror=mirror, cache_root=tmp_path / "cache")
    scripts = reference_scripts(cfg, rp.sources, out)
    assert list(scripts) == ["format-code-task-000666", "format-code-task-001926"]
    script, why = scripts["format-code-task-001926"]
    assert why == "" and script.script == SCRIPTS["format-code-task-001926"]
    assert (script.source, script.path) == (
        "mimo-reference-001926",
        out / "mimo-reference-001926" / "format-code-task-001926.py",
    )
    assert script.sha256 == sha256_bytes(SCRIPTS["format-code-task-001926"])
    assert (out / "mimo-reference-001926" / "NOTICE").read_bytes() == NOTICE
    # A vendored script edited afterwards is tampering: refused, never handed over.
    script.path.chmod(0o644)
    script.path.write_bytes(script.script.replace(b"repair", b"break"))
    with pytest.raises(DigestMismatch, match="mimo-reference-001926"):
        reference_scripts(cfg, rp.sources, out)


def test_scripts_not_vendored_say_why(tmp_path):
    cfg = config.load()
    local = reference_scripts(cfg, plan.resolve(cfg, "local").sources, tmp_path)
    assert local["format-code-task-000666"] == (
        None,
        "reference source mimo-reference-000666 is not vendored by this profile",
    )
    arena = reference_scripts(cfg, plan.resolve(cfg, "arena").sources, tmp_path)
    script, why = arena["format-code-task-000666"]
    assert script is None and "vendored file of source mimo-reference-000666 is missing" in why


def test_the_image_payload_never_holds_the_reference_scripts(tmp_path):
    """The arena image's layers come from the checkout and the served task file only: the
    vendored reference scripts (inputs of the checks) are in none of them."""
    cfg = config.load()
    vendored = tmp_path / "vendor"
    for name, data in (
        ("metaharness-tasks/tasks.py", b"TASKS = []\n"),
        ("metaharness-tasks/LICENSE", b"MIT\n"),
        ("mimo-reference-000666/format-code-task-000666.py", b"print(1)\n"),
    ):
        (vendored / name).parent.mkdir(parents=True, exist_ok=True)
        (vendored / name).write_bytes(data)
    task_file = VendoredTaskFile(
        "metaharness-tasks", vendored / "metaharness-tasks/tasks.py", vendored / "metaharness-tasks/LICENSE"
    )
    layers = app_layers(config.REPO_ROOT, cfg.app_dir, task_file, config.curriculum_file(cfg))
    paths = [e.path for layer in layers for e in layer.entries]
    assert any(p.endswith("vendor/metaharness-tasks/tasks.py") for p in paths)
    assert not [p for p in paths if "mimo-reference" in p or p.endswith(".py") and "solutions" in p]
