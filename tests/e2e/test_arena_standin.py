"""The arena profile end to end against local stand-ins for what this machine cannot
reach: ghcr.io (the real local registry holding the external task images: stand-in
MiMo repair images built on a Docker schema-2 base and on an OCI base, the first one
also the release's base, as 000666's image is for the real release), GitHub (a git
repository made here, served from a mirror directory) and huggingface.co (external
task records, with their reference patches, in the mirror). The vendored stand-in
task file re-exports the first-party families, so the check suite has real cases to
solve; it exercises the vendored path (ARENA_TASKS_FILE, protected-vendored, vendor/
pins). The release starts both repair images and runs their repair checks."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline._io import canonical_json
from pipeline.checks.repair import REPAIR_CHECKS

from ..base.basefixtures import base_image  # noqa: F401
from ..build.test_build_runs import _schema2_copy
from ..checks.repair_standin import build_standin
from ..checks.repair_standin import record as standin_record

REPO = Path(__file__).resolve().parents[2]
DATASET = "XiaomiMiMo/MiMo-V2.6-RL-oss"
DATASET_REV = "639865fd3374018d6cb29b9fb82dd531406fcf5f"
_LOADER = '''
import importlib.abc
import importlib.util
import sys


class _Loader(importlib.abc.Loader):
    def __init__(self, name):
        self.name = name

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        exec(compile(_SOURCES[self.name][0], "<standin " + self.name + ">", "exec"), module.__dict__)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name in _SOURCES:
            return importlib.util.spec_from_loader(name, _Loader(name), is_package=_SOURCES[name][1])
        return None


sys.meta_path.insert(0, _Finder())
from standin_families import DOMAINS, TASK_IDS, grade, make_task, oracle_answer  # noqa: E402,F401
'''


def _single_file_tasks() -> bytes:
    """A one-file task module with the families API (like the upstream tasks.py): the
    first-party families' sources embedded and imported from memory."""
    root = REPO / "env" / "families"
    sources = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        package = parts[-1] == "__init__"
        name = ".".join(("standin_families",) + (parts[:-1] if package else parts))
        sources[name] = (path.read_text(), package)
    header = '"""Stand-in for the upstream task module (tests only)."""\n'
    return (header + "_SOURCES = " + repr(sources) + "\n" + _LOADER).encode()


TASKS_PY = _single_file_tasks()
LICENSE = b"MIT License\n\nStand-in upstream licence for the arena stand-in test.\n"

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.root, pytest.mark.container]


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


def _upstream(mirror: Path) -> str:
    """github.com/ruvnet/metaharness, mirrored: the pinned file and its licence."""
    repo = mirror / "github.com" / "ruvnet" / "metaharness"
    path = repo / "integrations" / "openenv-arena" / "arena_env" / "tasks.py"
    path.parent.mkdir(parents=True)
    path.write_bytes(TASKS_PY)
    (repo / "LICENSE").write_bytes(LICENSE)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "upstream")
    return _git(repo, "rev-parse", "HEAD")


def _record(mirror: Path, task_id: str, row: int) -> str:
    """huggingface.co/datasets/<dataset>/<revision>/train/<task>.json, mirrored."""
    item = standin_record(task_id, row)
    path = mirror / "huggingface.co" / "datasets" / DATASET / DATASET_REV / "train" / f"{task_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(item))
    return hashlib.sha256(canonical_json(item["row"])).hexdigest()


def _config(registry: str, base: str, other: str, sizes: tuple[int, int], rev: str,
            records: dict[str, str]) -> str:
    tail = (REPO / "release.toml").read_text().split("[budgets.procedural]", 1)[1]
    return f'''
[release]
name = "openenv-data-workflows"
app_dir = "/opt/arena"
python = "/opt/arena-python/bin/python3"
port = 8000
source_url = "https://github.com/akseljoonas/openenv-arena-release"

[profiles.arena]
description = "arena with local stand-ins"
registry = "{registry}"
repository = "arena/openenv-data-workflows"
tag = "openenv-data-workflows"
base = "{base}"
tasks = "vendor:metaharness-tasks"
signing = "key"
external_tasks_required = true
dataset = "akseljoonas/mimo-openenv-software"

[dataset]
license_name = "mixed-apache-2.0-and-mit"
license_link = "https://github.com/akseljoonas/mimo-openenv-software/blob/64adddd91e4ec5a8b97ea946250badfb99cb57a0/NOTICE"
language = ["en"]
tags = ["openenv", "reinforcement-learning", "tool-use"]
source_datasets = ["XiaomiMiMo/MiMo-V2.6-RL-oss", "ruv/metaharness-arena-tasks"]

[[sources]]
name = "metaharness-tasks"
repository = "https://github.com/ruvnet/metaharness"
revision = "{rev}"
path = "integrations/openenv-arena/arena_env/tasks.py"
sha256 = "{hashlib.sha256(TASKS_PY).hexdigest()}"
size = {len(TASKS_PY)}
license = "MIT"
license_file = "LICENSE"
license_sha256 = "{hashlib.sha256(LICENSE).hexdigest()}"
profiles = ["arena"]

[external]
dataset = "{DATASET}"
revision = "{DATASET_REV}"
license = "Apache-2.0"

[external.repair]
reference_field = "patch"
reset_id_field = "task_id"
workspace = "/workspace/repo"
grader_paths = ["/opt/arena"]

[[external.tasks]]
task_id = "format-code-task-000666"
image = "{base}"
compressed_bytes = {sizes[0]}
after_block = 1
split = "train"
row = 666
record_sha256 = "{records['format-code-task-000666']}"

[[external.tasks]]
task_id = "format-code-task-001926"
image = "{other}"
compressed_bytes = {sizes[1]}
after_block = 3
split = "train"
row = 1926
record_sha256 = "{records['format-code-task-001926']}"

[budgets.procedural]{tail}'''


