"""A small real image for the SBOM and attestation tests, and the audit's records.

`small_image` writes an OCI image layout whose layers are made with
pipeline.image.oci.layer: a fake Debian base (dpkg status, os-release as a symlink like
bookworm's), a Python prefix with two dist-infos, an upper layer that deletes one
of them with a whiteout, and the app layer under /opt/arena (first-party code, a
vendored task file and its licence).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import UTC
from pathlib import Path

import pytest

from pipeline.config import REPO_ROOT
from pipeline.image.oci import digest as oci_digest
from pipeline.image.oci.layer import FileEntry, parents_of, write_layer
from tests.curriculum import all_cases
from tests.shared import copy_tree

EPOCH = 1_700_000_000
APP = "/opt/arena"
SITE = "opt/arena-python/lib/python3.11/site-packages"
DPKG_STATUS = b"""Package: base-files
Status: install ok installed
Priority: required
Architecture: amd64
Version: 12.4+deb12u5
Description: Debian base system miscellaneous files
 This package contains the basic filesystem hierarchy.

Package: libc6
Status: install ok installed
Architecture: amd64
Multi-Arch: same
Source: glibc
Version: 2.36-9+deb12u4
Description: GNU C Library: Shared libraries

Package: removed-thing
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0
"""
# base-files' copyright file is machine-readable (DEP-5), libc6's free-form, like Debian's.
BASE_FILES_COPYRIGHT = b"""Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: base-files

Files: *
Copyright: 1995-2011 Software in the Public Interest
License: GPL-2+
 On Debian systems, the complete text of the GNU General Public License version 2
 can be found in /usr/share/common-licenses/GPL-2.

