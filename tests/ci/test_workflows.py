"""The GitHub Actions workflows, checked offline: zizmor (the security linter) finds
nothing, the workflow JSON schema accepts every file, and the project's rules hold
(actions pinned by SHA, explicit least permissions per job, no expression in a shell
line, the release identity equal to the one trust.toml pins). Each checker is also
shown a broken workflow, which it must reject."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from . import rules

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = rules.workflows(REPO)
GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
CHECKOUT = "actions/checkout@08c6903cd8c0fde910a37f88322edcfb5dd907a8 # v5.0.0"


def _tool(name: str) -> str:
    """A tool of the test dependency group: beside this Python first, then on PATH."""
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    assert found, f"{name} is not installed (it is in the `test` dependency group of pyproject.toml)"
    return found


def _zizmor(folder: Path) -> subprocess.CompletedProcess:
    # --no-config: no zizmor.yml in the tree can silence a finding.
    return subprocess.run(
        [_tool("zizmor"), "--offline", "--no-config", "--no-progress", "--format", "plain", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _schema(*files: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", *map(str, files)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _job(name: str, job: str) -> dict:
    return rules.load(WORKFLOWS[name])["jobs"][job]


def _broken_copy(tmp_path: Path, name: str, old: str, new: str) -> Path:
    folder = tmp_path / ".github" / "workflows"
    folder.mkdir(parents=True, exist_ok=True)
    text = WORKFLOWS[name]
    assert old in text, old
    (folder / name).write_text(text.replace(old, new, 1))
    return folder


def test_the_three_workflows_exist():
    assert set(WORKFLOWS) == {"release.yml", "reproduce.yml", "verify.yml"}


# ------------------------------------------------------------------ zizmor


def test_zizmor_finds_nothing():
    proc = _zizmor(REPO / ".github" / "workflows")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No findings to report" in proc.stdout + proc.stderr


def test_zizmor_catches_an_injected_expression_and_an_unpinned_action(tmp_path):
    folder = _broken_copy(tmp_path, "verify.yml", '"$IMAGE" --shard', "${{ inputs.image }} --shard")
    proc = _zizmor(folder)
    assert proc.returncode != 0 and "template-injection" in proc.stdout, proc.stdout + proc.stderr
    folder = _broken_copy(tmp_path, "reproduce.yml", CHECKOUT, "actions/checkout@v5")
    proc = _zizmor(folder)
    assert proc.returncode != 0 and "unpinned-uses" in proc.stdout, proc.stdout + proc.stderr


# ------------------------------------------------------------------ the workflow schema


def test_the_workflow_schema_accepts_every_file():
    proc = _schema(*sorted((REPO / ".github" / "workflows").glob("*.yml")))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_workflow_schema_rejects_a_malformed_workflow(tmp_path):
    folder = _broken_copy(tmp_path, "release.yml", "id-token: write", "id-token: always")
    proc = _schema(folder / "release.yml")
    assert proc.returncode != 0, proc.stdout


# ------------------------------------------------------------------ the project's rules


@pytest.mark.parametrize("name", sorted(WORKFLOWS))
def test_project_rules_hold(name):
    assert rules.violations(name, WORKFLOWS[name]) == []


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (CHECKOUT, "actions/checkout@v5", "not pinned by a full commit SHA"),
        (CHECKOUT, "actions/checkout@08c6903cd8c0fde910a37f88322edcfb5dd907a8", "no `# vX.Y.Z` comment"),
        ("\npermissions: {}\n", "\npermissions: write-all\n", "top-level permissions"),
        ("    permissions:\n      contents: read\n    steps", "    steps", "no explicit permissions"),
        ("persist-credentials: false", "persist-credentials: true", "persist-credentials: false"),
        ('"$IMAGE" --shard', "${{ inputs.image }} --shard", "an expression in run:"),
        ("    timeout-minutes: 45\n", "", "no timeout-minutes"),
    ],
)
def test_project_rules_reject_a_broken_workflow(old, new, message):
    text = WORKFLOWS["verify.yml"]
    assert old in text, old
    found = rules.violations("verify.yml", text.replace(old, new, 1))
    assert any(message in f for f in found), found


def test_one_action_one_pin_across_the_workflows():
    pins: dict[str, set[str]] = {}
    for text in WORKFLOWS.values():
        for _, _, step in rules._steps(rules.load(text)):
            if "uses" in step:
                action, _, sha = step["uses"].partition("@")
                pins.setdefault(action, set()).add(sha)
    assert pins and all(len(shas) == 1 for shas in pins.values()), pins


def test_write_permissions_are_only_where_they_are_used():
    granted = {
        (name, job_id): perms
        for name, text in WORKFLOWS.items()
        for job_id, job in rules.load(text)["jobs"].items()
        for perms in [job.get("permissions") or {}]
    }
    writes = {(where, scope) for where, perms in granted.items() for scope, level in perms.items() if level == "write"}
    assert writes == {
        (("release.yml", "release"), "id-token"),
        (("release.yml", "release"), "packages"),
        (("release.yml", "propose"), "contents"),
        (("release.yml", "propose"), "pull-requests"),
        (("verify.yml", "merge"), "id-token"),
    }


# ------------------------------------------------------------------ what each workflow does


def test_release_signs_as_the_identity_trust_toml_pins():
    config = tomllib.loads((REPO / "release.toml").read_text())
    pin = tomllib.loads((REPO / "trust.toml").read_text())["trust"]["arena"]
    doc = rules.load(WORKFLOWS["release.yml"])
    # Keyless signing in this workflow on a tag push: Fulcio certifies the workflow's
    # ref, `<repository>/.github/workflows/release.yml@refs/tags/<tag>`.
    assert doc["on"] == {"push": {"tags": ["v*"]}}
    expected = f"{config['release']['source_url']}/.github/workflows/release.yml@refs/tags/*"
    assert pin["identity"] == expected
    assert pin["issuer"] == GITHUB_ISSUER
    release = doc["jobs"]["release"]
    assert release["permissions"]["id-token"] == "write"
    run = " ".join(str(s.get("run", "")) for s in release["steps"])
    assert "nox -s release -- --profile arena" in run and "nox -s audit" in run
    profile = config["profiles"]["arena"]
    assert profile["signing"] == "sigstore" and profile["registry"] == "ghcr.io"


def test_release_uploads_the_records_and_proposes_them():
    uploads = [s for s in _job("release.yml", "release")["steps"] if "upload-artifact" in s.get("uses", "")]
    assert len(uploads) == 1
    paths = uploads[0]["with"]["path"].split()
    assert {"provenance.json", "submission.json", "attestations/"} <= set(paths)
    propose = _job("release.yml", "propose")
    assert propose["needs"] == "release"
    assert "gh pr create" in " ".join(str(s.get("run", "")) for s in propose["steps"])


def test_reproduce_runs_on_both_ubuntus_for_pull_requests_and_nightly():
    doc = rules.load(WORKFLOWS["reproduce.yml"])
    assert "pull_request" in doc["on"] and doc["on"]["schedule"]
    job = doc["jobs"]["reproduce"]
    assert job["strategy"]["matrix"]["os"] == ["ubuntu-22.04", "ubuntu-24.04"]
    run = " ".join(str(s.get("run", "")) for s in job["steps"])
    assert "nox -s reproduce" in run and "nox -s audit" in run
    upload = [s for s in job["steps"] if "upload-artifact" in s.get("uses", "")]
    assert upload and upload[0]["if"] == "${{ failure() }}"


def test_verify_shards_then_merges_and_signs():
    doc = rules.load(WORKFLOWS["verify.yml"])
    assert set(doc["on"]) == {"workflow_dispatch"} and "image" in doc["on"]["workflow_dispatch"]["inputs"]
    shard = doc["jobs"]["shard"]
    assert shard["strategy"]["matrix"]["index"] == "${{ fromJSON(needs.plan.outputs.indices) }}"
    assert "--shard" in " ".join(str(s.get("run", "")) for s in shard["steps"])
    merge = doc["jobs"]["merge"]
    assert merge["needs"] == ["plan", "shard"]
    run = " ".join(str(s.get("run", "")) for s in merge["steps"])
    assert "nox -s checks -- merge" in run and "--sign sigstore" in run
