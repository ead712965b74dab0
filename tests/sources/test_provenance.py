"""provenance.json: project revision from a real checkout, dirty-tree refusal, determinism."""

from __future__ import annotations

import dataclasses
import json
import platform
import zlib

import pytest

from pipeline import config, plan
from pipeline import inputs as image_inputs
from pipeline._io import sha256_bytes
from pipeline.config import REPO_ROOT
from pipeline.errors import ConfigError, SourceError
from pipeline.image import base as base_mod
from pipeline.records import provenance
from pipeline.sources import dataset as external
from pipeline.sources import vendor as sources

from .conftest import commit_files, run_git

BASE = provenance.Base(name="ghcr.io/example/base", digest="sha256:" + "ab" * 32)


@pytest.fixture
def project(tmp_path):
    """A committed project checkout with a wheel lock and ignored local state."""
    repo = tmp_path / "project"
    repo.mkdir()
    run_git("init", "-q", "-b", "main", cwd=repo)
    commit_files(
        repo,
        {
            ".gitignore": b".release/\nvendor/\n",
            "locks/runtime.txt": b"pkg==1 --hash=sha256:00\n",
            "env/app.py": b"print('hi')\n",
        },
        "project",
    )
    return repo


def _records(upstream, tmp_path):
    # Hugging Face replaced by a closed loopback port: the records are "not fetched".
    cfg = config.load()
    closed = "http://127.0.0.1:9"
    cfg = cfg.model_copy(update={"external": cfg.external.model_copy(update={"hub_url": closed, "rows_url": closed})})
    vendored = (
        sources.vendor_source(upstream.source(upstream.file_url), tmp_path / "vendor", cache_root=tmp_path / "cache"),
    )
    ext = external.fetch_records(cfg, plan.resolve(cfg, "local").external, tmp_path / "vendor")
    return cfg, vendored, ext


def test_project_revision_of_a_clean_checkout(project):
    rev = provenance.project_revision(project)
    assert rev.commit == run_git("rev-parse", "HEAD", cwd=project)
    assert rev.tree == run_git("rev-parse", "HEAD^{tree}", cwd=project)
    assert (rev.dirty, rev.dirty_paths, rev.allow_dirty) == (False, (), False)


@pytest.mark.parametrize("change", ["modify", "untracked", "staged"])
def test_dirty_checkout_is_refused_unless_allowed(project, change):
    if change == "modify":
        (project / "env/app.py").write_bytes(b"print('changed')\n")
    elif change == "untracked":
        (project / "env/new.py").write_bytes(b"x = 1\n")
    else:
        (project / "env/app.py").write_bytes(b"print('staged')\n")
        run_git("add", "env/app.py", cwd=project)
    with pytest.raises(SourceError, match="checkout is dirty") as info:
        provenance.project_revision(project)
    assert "env/" in info.value.one_line()
    rev = provenance.project_revision(project, allow_dirty=True)
    assert rev.dirty and rev.allow_dirty and rev.dirty_paths[0].startswith("env/")


def test_ignored_state_and_release_outputs_do_not_make_it_dirty(project):
    (project / ".release").mkdir()
    (project / ".release/key").write_bytes(b"k")
    (project / "provenance.json").write_bytes(b"{}")
    (project / "attestations").mkdir()
    (project / "attestations/x.json").write_bytes(b"{}")
    assert not provenance.project_revision(project).dirty


def test_not_a_checkout_is_refused(tmp_path):
    (tmp_path / "plain").mkdir()
    with pytest.raises(SourceError, match="not a git checkout"):
        provenance.project_revision(tmp_path / "plain")


def _inputs(repo):
    return image_inputs.image_inputs(repo, "local")


def test_source_date_epoch_is_the_image_input_commit_time_unless_overridden(project, monkeypatch):
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    assert provenance.source_date_epoch(_inputs(project)) == 1_700_000_000
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1234")
    assert provenance.source_date_epoch(_inputs(project)) == 1234
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(ConfigError, match="SOURCE_DATE_EPOCH"):
        provenance.source_date_epoch(_inputs(project))


def test_image_inputs_are_the_last_commit_of_an_input_so_records_move_nothing(project):
    first = _inputs(project)
    assert first.commit == run_git("rev-parse", "HEAD", cwd=project)
    assert first.paths == image_inputs.COUNTED
    commit_files(project, {"provenance.json": b"{}\n", "README.md": b"notes\n"}, "records")
    assert _inputs(project) == first
    changed = commit_files(project, {"env/app.py": b"print('bye')\n"}, "an input changes")
    assert _inputs(project).commit == changed


def test_missing_wheel_lock_is_refused(project):
    (project / "locks/runtime.txt").unlink()
    with pytest.raises(SourceError, match="wheel lock is missing"):
        provenance.wheel_lock(project)


