"""The sharded suite against the real built image: two shards run in parallel (as two
CI matrix jobs would), each pulling and starting the image itself; `checks merge`
joins them and signs the test-result statement; the merged checks.json equals an
unsharded `verify` of the same image, timings and server URLs aside."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from securesystemslib.signer import CryptoSigner

from pipeline._io import sha256_file
from pipeline.checks import results as results_mod
from pipeline.records import attest, signing

from ..base.basefixtures import base_image  # noqa: F401
from ..build.conftest import clone, source_repo  # noqa: F401
from ..build.test_build import run_build
from ..shared import suite_slot

pytestmark = [pytest.mark.slow, pytest.mark.root, pytest.mark.container]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def built_image(tmp_path_factory, source_repo, local_registry, base_image):
    """The derived image, built by `python -m pipeline build` and pushed to the local registry."""
    repo = clone(source_repo, tmp_path_factory.mktemp("sharded") / "r")
    proc, _ = run_build(repo, local_registry, base_image.pull_reference(local_registry.address))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


def _pipeline(local_registry, tmp: Path, name: str, *args: str) -> tuple[subprocess.Popen, Path]:
    """Start `python -m pipeline ARGS` in this checkout; its output goes to tmp/<name>.log."""
    env = {
        **os.environ,
        "RELEASE_REGISTRY_DIR": str(local_registry.root),
        "PYTHONDONTWRITEBYTECODE": "1",
        "RELEASE_SIGNING_KEY": str(tmp / "key.pem"),
    }
    log = tmp / f"{name}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline", *args], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    return proc, log


def _wait(run: tuple[subprocess.Popen, Path]) -> None:
    proc, log = run
    code = proc.wait(timeout=900)
    assert code == 0, f"{log.stem} failed ({code}):\n{log.read_text()[-4000:]}"


def _comparable(path: Path) -> dict:
    doc = json.loads(path.read_text())
    for key in ("seconds", "targets"):
        doc.pop(key)
    for check in doc["checks"]:
        check.pop("seconds")
    return doc


def test_two_parallel_shards_merge_into_the_unsharded_record(built_image, local_registry, tmp_path):
    (tmp_path / "key.pem").write_bytes(CryptoSigner.generate_ed25519().private_bytes)
    out = {name: tmp_path / f"{name}.json" for name in ("shard1", "shard2", "whole", "merged")}
    # Four containers at once, as many as a release starts twice: one suite slot each pair.
    with suite_slot(), suite_slot():
        runs = [
            _pipeline(
                local_registry,
                tmp_path,
                "shard-1",
                "verify",
                built_image,
                "--shard",
                "1/2",
                "--parallel",
                "1",
                "--out",
                str(out["shard1"]),
            ),
            _pipeline(
                local_registry,
                tmp_path,
                "shard-2",
                "verify",
                built_image,
                "--shard",
                "2/2",
                "--parallel",
                "1",
                "--out",
                str(out["shard2"]),
            ),
            _pipeline(local_registry, tmp_path, "unsharded", "verify", built_image, "--out", str(out["whole"])),
        ]
        for run in runs:
            _wait(run)
    shard1 = results_mod.load(out["shard1"], shard=True)
    # Every shard runs its jobs under both engines of [runtime] verify.
    assert shard1.shard.jobs == ("image/timeout",)
    assert [c.id for c in shard1.checks] == ["image/timeout", "image/timeout@docker"]
    assert [r["name"] for r in shard1.runtimes] == ["podman", "docker"]
    assert shard1.external and not results_mod.load(out["shard2"], shard=True).external

    att = tmp_path / "att"
    _wait(
        _pipeline(
            local_registry,
            tmp_path,
            "merge",
            "checks",
            "merge",
            str(out["shard2"]),
            str(out["shard1"]),
            "--out",
            str(out["merged"]),
            "--sign",
            "key",
            "--attestations",
            str(att),
        )
    )
    assert _comparable(out["merged"]) == _comparable(out["whole"])
    merged = results_mod.load(out["merged"])
    assert merged.ok and merged.counts()["total"] > 600
    assert [(r["name"], r["isolation"], r["containers"]) for r in merged.runtimes] == [
        ("podman", "namespaces", 2),
        ("docker", "unprivileged", 2),
    ]

    # The signed test-result statement is about the image and binds the merged checks.json.
    payload = signing.dsse_verify(
        (att / "checks.dsse.json").read_bytes(), signing.load_published_key(att), what="checks statement"
    )
    stmt = attest.load_statement(payload, what="checks statement")
    assert stmt["predicateType"] == attest.TEST_RESULT
    assert "sha256:" + stmt["subject"][0]["digest"]["sha256"] == built_image.rsplit("@", 1)[1]
    assert stmt["predicate"]["result"] == "PASSED"
    assert stmt["predicate"]["configuration"][0]["digest"]["sha256"] == sha256_file(out["merged"])
