"""The records committed in this repository are the output of a real local release of
their commit, and CI reproduces them from scratch: a fresh clone, no registry, the base
rebuilt from locks/base.json, the whole image digest compared (`python -m pipeline
reproduce` with nothing else present); the offline audit passes on them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def pipeline(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("RELEASE_") and k != "SOURCE_DATE_EPOCH"}
    # A registry directory that does not exist: only what the records themselves say counts.
    env["RELEASE_REGISTRY_DIR"] = str(cwd / ".no-registry")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=1200)


def test_committed_records_are_a_complete_local_release():
    prov = json.loads((REPO / "provenance.json").read_text())
    sub = json.loads((REPO / "submission.json").read_text())
    assert prov["profile"] == "local" and not prov["project"]["dirty"]
    assert sub["image"] == f"{prov['image']['name']}@{prov['image']['digest']}"
    assert len(sub["tasks"]) == 34
    assert (REPO / "attestations" / "provenance.dsse.json").is_file()


@pytest.mark.slow
def test_fresh_clone_reproduces_the_committed_records_from_scratch(tmp_path):
    clone = tmp_path / "ci" / "clone"
    subprocess.run(["git", "clone", "-q", f"file://{REPO}", str(clone)], check=True)
    proc = pipeline(clone, "reproduce")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    digest = json.loads((clone / "provenance.json").read_text())["image"]["digest"]
    assert f"image same: recorded {digest}  rebuilt {digest}" in proc.stdout
    assert "base  same" in proc.stdout


def test_audit_passes_on_the_committed_records():
    proc = pipeline(REPO, "audit")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    assert ", 0 failed" in proc.stdout