Files: debian/*
Copyright: 2024 A Maintainer
License: BSD-3-clause
 Redistribution and use in source and binary forms, with or without modification,
 are permitted provided that the following conditions are met: ...
"""
LIBC6_COPYRIGHT = b"""This is the Debian prepackaged version of the GNU C Library.

* Most of the GNU C library is under the following copyright: ...
"""
OS_RELEASE = b'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n'
TASKS_PY = b"# vendored upstream task module\nTASKS = []\n"


def _meta(name: str, version: str, license_expr: str) -> bytes:
    return (
        f"Metadata-Version: 2.4\nName: {name}\nVersion: {version}\n"
        f"License-Expression: {license_expr}\n\nlong description\n"
    ).encode()


def _files(entries: dict[str, bytes], *, links: dict[str, str] | None = None) -> list[FileEntry]:
    out = [FileEntry(path=p, type="file", mode=0o644, source=d) for p, d in entries.items()]
    out += [FileEntry(path=p, type="symlink", mode=0o777, linkname=t) for p, t in (links or {}).items()]
    return parents_of([e.path for e in out]) + out


@dataclass(frozen=True)
class SmallImage:
    layout: Path
    digest: str
    name: str


def make_image(
    root: Path, *, app_files: dict[str, bytes] | None = None, base_files: dict[str, bytes] | None = None
) -> SmallImage:
    """Write the small image into `root/oci` and return its manifest digest (`base_files`:
    more files of the bottom layer)."""
    layout = root / "oci"
    blobs = layout / "blobs" / "sha256"
    layers = [
        _files(
            {
                "var/lib/dpkg/status": DPKG_STATUS,
                "usr/lib/os-release": OS_RELEASE,
                "usr/share/doc/base-files/copyright": BASE_FILES_COPYRIGHT,
                "usr/share/doc/libc-common/copyright": LIBC6_COPYRIGHT,
                **(base_files or {}),
            },
            links={
                "etc/os-release": "../usr/lib/os-release",
                # a doc directory linked to another package's, as Debian allows within a source
                "usr/share/doc/libc6": "libc-common",
            },
        ),
        _files(
            {
                f"{SITE}/requests-2.32.3.dist-info/METADATA": _meta("requests", "2.32.3", "Apache-2.0"),
                f"{SITE}/requests-2.32.3.dist-info/RECORD": b"requests/__init__.py,sha256=abc,10\n",
                f"{SITE}/Old_Pkg-1.0.dist-info/METADATA": _meta("Old_Pkg", "1.0", "MIT"),
                f"{SITE}/Old_Pkg-1.0.dist-info/RECORD": b"old_pkg/__init__.py,,\n",
            }
        ),
        _files({f"{SITE}/.wh.Old_Pkg-1.0.dist-info": b""}),
        _files(
            app_files
            or {
                "opt/arena/env/__init__.py": b"",
                "opt/arena/env/openenv.yaml": OPENENV_YAML,
                "opt/arena/env/server/app.py": b"app = None\n",
                "opt/arena/vendor/metaharness-tasks/tasks.py": TASKS_PY,
                "opt/arena/vendor/metaharness-tasks/LICENSE": b"MIT License\n",
                "opt/arena/licenses/metaharness-tasks.LICENSE": b"MIT License\n",
            }
        ),
    ]
    written = [write_layer(entries, blobs, source_date_epoch=EPOCH) for entries in layers]
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": "2023-11-14T22:13:20Z",
        "config": {"WorkingDir": APP},
        "rootfs": {"type": "layers", "diff_ids": [w.diff_id for w in written]},
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    (blobs / oci_digest.hex_of(oci_digest.of_bytes(config_bytes))).write_bytes(config_bytes)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": oci_digest.of_bytes(config_bytes),
            "size": len(config_bytes),
        },
        "layers": [
            {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": w.digest, "size": w.size}
            for w in written
        ],
    }
    manifest_bytes = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    digest = oci_digest.of_bytes(manifest_bytes)
    (blobs / oci_digest.hex_of(digest)).write_bytes(manifest_bytes)
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    (layout / "index.json").write_text(
        json.dumps(
            {
                "schemaVersion": 2,
                "manifests": [{"mediaType": manifest["mediaType"], "digest": digest, "size": len(manifest_bytes)}],
            }
        )
    )
    return SmallImage(layout=layout, digest=digest, name="arena/openenv-data-workflows")


@pytest.fixture
def small_image(tmp_path) -> SmallImage:
    return make_image(tmp_path)


# ------------------------------------------------------------------ a release's records

BASE = "registry.example.invalid/base/python@sha256:" + "5" * 64
LOCAL_BASE = "arena/base@sha256:" + "e" * 64  # the base of `local_records`, built locally
EXTERNAL_IMAGE = "registry.example.invalid/mimo/software@sha256:" + "7" * 64
# One MiMo record as the dataset stores it (one line of JSON) and the row holding it.
EXTERNAL_RECORD = json.dumps(
    {"cwd": "/workspace/repo", "instance_id": "format-code-task-000666", "problem_statement": "repair the formatter"}
)
EXTERNAL_ROW = {
    "prompt": [{"role": "user", "content": "repair the formatter"}],
    "reward_model": {"style": "rule"},
    "extra_info": {"instance_id": "format-code-task-000666", "instance_json": EXTERNAL_RECORD},
}
DATASET, DATASET_REV = "XiaomiMiMo/MiMo-V2.6-RL-oss", "639865fd3374018d6cb29b9fb82dd531406fcf5f"
LICENSE = b"MIT License\n\nCopyright (c) upstream\n"
OPENENV_YAML = (REPO_ROOT / "env" / "openenv.yaml").read_bytes()  # the project's own manifest
LOCK_TEXT = (
    "requests==2.32.3 \\\n    --hash=sha256:" + "a" * 64 + "\nidna==3.10 \\\n    --hash=sha256:" + "c" * 64 + "\n"
)
# Checks of the image (those the admission preflight reads among them) and one of every case:
# a case is verified by checks of its own.
CHECKS = (
    ("image/health", True),
    ("image/isolation-mode", True),
    ("image/schema", True),
    ("image/openenv-validate", True),
    *((f"{c.id}/correct", True) for c in all_cases()),
)
# The suite ran under both engines of [runtime] verify: podman's checks carry the suite's ids,
# docker's the suffix @docker (pipeline/checks/run.py); each server reported its isolation mode.
RUNTIMES = (("podman", "", "namespaces"), ("docker", "@docker", "unprivileged"))


def runtime_records() -> tuple[dict, ...]:
    """checks.json's `runtimes` as a release under podman and the private Docker engine writes them."""
    out = []
    for name, suffix, mode in RUNTIMES:
        engine = {
            "engine": name,
            "client": f"/usr/bin/{name}",
            "client_version": "1.0",
            "version": "1.0",
            "security_options": ["name=seccomp,profile=default"] if name == "docker" else [],
            "runtime": "runc",
            "cgroup_version": "1",
            "private_engine": False,
        }
        security = {
            "security_opt": [],
            "seccomp": "default",
            "cap_add": [],
            "privileged": False,
            "userns_mode": "" if name == "docker" else "private",
            "network_mode": "host",
        }
        out.append(
            {
                "name": name,
                "suffix": suffix,
                "engine": engine,
                "container_security": security,
                "isolation": mode,
                "containers": 2,
                "summary": {
                    "total": len(CHECKS),
                    "passed": sum(ok for _, ok in CHECKS),
                    "failed": sum(not ok for _, ok in CHECKS),
                },
            }
        )
    return tuple(out)


def suite_checks(checks=None):
    """CHECKS under every runtime (ids suffixed), image/isolation-mode naming each one's mode."""
    from pipeline.checks.results import CheckResult

    return tuple(
        CheckResult(
            id=i + suffix, passed=ok, seconds=0.1, detail=f"isolation: {mode}" if i == "image/isolation-mode" else ""
        )
        for _, suffix, mode in RUNTIMES
        for i, ok in (checks or CHECKS)
    )


COMMAND = ("python", "-m", "pipeline", "release", "--profile", "test")
RELEASED_ON = (2024, 1, 1)


def trust_toml(keyid: str) -> str:
    return f'''
[trust.test]
keyids = ["{keyid}"]

[trust.arena]
identity = "https://github.com/akseljoonas/openenv-arena-release/.github/workflows/release.yml@refs/tags/*"
issuer = "https://token.actions.githubusercontent.com"
'''


def release_toml(
    tasks_sha256: str, tasks_size: int, license_sha256: str, *, record_sha256: str, base: str = BASE
) -> str:
    def budgets(value: int) -> str:
        return "\n".join(
            f"{k} = {value}"
            for k in (
                "reset_wall_s",
                "rollout_wall_s",
                "verifier_wall_s",
                "tool_wall_s",
                "tool_calls_total",
                "tool_calls_per_minute",
                "completion_tokens",
                "observation_tokens",
                "context_tokens",
                "memory_gib",
                "cpu_floor_vcpus",
                "workspace_gib",
            )
        )

    return f'''
[release]
name = "openenv-data-workflows"
app_dir = "/opt/arena"
python = "/opt/arena-python/bin/python3"
port = 8000
source_url = "https://github.com/akseljoonas/openenv-arena-release"

[profiles.test]
registry = "registry.example.invalid"
repository = "arena/openenv-data-workflows"
tag = "test"
base = "{base}"
tasks = "vendor:metaharness-tasks"
signing = "key"
external_tasks_required = false
submission_id = "openenv-data-workflows-test"
dataset = "arena/openenv-data-workflows"

[curriculum]
families = ["software_change", "industrial_schedule", "science_calibration", "office_reconciliation",
            "finance_ledger", "math_route", "security_triage", "media_timeline"]
difficulties = [1, 2]
seeds = [101, 307]
blocks = "difficulty-seed"

[intoto]
layout_valid_days = 365

[dataset]
license_name = "mixed-apache-2.0-and-mit"
license_link = "https://github.com/akseljoonas/mimo-openenv-software/blob/64adddd91e4ec5a8b97ea946250badfb99cb57a0/NOTICE"
language = ["en"]
tags = ["openenv", "reinforcement-learning", "tool-use"]
source_datasets = ["XiaomiMiMo/MiMo-V2.6-RL-oss", "ruv/metaharness-arena-tasks"]

[[sources]]
name = "metaharness-tasks"
repository = "https://example.invalid/ruvnet/metaharness"
revision = "4657e5b82e124917b01d79ee5e9de41badb48fda"
path = "integrations/openenv-arena/arena_env/tasks.py"
sha256 = "{tasks_sha256}"
size = {tasks_size}
license = "MIT"
license_file = "LICENSE"
license_sha256 = "{license_sha256}"
profiles = ["test"]

# The reference repairs, vendored by no profile of this test.
[[sources]]
name = "mimo-reference-000666"
repository = "https://example.invalid/akseljoonas/mimo-openenv-software"
revision = "7763f6515b7876e45381333f566d98f43995d888"
path = "solutions/format-code-task-000666.py"
sha256 = "83966abd68ca8a87f4dbc56d7f21ce91f4045c50512bc2cd4a9071d488595b81"
size = 480
license = "LicenseRef-mimo-openenv-software-NOTICE"
license_file = "NOTICE"
profiles = []

[external]
dataset = "{DATASET}"
revision = "{DATASET_REV}"
license = "Apache-2.0"

[[external.tasks]]
task_id = "format-code-task-000666"
image = "{EXTERNAL_IMAGE}"
compressed_bytes = 1000
after_block = 1
split = "code"
row = 666
record_sha256 = "{record_sha256}"
reference = "mimo-reference-000666"

[[external.tasks]]
task_id = "format-code-task-001926"
image = "{EXTERNAL_IMAGE}"
compressed_bytes = 1000
after_block = 3
split = "code"
row = 1926
record_sha256 = ""
reference = "mimo-reference-000666"

[budgets.procedural]
split = "train"
{budgets(1)}

[budgets.external]
split = "train"
{budgets(2)}
'''


@dataclass(frozen=True)
class Records:
    root: Path
    image: SmallImage
    signer: object  # pipeline.records.signing.KeySigner


def write_base_lock(root: Path) -> None:
    """A locally built base's lock (LOCAL_BASE, two .debs from a named mirror) at root/locks/base.json."""
    from pipeline.image import base as base_mod

    name, digest = LOCAL_BASE.split("@")
    base_mod.write_record(
        base_mod.BaseRecord(
            name=name,
            digest=digest,
            media_type="application/vnd.oci.image.manifest.v1+json",
            config_digest="sha256:" + "4" * 64,
            layers=(
                base_mod.LayerRecord(role="os", digest="sha256:" + "3" * 64, diff_id="sha256:" + "2" * 64, size=1000),
            ),
            runtime_lock_sha256="1" * 64,
            python="/opt/arena-python/bin/python3",
            python_version="3.11.2",
            debian_suite="bookworm",
            debian_snapshot="20250520T000000Z",
            debian_snapshot_url=base_mod.snapshot_url("20250520T000000Z"),
            packages=("python3",),
            debs=(
                base_mod.Deb("base-files", "12.4+deb12u5", "amd64", "b" * 64),
                base_mod.Deb("libc6", "2.36-9+deb12u4", "amd64", "c" * 64),
            ),
            source_date_epoch=1747699200,
            mmdebstrap_version="1.3.5",
            zlib_version="1.2.13",
            builder_sha256="0" * 64,
            debian_mirror="http://deb.debian.org/debian",
        ),
        root / "locks" / "base.json",
    )


def make_records(root: Path, signer=None, *, image_name: str | None = None, local_base: bool = False) -> Records:
    """A complete, correctly signed set of release records under `root`, made like a release:
    each stage recorded as an in-toto link while it runs, the release statement last (`local_base`:
    on a locally built base, LOCAL_BASE, pinned in root/locks/base.json, rather than BASE)."""
    import hashlib
    from dataclasses import replace
    from datetime import datetime

    from securesystemslib.signer import CryptoSigner

    from pipeline import config as config_mod
    from pipeline import plan
    from pipeline._io import write_atomic
    from pipeline.checks import runtimes as checks_runtimes
    from pipeline.checks import schema as release_schema
    from pipeline.checks.external import ExternalResult
    from pipeline.checks.results import CheckResult, SuiteResult
    from pipeline.image.layerdiff import AppLayer
    from pipeline.records import (
        attest,
        card,
        dataset,
        provenance,
        sbom,
        signing,
        submission,
        verification,
    )
    from pipeline.records import (
        links as intoto_links,
    )
    from pipeline.records import (
        sizes as sizes_mod,
    )
    from pipeline.records import (
        statement as release_statement,
    )
    from pipeline.sources import dataset as external
    from pipeline.sources.vendor import VendoredFile

    sha = lambda b: hashlib.sha256(b).hexdigest()  # noqa: E731
    signer = signer or signing.KeySigner(CryptoSigner.generate_ed25519())
    root.mkdir(parents=True, exist_ok=True)
    (root / "release.toml").write_text(
        release_toml(
            sha(TASKS_PY),
            len(TASKS_PY),
            sha(LICENSE),
            record_sha256=sha(EXTERNAL_RECORD.encode()),
            base="local" if local_base else BASE,
        )
    )
    if local_base:
        write_base_lock(root)
    (root / "trust.toml").write_text(trust_toml(signer.keyid))
    (root / "pyproject.toml").write_text('[project]\nname = "x"\nlicense = "MIT"\n')
    # The lock the builder's toolchain was installed from (the audit's provenance/toolchain).
    (root / "uv.lock").write_bytes((REPO_ROOT / "uv.lock").read_bytes())
    (root / "env").mkdir(exist_ok=True)
    (root / "env" / "__init__.py").write_bytes(b"")
    # The environment's OpenEnv manifest: the image ships it, the dataset folder carries a copy.
    (root / "env" / "openenv.yaml").write_bytes(OPENENV_YAML)
    cfg = config_mod.load(root / "release.toml")
    rp = plan.resolve(cfg, "test")
    mirror = root.parent / f"{root.name}-mirror"
    item = mirror / "huggingface.co" / "datasets" / DATASET / DATASET_REV / "code" / "format-code-task-000666.json"
    item.parent.mkdir(parents=True, exist_ok=True)
    item.write_text(json.dumps({"row_idx": 666, "row": EXTERNAL_ROW}))
    links = intoto_links.StageRecorder(root, root, COMMAND, signer.suffix)
    att = root / "attestations"
    with links.step("vendor"):
        for rel, data in (
            ("vendor/metaharness-tasks/tasks.py", TASKS_PY),
            ("vendor/metaharness-tasks/LICENSE", LICENSE),
            ("locks/runtime.txt", LOCK_TEXT.encode()),
        ):
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(data)
        externals = external.fetch_records(cfg, rp.external, root / "vendor", mirror=mirror)
    with links.step("build"):
        image = make_image(
            root / "dist",
            app_files={
                "opt/arena/env/__init__.py": b"",
                "opt/arena/env/openenv.yaml": OPENENV_YAML,
                "opt/arena/vendor/metaharness-tasks/tasks.py": TASKS_PY,
                "opt/arena/vendor/metaharness-tasks/LICENSE": LICENSE,
            },
        )
        (root / "dist" / "build.json").write_text(json.dumps({"manifest_digest": image.digest}))
    name = image_name or rp.target.image_name
    with links.step("sbom"):
        sbom_bytes = sbom.generate(
            image.layout,
            name=name,
            app_dir=cfg.app_dir,
            sources=rp.sources,
            first_party_license=sbom.project_license(root),
            lock_text=LOCK_TEXT,
        )
        write_atomic(att / attest.SBOM_FILE, sbom_bytes)
    manifest = json.loads((image.layout / "blobs" / "sha256" / image.digest[7:]).read_bytes())
    layers = tuple((d["digest"], d["size"]) for d in manifest["layers"])
    with links.step("verify"):
        checks = SuiteResult(
            image=f"{name}@{image.digest}",
            targets=("image",),
            seconds=1.0,
            checks=suite_checks(),
            runtimes=runtime_records(),
            layers=layers,
            config=(manifest["config"]["digest"], manifest["config"]["size"]),
            schema=release_schema.declared(),
            external=(
                ExternalResult(
                    "format-code-task-000666",
                    EXTERNAL_IMAGE,
                    layers=((("sha256:" + "8" * 64), 900),),
                    config_digest="sha256:" + "6" * 64,
                    config_size=100,
                ).to_json(),
                ExternalResult("format-code-task-001926", EXTERNAL_IMAGE, reason="not pulled").to_json(),
            ),
        )
        checks_bytes = json.dumps(checks.to_json()).encode()
        write_atomic(att / attest.CHECKS_FILE, checks_bytes)
    # A failing suite stops a release before its records; a signer could still sign the failed
    # results, which the audit must refuse: the records are then made from the same checks, all passed.
    ok = (
        checks
        if checks.ok
        else SuiteResult(
            image=checks.image,
            targets=checks.targets,
            seconds=1.0,
            layers=checks.layers,
            config=checks.config,
            schema=checks.schema,
            checks=tuple(CheckResult(id=c.id, passed=True, seconds=0.1, detail=c.detail) for c in checks.checks),
            external=checks.external,
            runtimes=checks.runtimes,
        )
    )
    tasks = verification.build(cfg, rp.external, ok, image=f"{name}@{image.digest}")
    sizes = sizes_mod.measure(sizes_mod.descriptors(ok, f"{name}@{image.digest}", cfg.external.tasks))
    src = cfg.sources[0]
    last = manifest["layers"][-1]
    app = AppLayer(name="app", digest=last["digest"], diff_id="sha256:" + "9" * 64, size=last["size"], members=())
    prov = provenance.Provenance(
        schema=provenance.SCHEMA,
        profile="test",
        source_date_epoch=EPOCH,
        project=provenance.ProjectRevision(
            commit="1" * 40, tree="2" * 40, dirty=False, dirty_paths=(), allow_dirty=False
        ),
        base=(
            provenance.local_base(root, *LOCAL_BASE.split("@"))
            if local_base
            else provenance.Base(name=BASE.split("@")[0], digest=BASE.split("@")[1])
        ),
        wheel_lock=provenance.WheelLock(path="locks/runtime.txt", sha256=sha(LOCK_TEXT.encode())),
        builder=provenance.builder(),
        sources=(
            VendoredFile(
                source=src.name,
                repository=src.repository,
                revision=src.revision,
                path=src.path,
                sha256=src.sha256,
                size=src.size,
                license=src.license,
                license_file=src.license_file,
                license_sha256=sha(LICENSE),
                vendor_path="metaharness-tasks/tasks.py",
                license_path="metaharness-tasks/LICENSE",
            ),
        ),
        external=externals,
        image=provenance.Image(
            name=name,
            digest=image.digest,
            media_type=manifest["mediaType"],
            config_digest=manifest["config"]["digest"],
            compressed_size=sum(n for _, n in layers),
            layer_count=len(layers),
            app_layers=(app,),
        ),
        tasks=tasks,
        sizes=sizes,
        budgets=provenance.budgets_record(cfg.budgets),
        runtimes=checks_runtimes.provenance_runtimes(checks),
    )
    t = datetime(*RELEASED_ON, tzinfo=UTC)
    subject = attest.Subject(name=name, digest=image.digest)
    sub = submission.build(cfg, rp.request, tasks, image=f"{name}@{image.digest}", source_revision="1" * 40)
    # The dataset folder as the release writes it (the test profile does not publish it).
    folder = root / dataset.FOLDER
    generated = card.generate(cfg, prov, sub, project_license=sbom.project_license(root), target=rp.dataset)
    dataset.write_content(
        folder, generated, {**dataset.manifest_file(root), **dataset.vendor_files(prov.sources, root / "vendor")}
    )
    prov = replace(prov, dataset=rp.dataset.not_published())
    with links.step("attest"):
        provenance.write(root / "provenance.json", prov)
        files = attest.write_attestations(
            cfg,
            attest.Evidence(
                subject, prov, lock_text=LOCK_TEXT, sbom_bytes=sbom_bytes, checks=checks, checks_bytes=checks_bytes
            ),
            attest.Invocation(rp.parameters, started=t, finished=t, invocation_id="test-run"),
            signer=signer,
            out_dir=att,
        )
    with links.step("submission"):
        submission.write_submission(root / "submission.json", sub)
    links.write(att, signer.functionary(), sign=signer.sign_envelope, released_on=t, days=365)
    attest.write_readme(att, subject, signer, files, source_url=cfg.source_url)
    dataset.add_records(folder, root)
    release_statement.write(
        root, signer, subject, source_url=cfg.source_url, profile="test", released_on=t, dataset=folder
    )
    dataset.add_records(folder, root)
    return Records(root=root, image=image, signer=signer)


@pytest.fixture(scope="session")
def records_template(tmp_path_factory) -> Records:
    """One worker's set of records, made once: each test gets a copy (`records`)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SOURCE_DATE_EPOCH", str(EPOCH))
        return make_records(tmp_path_factory.mktemp("records-template") / "records")


@pytest.fixture
def records(records_template, tmp_path, monkeypatch) -> Records:
    """A private copy of the records (the test may edit, re-sign or delete any of it): the
    same bytes make_records writes, made once per worker rather than once per test."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(EPOCH))
    root = copy_tree(records_template.root, tmp_path / "records")
    mirror = records_template.root.parent / "records-mirror"  # the dataset mirror the records came from
    copy_tree(mirror, tmp_path / "records-mirror")
    image = records_template.image
    return Records(
        root=root,
        signer=records_template.signer,
        image=replace(image, layout=root / image.layout.relative_to(records_template.root)),
    )


@pytest.fixture(scope="session")
def local_records_template(tmp_path_factory) -> Records:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SOURCE_DATE_EPOCH", str(EPOCH))
        return make_records(tmp_path_factory.mktemp("local-records-template") / "records", local_base=True)


@pytest.fixture
def local_records(local_records_template, tmp_path, monkeypatch) -> Records:
    """Like `records`, of a release on a locally built base (base = "local", root/locks/base.json)."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(EPOCH))
    root = copy_tree(local_records_template.root, tmp_path / "records")
    copy_tree(local_records_template.root.parent / "records-mirror", tmp_path / "records-mirror")
    image = local_records_template.image
    return Records(
        root=root,
        signer=local_records_template.signer,
        image=replace(image, layout=root / image.layout.relative_to(local_records_template.root)),
    )


@pytest.fixture
def pushed(local_registry, tmp_path, monkeypatch):
    """Records of the small image, pushed to a fresh repository of the session's local registry:
    (records, a client that may push, the repository)."""
    import uuid

    from pipeline.registry import push as publish

    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(EPOCH))
    repository = f"arena/attest-{uuid.uuid4().hex[:12]}"
    rec = make_records(tmp_path / "records", image_name=f"{local_registry.address}/{repository}")
    client = local_registry.client()
    publish.push_layout(client, repository, rec.image.layout, tag="test")
    return rec, client, repository
