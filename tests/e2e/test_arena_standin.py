"""The arena profile end to end against local stand-ins for what this machine cannot
reach: ghcr.io (the real local registry holding the base and the external task images),
GitHub (git repositories made here, laid out like the mirror directory and fetched by
`file://` URL) and huggingface.co (tests/sources/rows_standin.py: the Hub API and the
datasets-server rows API on loopback, serving the records in the real row layout).

The base is a stand-in of the seed's PYroMat image (tests/e2e/pyromat_standin.py: its
six layers, root-only /opt/arena with the adapter, the task record and workspace.tar,
CPython 3.12 at /opt/arena-python). The external images are the repair stand-ins
(tests/checks/repair_standin), each serving the record the rows API serves. The vendored
stand-in task file re-exports the first-party families, so the check suite has real
cases to solve; it exercises the vendored path (ARENA_TASKS_FILE, protected-vendored,
vendor/ pins). The reference repairs are vendored from the seed repository's stand-in
and handed to the repair checks; the release starts both repair images and runs them."""

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

from pipeline.checks.repair import REPAIR_CHECKS

from ..base.basefixtures import base_image  # noqa: F401
from ..checks.repair_standin import REFERENCE_SCRIPT, build_standin
from ..shared import suite_slot
from ..sources import rows_standin
from .pyromat_standin import INHERITED, build_pyromat_standin, pyromat_runtime  # noqa: F401
from .test_pyromat_standin import pyromat_inputs

REPO = Path(__file__).resolve().parents[2]
TASKS = ("format-code-task-000666", "format-code-task-001926")
ROWS = {"format-code-task-000666": 50, "format-code-task-001926": 2610}
DATASET_REPO = "akseljoonas/mimo-openenv-software"
# The stand-in repair project's fix, a reference repair script like the seed's: it edits
# files under /workspace/repo.
REFERENCE = REFERENCE_SCRIPT.read_bytes()
NOTICE = b"Stand-in NOTICE of the seed repository (tests only).\n"
_LOADER = """
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
"""


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
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def _repository(mirror: Path, key: str, files: dict[str, bytes]) -> tuple[str, str]:
    """A git repository at the mirror layout's path for `key` (host/owner/name): its
    file:// URL and the commit holding `files`."""
    repo = mirror / key
    for rel, data in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_bytes(data)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "upstream")
    return repo.as_uri(), _git(repo, "rev-parse", "HEAD")


def _source(name: str, url: str, rev: str, path: str, data: bytes, license_file: str, lic: bytes, spdx: str) -> str:
    return f'''
[[sources]]
name = "{name}"
repository = "{url}"
revision = "{rev}"
path = "{path}"
sha256 = "{hashlib.sha256(data).hexdigest()}"
size = {len(data)}
license = "{spdx}"
license_file = "{license_file}"
license_sha256 = "{hashlib.sha256(lic).hexdigest()}"
profiles = ["arena"]
'''


def _config(
    registry: str, hub: str, base: str, images: dict[str, tuple[str, int]], sources: str, records: dict[str, str]
) -> str:
    text = (REPO / "release.toml").read_text()
    tail = text.split("[budgets.procedural]", 1)[1]
    # The repository's curriculum: the table up to the next one.
    curriculum = "[curriculum]" + text.split("[curriculum]", 1)[1].split("\n[", 1)[0]
    tasks = "".join(
        f'''
[[external.tasks]]
task_id = "{t}"
image = "{images[t][0]}"
compressed_bytes = {images[t][1]}
after_block = {1 if t.endswith("666") else 3}
split = "code"
row = {ROWS[t]}
record_sha256 = "{records[t]}"
reference = "mimo-reference-{t[-6:]}"
'''
        for t in TASKS
    )
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
submission_id = "openenv-data-workflows-standin"
dataset = "akseljoonas/mimo-openenv-software"
publish_dataset = true

{curriculum}

[dataset]
license_name = "mixed-apache-2.0-and-mit"
license_link = "https://github.com/akseljoonas/mimo-openenv-software/blob/64adddd91e4ec5a8b97ea946250badfb99cb57a0/NOTICE"
language = ["en"]
tags = ["openenv", "reinforcement-learning", "tool-use"]
source_datasets = ["XiaomiMiMo/MiMo-V2.6-RL-oss", "ruv/metaharness-arena-tasks"]

