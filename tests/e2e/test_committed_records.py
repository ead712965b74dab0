"""The records committed in this repository are the output of a real local release of
their commit; the offline audit passes on them, trusting only release.toml's pins. CI
reproduces them from scratch (a fresh clone, no registry, the base rebuilt from
locks/base.json, the whole image digest compared, then the audit with nothing skipped):
that is the README's auditor path, which tests/e2e/test_readme_walk.py walks."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def pipeline(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELEASE_") and k != "SOURCE_DATE_EPOCH"}
    # A registry directory that does not exist: only what the records themselves say counts.
    env["RELEASE_REGISTRY_DIR"] = str(cwd / ".no-registry")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=1200
    )


def test_committed_records_are_a_complete_local_release():
    prov = json.loads((REPO / "provenance.json").read_text())
    sub = json.loads((REPO / "submission.json").read_text())
    assert prov["profile"] == "local" and not prov["project"]["dirty"]
    assert sub["image"] == f"{prov['image']['name']}@{prov['image']['digest']}"
    assert len(sub["tasks"]) == 34
    assert (REPO / "attestations" / "provenance.dsse.json").is_file()


@pytest.mark.slow
def test_the_committed_request_passes_the_admission_preflight():
    """`nox -s preflight` on the committed submission.json: every admission check passes or,
    offline (ghcr.io, the local registry not running), says it could not run; none fails."""
    proc = pipeline(REPO, "preflight", "--registry", "")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    assert proc.stdout.startswith("PREFLIGHT PASSED: ") and "\nFAIL " not in proc.stdout


@pytest.mark.slow
def test_audit_passes_on_the_committed_records(tmp_path):
    """Against trust.toml's pinned trust root. A clean checkout has no image layers, so the
    SBOM-against-layers checks are skipped by name, and the table and the VSA say so."""
    vsa = tmp_path / "vsa.json"
    proc = pipeline(REPO, "audit", "--skip", "sbom/components", "--skip", "sbom/coverage", "--vsa", str(vsa))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    assert proc.stdout.startswith("AUDIT PASSED") and "2 skipped (sbom/components, sbom/coverage)" in proc.stdout
    summary = json.loads(vsa.read_text())
    assert summary["predicateType"] == "https://slsa.dev/verification_summary/v1"
    assert summary["predicate"]["verificationResult"] == "PASSED"
    assert summary["predicate"]["notVerified"] == ["sbom/components", "sbom/coverage"]
    assert (
        summary["subject"][0]["digest"]["sha256"]
        == json.loads((REPO / "submission.json").read_text())["image"].split("@sha256:")[1]
    )


@pytest.mark.slow
def test_committed_records_are_signed_by_the_pinned_key_not_by_whoever_publishes_one(tmp_path):
    """The issue-10 attack on the real records: a copy re-signed by a fresh key that publishes
    itself beside them is refused, naming the signer."""
    from pipeline.records import signing

    copy = tmp_path / "records"
    shutil.copytree(REPO, copy, ignore=shutil.ignore_patterns(".git", ".nox", ".release", "dist", "__pycache__"))
    forger = signing.KeySigner(signing.CryptoSigner.generate_ed25519())
    for path in (copy / "attestations").glob("*.dsse.json"):
        path.write_bytes(forger.sign(base64.b64decode(json.loads(path.read_text())["payload"])))
    forger.publish(copy / "attestations")
    proc = pipeline(copy, "audit", "--records", str(copy), "--vsa", str(tmp_path / "vsa.json"))
    assert proc.returncode != 0
    assert f"signed by keyid {forger.keyid}" in proc.stdout and "pinned" in proc.stdout


@pytest.mark.slow
def test_audit_without_the_image_says_to_reproduce_first(tmp_path):
    """A fresh clone's first `nox -s audit`, before `nox -s reproduce`: the two checks that need
    the image's layers fail, and the last line says the command that makes them pass."""
    copy = tmp_path / "records"
    shutil.copytree(REPO, copy, ignore=shutil.ignore_patterns(".git", ".nox", ".release", "dist", "__pycache__"))
    proc = pipeline(copy, "audit", "--records", str(copy), "--vsa", str(tmp_path / "vsa.json"))
    assert proc.returncode == 1 and proc.stdout.startswith("AUDIT FAILED: ")
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("audit: FAILED (2 check(s)); first sbom/components: not checked: ")
    assert last.endswith("run `nox -s reproduce` first")