def test_arena_profile_release_against_local_stand_ins(tmp_path, local_registry,
                                                       base_image):  # noqa: F811
    clone = tmp_path / "checkout"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    mirror = tmp_path / "mirror"
    rev = _upstream(mirror)
    records = {t: _record(mirror, t, row) for t, row in
               (("format-code-task-000666", 666), ("format-code-task-001926", 1926))}
    # Stand-ins for the two MiMo images; 000666's is also the release's base.
    first = build_standin(local_registry, _schema2_copy(local_registry, base_image), tmp_path / "s1",
                          task_id="format-code-task-000666")
    second = build_standin(local_registry, base_image.pull_reference(local_registry.address),
                           tmp_path / "s2", task_id="format-code-task-001926")
    schema2 = first.reference
    (clone / "release.toml").write_text(_config(
        local_registry.address, schema2, second.reference,
        (first.compressed_bytes, second.compressed_bytes), rev, records))
    _git(clone, "commit", "-q", "-m", "arena stand-in config", "--", "release.toml")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELEASE_")}
    env.update(RELEASE_REGISTRY_USER=local_registry.user,
               RELEASE_REGISTRY_PASSWORD=local_registry.password,
               HOME=str(tmp_path / "home"), PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run([sys.executable, "-m", "pipeline", "release", "--profile", "arena",
                           "--mirror", str(mirror)], cwd=clone, env=env, capture_output=True,
                          text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-6000:]

    vendored = clone / "vendor" / "metaharness-tasks" / "tasks.py"
    assert vendored.read_bytes() == TASKS_PY
    checks = json.loads((clone / "dist" / "checks.json").read_text())
    by_id = {c["id"]: c for c in checks["checks"]}
    assert by_id["image/protected-vendored"]["passed"]
    assert all(c["passed"] for c in checks["checks"])
    repair_ids = [f"{t}/{name}" for t in ("format-code-task-000666", "format-code-task-001926")
                  for name in REPAIR_CHECKS]
    assert all(by_id[i]["passed"] for i in repair_ids)
    assert [len(e["checks"]) for e in checks["external"]] == [len(REPAIR_CHECKS)] * 2
    sub = json.loads((clone / "submission.json").read_text())
    assert sub["image"].startswith(f"{local_registry.address}/arena/openenv-data-workflows@sha256:")
    externals = [t for t in sub["tasks"] if t["task_id"].startswith("format-code-task-")]
    assert [t["verification"]["status"] for t in externals] == ["verified", "verified"]
    for task in externals:
        assert task["verification"]["checks"] == {"passed": list(REPAIR_CHECKS), "failed": [],
                                                  "not_applicable": {}}
        assert task["verification"]["passed"] == len(REPAIR_CHECKS)
    statement = json.loads((clone / "attestations" / "checks.dsse.json").read_text())
    predicate = json.loads(base64.b64decode(statement["payload"]))["predicate"]
    assert set(repair_ids) <= set(predicate["passedTests"]) and predicate["result"] == "PASSED"
    report = (clone / "dist" / "report.md").read_text()
    table = report.split("## External repair checks", 1)[1]
    assert "| format-code-task-000666 | " + " | ".join(["ok"] * len(REPAIR_CHECKS)) + " |" in table
    assert "| format-code-task-001926 | " + " | ".join(["ok"] * len(REPAIR_CHECKS)) + " |" in table
    # the derived image reuses every layer of 000666's image (and 001926's image, on the
    # OCI base with the same stand-in layer, has the same layers): the release total
    # counts each layer once
    images = {i["image"]: i for i in sub["images"]}
    assert images[schema2]["compressed_bytes"] == first.compressed_bytes
    assert sub["total_compressed_bytes"] == images[sub["image"]]["compressed_bytes"]
    prov = json.loads((clone / "provenance.json").read_text())
    assert prov["sources"][0]["revision"] == rev and prov["base"]["digest"] == schema2.split("@")[1]
    assert {e["status"] for e in prov["external"]} == {"verified"}
    subprocess.run([sys.executable, "-m", "pipeline", "key", "--profile", "arena"], cwd=clone, env=env,
                   check=True, capture_output=True, timeout=120)
    audit = subprocess.run([sys.executable, "-m", "pipeline", "audit", "--key",
                            str(clone / ".release" / "keys" / "release.pub.pem")], cwd=clone, env=env,
                           capture_output=True, text=True, timeout=600)
    assert audit.returncode == 0, audit.stdout[-4000:] + audit.stderr
    shutil.rmtree(clone / "dist", ignore_errors=True)