def test_provenance_is_complete_deterministic_and_round_trips(project, upstream, tmp_path, monkeypatch):
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    cfg, vendored, ext = _records(upstream, tmp_path)
    profile = "arena"
    first = provenance.assemble(project, profile, base=BASE, sources=vendored, external=ext, inputs=_inputs(project))
    provenance.write(tmp_path / "a.json", first)
    second = provenance.assemble(project, profile, base=BASE, sources=vendored, external=ext, inputs=_inputs(project))
    provenance.write(tmp_path / "b.json", second)
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert provenance.load(tmp_path / "a.json") == first

    data = json.loads((tmp_path / "a.json").read_bytes())
    assert data["profile"] == "arena" and data["source_date_epoch"] == 1_700_000_000
    assert data["base"] == {"name": BASE.name, "digest": BASE.digest}
    assert data["wheel_lock"] == {"path": "locks/runtime.txt", "sha256": sha256_bytes(b"pkg==1 --hash=sha256:00\n")}
    toolchain = data["builder"].pop("toolchain")
    assert data["builder"] == {
        "pipeline_version": "0.1.0",
        "python_version": platform.python_version(),
        "zlib_version": zlib.ZLIB_RUNTIME_VERSION,
    }
    # The builder's toolchain: this environment's distributions, each with the file uv.lock pins.
    assert {"sigstore", "cyclonedx-python-lib", "in-toto"} <= {d["name"] for d in toolchain}
    assert all(
        len(d["sha256"]) == 64
        and d["file"].startswith(d["name"].replace("-", "_"))
        or d["file"].lower().startswith(d["name"])
        for d in toolchain
    )
    src = data["sources"][0]
    assert src["revision"] == upstream.revision and src["license_sha256"] == vendored[0].license_sha256
    assert {e["task_id"] for e in data["external"]} == {t.task_id for t in cfg.external.tasks}
    assert data["external"][0]["status"] == "not fetched"
    assert data["project"]["commit"] == run_git("rev-parse", "HEAD", cwd=project)


def test_dirty_release_is_recorded_when_allowed(project, upstream, tmp_path):
    cfg, vendored, ext = _records(upstream, tmp_path)
    (project / "env/app.py").write_bytes(b"print('changed')\n")
    with pytest.raises(SourceError, match="dirty"):
        provenance.assemble(project, "local", base=BASE, sources=vendored, external=ext, inputs=_inputs(project))
    record = provenance.assemble(
        project, "local", base=BASE, sources=vendored, external=ext, allow_dirty=True, inputs=_inputs(project)
    )
    provenance.write(tmp_path / "p.json", record)
    data = json.loads((tmp_path / "p.json").read_bytes())
    assert data["project"]["dirty"] is True and data["project"]["allow_dirty"] is True
    assert data["project"]["dirty_paths"] == ["env/app.py"]


def test_load_refuses_a_foreign_or_edited_record(project, upstream, tmp_path):
    cfg, vendored, ext = _records(upstream, tmp_path)
    record = provenance.assemble(project, "local", base=BASE, sources=vendored, external=ext, inputs=_inputs(project))
    path = tmp_path / "p.json"
    provenance.write(path, record)
    data = json.loads(path.read_bytes())
    data["base"]["extra"] = "x"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="base has unexpected fields"):
        provenance.load(path)
    path.write_text(json.dumps({"schema": "something/else"}))
    with pytest.raises(ConfigError, match="not a provenance record"):
        provenance.load(path)


def test_local_base_records_the_lock_it_was_built_from(project, upstream, tmp_path):
    """The locally built base: its digest, and what locks/base.json says it was made from (the
    snapshot it is named after, the .debs that pin it and the mirror they came from)."""
    lock = (REPO_ROOT / "locks" / "base.json").read_bytes()
    raw = json.loads(lock)
    commit_files(project, {"locks/base.json": lock}, "the base lock")
    base = provenance.local_base(project, raw["name"], raw["digest"])
    origin = base.built_from
    assert (base.name, base.digest) == (raw["name"], raw["digest"])
    assert origin.packages_pinned_by == "locks/base.json" and origin.lock_sha256 == sha256_bytes(lock)
    assert (origin.debian_suite, origin.named_after_snapshot) == ("bookworm", base_mod.SNAPSHOT)
    assert origin.debs == len(raw["debs"]) and origin.packages_from == raw.get("debian_mirror")
    assert f"not from snapshot {base_mod.SNAPSHOT}, which the base is only named after" in origin.statement
    _, vendored, ext = _records(upstream, tmp_path)
    record = provenance.assemble(project, "local", base=base, sources=vendored, external=ext, inputs=_inputs(project))
    provenance.write(tmp_path / "p.json", record)
    assert provenance.load(tmp_path / "p.json") == record
    data = json.loads((tmp_path / "p.json").read_bytes())
    assert data["base"]["built_from"]["debs"] == len(raw["debs"])

    # Records written before the origin was recorded still load, as a base known by digest only.
    del data["base"]["built_from"]
    (tmp_path / "old.json").write_text(json.dumps(data))
    assert provenance.load(tmp_path / "old.json").base == provenance.Base(raw["name"], raw["digest"])
    data["base"]["built_from"] = {"debs": 1}
    (tmp_path / "old.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="base.built_from has unexpected fields"):
        provenance.load(tmp_path / "old.json")


def test_local_base_refuses_a_lock_of_another_base(project):
    commit_files(project, {"locks/base.json": (REPO_ROOT / "locks" / "base.json").read_bytes()}, "the base lock")
    with pytest.raises(SourceError, match="does not pin the base the release builds on"):
        provenance.local_base(project, "arena/base", "sha256:" + "0" * 64)


def test_the_mirror_is_recorded_in_the_base_lock(tmp_path):
    """locks/base.json names the mirror the .debs came from; a lock written before it did loads as None."""
    record = base_mod.load_record(REPO_ROOT / "locks" / "base.json")
    path = tmp_path / "base.json"
    base_mod.write_record(dataclasses.replace(record, debian_mirror="http://mirror.example/debian"), path)
    assert base_mod.load_record(path).debian_mirror == "http://mirror.example/debian"
    raw = json.loads(path.read_text())
    del raw["debian_mirror"]
    path.write_text(json.dumps(raw))
    assert base_mod.load_record(path).debian_mirror is None