{sources}
[external]
dataset = "{rows_standin.DATASET}"
revision = "{rows_standin.REVISION}"
license = "Apache-2.0"
hub_url = "{hub}"
rows_url = "{hub}"

{tasks}
[budgets.procedural]{tail}'''


def test_arena_profile_release_against_local_stand_ins(
    pyromat_runtime, tmp_path, local_registry, hub_standin, base_image
):
    clone = tmp_path / "checkout"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    mirror = tmp_path / "mirror"
    tasks_url, tasks_rev = _repository(
        mirror,
        "github.com/ruvnet/metaharness",
        {"integrations/openenv-arena/arena_env/tasks.py": TASKS_PY, "LICENSE": LICENSE},
    )
    seed_url, seed_rev = _repository(
        mirror,
        "github.com/akseljoonas/mimo-openenv-software",
        {**{f"solutions/{t}.py": REFERENCE for t in TASKS}, "NOTICE": NOTICE},
    )
    sources = _source(
        "metaharness-tasks",
        tasks_url,
        tasks_rev,
        "integrations/openenv-arena/arena_env/tasks.py",
        TASKS_PY,
        "LICENSE",
        LICENSE,
        "MIT",
    )
    sources += "".join(
        _source(
            f"mimo-reference-{t[-6:]}",
            seed_url,
            seed_rev,
            f"solutions/{t}.py",
            REFERENCE,
            "NOTICE",
            NOTICE,
            "LicenseRef-mimo-openenv-software-NOTICE",
        )
        for t in TASKS
    )
    # The base: the PYroMat stand-in, whose instance.json is the record the rows API serves.
    base = build_pyromat_standin(
        local_registry, base_image, tmp_path / "pyromat", **pyromat_inputs(), runtime=pyromat_runtime
    )
    first = build_standin(local_registry, base_image, tmp_path / "s1", task_id=TASKS[0])
    second = build_standin(local_registry, base_image, tmp_path / "s2", task_id=TASKS[1])
    # The records the rows API serves are the images' own /opt/arena/instance.json.
    texts = {TASKS[0]: first.instance_json.decode(), TASKS[1]: second.instance_json.decode()}
    images = {
        TASKS[0]: (first.reference, first.compressed_bytes),
        TASKS[1]: (second.reference, second.compressed_bytes),
    }
    records = {t: hashlib.sha256(text.encode()).hexdigest() for t, text in texts.items()}
    rows = {ROWS[t]: rows_standin.mimo_row(text) for t, text in texts.items()}
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELEASE_")}
    env.update(
        RELEASE_REGISTRY_USER=local_registry.user,
        RELEASE_REGISTRY_PASSWORD=local_registry.password,
        HOME=str(tmp_path / "home"),
        PYTHONDONTWRITEBYTECODE="1",
        HF_ENDPOINT=hub_standin.url,
        HF_TOKEN=hub_standin.token,
    )
    hub_standin.create_repo(DATASET_REPO)
    with rows_standin.serve(rows) as hub:
        (clone / "release.toml").write_text(
            _config(local_registry.address, hub.url, base.reference, images, sources, records)
        )
        _git(clone, "commit", "-q", "-m", "arena stand-in config", "--", "release.toml")
        with suite_slot():
            proc = subprocess.run(
                [sys.executable, "-m", "pipeline", "release", "--profile", "arena"],
                cwd=clone,
                env=env,
                capture_output=True,
                text=True,
                timeout=1800,
            )
    assert hub.requests.count("/rows") == 2, proc.stderr[-6000:]

    # Sources, references and records: vendored and verified by their pins.
    vendor = clone / "vendor"
    assert (vendor / "metaharness-tasks" / "tasks.py").read_bytes() == TASKS_PY
    for t in TASKS:
        assert (vendor / f"mimo-reference-{t[-6:]}" / f"{t}.py").read_bytes() == REFERENCE
        assert (vendor / "external" / f"{t}.json").read_bytes() == texts[t].encode()
    assert (clone / "dist" / "checks.json").is_file(), proc.stdout[-2000:] + proc.stderr[-6000:]
    checks = json.loads((clone / "dist" / "checks.json").read_text())
    by_id = {c["id"]: c for c in checks["checks"]}
    assert by_id["image/protected-vendored"]["passed"]
    # What the base keeps root-only under /opt/arena stays unreadable in the derived image.
    inherited = by_id["image/protected-inherited"]
    assert inherited["passed"] and inherited["detail"] == (
        f"{len(INHERITED)} file(s) the base holds: " + ", ".join(f"/opt/arena/{n}" for n in sorted(INHERITED))
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-6000:]
    assert all(c["passed"] for c in checks["checks"])
    expected_passed = list(REPAIR_CHECKS)
    for t in TASKS:
        assert [by_id[f"{t}/{n}"]["passed"] for n in expected_passed] == [True] * len(expected_passed)
    assert [len(e["checks"]) for e in checks["external"]] == [len(REPAIR_CHECKS)] * 2

    sub = json.loads((clone / "submission.json").read_text())
    assert sub["image"].startswith(f"{local_registry.address}/arena/openenv-data-workflows@sha256:")
    assert (sub["submission_id"], sub["dataset"]) == ("openenv-data-workflows-standin", DATASET_REPO)
    # The request's split is the budgets table's, not the dataset's "code".
    assert [t["split"] for t in sub["tasks"] if t["task_id"] in TASKS] == ["train", "train"]
    # The admission preflight ran strict (arena): every check passed, none "not checked".
    assert "PREFLIGHT PASSED: " in proc.stderr and ", 0 failed, 0 not checked" in proc.stderr
    prov = json.loads((clone / "provenance.json").read_text())
    externals = [t for t in prov["tasks"] if t["task_id"] in TASKS]
    assert [t["verification"]["status"] for t in externals] == ["verified", "verified"]
    for task in externals:
        outcomes = task["verification"]["checks"]
        assert outcomes["passed"] == expected_passed and outcomes["failed"] == []
        assert not outcomes["not_applicable"]
    statement = json.loads((clone / "attestations" / "checks.dsse.json").read_text())
    predicate = json.loads(base64.b64decode(statement["payload"]))["predicate"]
    passed_ids = {f"{t}/{n}" for t in TASKS for n in expected_passed}
    assert passed_ids <= set(predicate["passedTests"]) and predicate["result"] == "PASSED"
    report = (clone / "dist" / "report.md").read_text()
    assert "## External repair checks" in report

    assert prov["base"]["digest"] == base.reference.split("@")[1]
    assert {s["source"]: s["revision"] for s in prov["sources"]} == {
        "metaharness-tasks": tasks_rev,
        "mimo-reference-000666": seed_rev,
        "mimo-reference-001926": seed_rev,
    }
    assert [
        (e["task_id"], e["split"], e["row"], e["sha256"], e["reference"], e["status"]) for e in prov["external"]
    ] == [(t, "code", ROWS[t], records[t], f"mimo-reference-{t[-6:]}", "verified") for t in TASKS]
    # Both measures of every image, read from their manifests: the seed's (layers) and the
    # platform's (config blob + layers).
    sizes = {i["image"]: i for i in prov["sizes"]["images"]}
    assert sizes[first.reference]["seed_bytes"] == first.compressed_bytes
    assert all(i["measured"] and i["platform_bytes"] > i["seed_bytes"] for i in sizes.values())
    assert prov["sizes"]["platform_bytes"] is not None
    # Published to the Hub stand-in: the task files' commit is the revision provenance.json
    # records, the signed records are the commit on top of it, and every byte read back.
    commits = hub_standin.commits(DATASET_REPO)
    assert prov["dataset"]["published"] is True and prov["dataset"]["revision"] == commits[-2].oid
    dataset_dir = clone / "dist" / "dataset"
    published = hub_standin.files_at(DATASET_REPO, commits[-1].oid)
    assert {k: v for k, v in published.items() if k != ".gitattributes"} == {
        str(p.relative_to(dataset_dir)): p.read_bytes() for p in dataset_dir.rglob("*") if p.is_file()
    }
    assert hub_standin.unknown == []
    subprocess.run(
        [sys.executable, "-m", "pipeline", "key", "--profile", "arena"],
        cwd=clone,
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    audit = subprocess.run(
        [sys.executable, "-m", "pipeline", "audit", "--key", str(clone / ".release" / "keys" / "release.pub.pem")],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert audit.returncode == 0, audit.stdout[-4000:] + audit.stderr
    shutil.rmtree(clone / "dist", ignore_errors=True)
