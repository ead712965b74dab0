"""The release engineer's command end to end, in a fresh clone: a real local registry,
the real base, podman, the full check suite, signatures; then the auditor's commands on
its records, a second run that must reproduce the digest, and the faults: Ctrl-C
mid-release and a failing check. (CI's from-scratch reproduction of a new release's
records, in a fresh clone with no registry, is the README walk's `ci` checkout:
tests/e2e/test_readme_walk.py.)

The first release is made once for the whole run (tests/shared.py) and only read; each
test that runs something more in the released checkout does it in its own copy, so the
tests run side by side in the xdist workers instead of one after another."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.registry import local as localregistry
from pipeline.runtime import dockerd

from ..attest.test_sigstore_js import sigstore_js  # noqa: F401  (a fixture)
from ..base.basefixtures import base_image  # noqa: F401  (a fixture)
from ..containers import ContainerScope
from ..shared import copy_tree, once, shared_result, suite_slot
from .caches import seed_caches

REPO = Path(__file__).resolve().parents[2]
RECORDS = ("provenance.json", "submission.json", "attestations")

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.root, pytest.mark.container]


def _env(clone: Path, scope: ContainerScope) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELEASE_")}
    env.update(PYTHONDONTWRITEBYTECODE="1", HOME=str(clone / ".release" / "home"), **scope.env())
    return env


def pipeline(
    clone: Path, *args: str, scope: ContainerScope | None = None, timeout: float = 1200
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        cwd=clone,
        env=_env(clone, scope or ContainerScope.new()),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def records_digest(root: Path) -> str:
    h = hashlib.sha256()
    for name in RECORDS:
        path = root / name
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for f in files:
            if f.exists():
                h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def _tree_bytes(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _dataset_bytes(clone: Path) -> dict[str, bytes]:
    return _tree_bytes(clone / "dist" / "dataset")


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
        },
    )


def _clone(dest: Path) -> Path:
    """A fresh clone of this checkout, its base caches seeded."""
    subprocess.run(["git", "clone", "-q", str(REPO), str(dest)], check=True)
    seed_caches(dest)
    return dest


@dataclass(frozen=True)
class Released:
    """The checkout after `python -m pipeline release`, what it printed, and the label its
    containers carried."""

    checkout: Path
    stdout: str
    stderr: str
    scope: ContainerScope


@shared_result
def released(tmp_path_factory, base_image) -> Released:
    """One local release in a fresh clone, made once per run (base_image: the pinned base's
    layout is there to copy). Read it only; run more in `release_copy`."""

    def make(root: Path) -> None:
        clone = _clone(root / "checkout")
        scope = ContainerScope.new()
        try:
            with suite_slot():
                proc = pipeline(clone, "release", scope=scope)
        finally:
            localregistry.stop(clone / ".release" / "registry")
        for name in ("stdout", "stderr"):
            (root / name).write_text(getattr(proc, name))
        (root / "scope").write_text(scope.label)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]

    root = once(tmp_path_factory, "e2e-release", make)
    return Released(
        checkout=root / "checkout",
        stdout=(root / "stdout").read_text(),
        stderr=(root / "stderr").read_text(),
        scope=ContainerScope((root / "scope").read_text()),
    )


@pytest.fixture
def releasing():
    """`with releasing():` around a release a test runs (tests/shared.py: suite_slot)."""
    return suite_slot


def _copy_released(released: Released, dest: Path) -> Path:
    """A private copy of the released checkout (git history, records, dist/, .release/)."""
    copy = copy_tree(released.checkout, dest)
    # The registry prefers its previous port on a restart: copies started side by side
    # would all prefer the same one.
    (copy / ".release" / "registry" / "ports.json").unlink(missing_ok=True)
    return copy


@pytest.fixture
def release_copy(released, tmp_path):
    """A private copy of the released checkout, its registry stopped at the end."""
    copy = _copy_released(released, tmp_path / "checkout")
    yield copy
    localregistry.stop(copy / ".release" / "registry")


def test_local_release_offline_says_loudly_the_external_tasks_are_not_verified(released):
    # ghcr.io is unreachable here (as in CI): nothing is started, nothing claims a pass.
    clone = released.checkout
    assert "external task(s) NOT VERIFIED" in released.stderr
    prov = json.loads((clone / "provenance.json").read_text())
    externals = [t for t in prov["tasks"] if t["task_id"].startswith("format-code-task-")]
    assert len(externals) == 2 and {t["kind"] for t in externals} == {"external"}
    for task in externals:
        assert task["verification"]["status"].startswith("not verified: ")
        assert "checks" not in task["verification"] and task["verification"]["passed"] == 0
    checks = json.loads((clone / "dist" / "checks.json").read_text())
    assert not [c for c in checks["checks"] if c["id"].startswith("format-code-task-")]
    table = (clone / "dist" / "report.md").read_text().split("## External repair checks", 1)[1]
    assert "| format-code-task-000666 | " + " | ".join(["-"] * 12) + " |" in table
    # The admission preflight could not resolve ghcr.io: said, never a pass.
    assert "admission check(s) NOT CHECKED here (profile local carries on): image_resolved" in released.stderr
    # Their sizes are the declared ones: the platform's measure is unknown without their manifests.
    assert prov["sizes"]["platform_bytes"] is None
    assert [i["measured"] for i in prov["sizes"]["images"]] == [True, False, False]


def test_preflight_passes_the_request_and_fails_its_44_gib_copy(release_copy):
    clone = release_copy
    proc = pipeline(clone, "preflight")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("PREFLIGHT PASSED: ") and "FAIL " not in proc.stdout
    data = json.loads((clone / "submission.json").read_text())
    data["tasks"][8]["workspace_gib"] = 44
    copied = clone / "dist" / "submission-44.json"
    copied.write_text(json.dumps(data))
    proc = pipeline(clone, "preflight", str(copied), "--records", str(clone))
    assert proc.returncode == 1
    assert "FAIL         sandbox_disk: ENVIRONMENT_TOO_LARGE_FOR_SANDBOX" in proc.stdout
    assert "preflight: FAILED (sandbox_disk)" in proc.stderr


@dataclass(frozen=True)
class Rerun:
    """A copy of the released checkout whose next release lost its registry mid-push
    (SIGKILL), then the same release run again: what each printed and left behind."""

    checkout: Path
    facts: dict  # image, records digests, container lists, return codes (rerun.json)
    killed_stderr: str
    rerun_stderr: str
    dataset_before: dict[str, bytes]


@shared_result
def rerun(released, tmp_path_factory) -> Rerun:
    """Made once per run and read by two tests: the rerun after the kill is also this
    checkout's second whole release (one release fewer a run than each test running its own)."""

    def make(root: Path) -> None:
        clone = _copy_released(released, root / "checkout")
        copy_tree(clone / "dist" / "dataset", root / "dataset-before")
        facts: dict = {
            "records_before": records_digest(clone),
            "image_before": json.loads((clone / "submission.json").read_text())["image"],
        }
        scope = ContainerScope.new()
        try:
            with suite_slot():
                proc = subprocess.Popen(
                    [sys.executable, "-m", "pipeline", "release", "--allow-dirty"],
                    cwd=clone,
                    env=_env(clone, scope),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                seen = []
                for line in proc.stderr:
                    seen.append(line)
                    if line.startswith("==> push"):
                        state = json.loads((clone / ".release" / "registry" / "state.json").read_text())
                        os.kill(state["registry_pid"], signal.SIGKILL)
                        break
                _, err = proc.communicate(timeout=600)
            (root / "killed.stderr").write_text("".join(seen) + err)
            facts.update(
                killed_returncode=proc.returncode,
                records_after_kill=records_digest(clone),
                containers_after_kill=scope.containers(),
            )
            with suite_slot():
                again = pipeline(clone, "release", "--allow-dirty")
            (root / "rerun.stderr").write_text(again.stderr)
            facts.update(rerun_returncode=again.returncode)
        finally:
            localregistry.stop(clone / ".release" / "registry")
        (root / "rerun.json").write_text(json.dumps(facts))

    root = once(tmp_path_factory, "e2e-rerun", make)
    return Rerun(
        checkout=root / "checkout",
        facts=json.loads((root / "rerun.json").read_text()),
        killed_stderr=(root / "killed.stderr").read_text(),
        rerun_stderr=(root / "rerun.stderr").read_text(),
        dataset_before=_tree_bytes(root / "dataset-before"),
    )


def test_registry_killed_mid_release_then_a_rerun_completes(rerun):
    facts, clone = rerun.facts, rerun.checkout
    assert facts["killed_returncode"] != 0, rerun.killed_stderr[-3000:]
    assert "previous records are untouched" in rerun.killed_stderr
    assert facts["records_after_kill"] == facts["records_before"]
    assert facts["containers_after_kill"] == []
    assert facts["rerun_returncode"] == 0, rerun.rerun_stderr[-4000:]
    image = facts["image_before"]
    assert json.loads((clone / "submission.json").read_text())["image"] == image
    assert json.loads((clone / "provenance.json").read_text())["image"]["digest"] == image.split("@")[1]
    # Two releases of one commit: the same dataset bytes, but for what records clock time (the signed
    # statements, the links and layout, checks.json's timings) and, in provenance.json, whether the
    # release was allowed a dirty checkout (this rerun is; the release before it may not have been).
    again, dataset_before = _dataset_bytes(clone), rerun.dataset_before
    assert sorted(again) == sorted(dataset_before)
    for name in ("README.md", "tasks.jsonl", "submission.json"):
        assert again[name] == dataset_before[name], name
    unclocked = [json.loads(files["provenance.json"]) for files in (again, dataset_before)]
    for prov in unclocked:
        prov["project"]["allow_dirty"] = True
    assert unclocked[0] == unclocked[1]


def test_a_failing_check_stops_the_release_and_keeps_the_previous_records(release_copy, releasing):
    clone = release_copy
    before = records_digest(clone)
    scope = ContainerScope.new()
    shell = clone / "env" / "server" / "shell.py"
    text = shell.read_text()
    assert "12_000" in text or "12000" in text
    shell.write_text(text.replace("12_000", "24_000").replace("12000", "24000"))
    _git(clone, "commit", "-q", "-m", "break the output cap", "--", "env/server/shell.py")
    try:
        with releasing():
            proc = pipeline(clone, "release", scope=scope)
    finally:
        _git(clone, "revert", "--no-edit", "HEAD")
    assert proc.returncode != 0
    assert "image/output-cap" in proc.stderr
    assert "previous records are untouched" in proc.stderr
    assert records_digest(clone) == before
    assert scope.containers() == []


def test_second_release_reuses_the_base_and_reproduces_the_digest(rerun):
    """The checkout's second whole release (the `rerun` after the killed one): the base the
    registry still holds is used as it is, and the image digest comes out again."""
    assert rerun.facts["rerun_returncode"] == 0, rerun.rerun_stderr[-4000:]
    assert "base up to date" in rerun.rerun_stderr
    assert json.loads((rerun.checkout / "submission.json").read_text())["image"] == rerun.facts["image_before"]


def test_ctrl_c_mid_release_leaves_no_container_registry_or_half_record(release_copy, releasing):
    clone = release_copy
    before = records_digest(clone)
    scope = ContainerScope.new()
    with releasing():
        # SIGINT handled as a terminal's Ctrl-C finds it, even when this run of the suite
        # inherited it ignored (a shell's background job: `CI=true bash .ci/run &`).
        proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline", "release", "--allow-dirty"],
            cwd=clone,
            env=_env(clone, scope),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        seen = []
        deadline = time.monotonic() + 600
        for line in proc.stderr:
            seen.append(line)
            # The suite's containers are up and healthy; its jobs (the minute-long timeout
            # check among them) are still to run. (Its first "done" line can come late: the
            # two longest jobs may run first, and the rest then take seconds.)
            if line.startswith("checks: ") and "container(s) of" in line:
                break
            assert time.monotonic() < deadline, "".join(seen[-20:])
        assert scope.containers(), "containers should be running mid-suite"
        running = proc.poll() is None
        proc.send_signal(signal.SIGINT)
        _, rest = proc.communicate(timeout=180)
    assert running, "the release ended before Ctrl-C:\n" + "".join(seen[-20:]) + rest[-3000:]
    assert proc.returncode != 0, "".join(seen[-20:]) + rest[-3000:]
    # It stopped at once, not once every job of the suite had run.
    assert "interrupted" in rest and not re.search(r"checks: (\d+)/\1 done", rest), rest[-3000:]
    assert scope.containers() == []
    assert localregistry.status(clone / ".release" / "registry") is None
    assert dockerd.status(scope.docker_dir) is None
    assert records_digest(clone) == before


def test_audit_passes_on_the_release_records(released, release_copy):
    clone = release_copy
    # The clone's fresh key is not pinned in trust.toml: the release says so, and how to pin it.
    assert "WARNING: the release key" in released.stderr and "keyids = [" in released.stderr
    key = pipeline(clone, "key")
    assert key.returncode == 0, key.stderr
    keyid = next(l.split()[-1] for l in key.stdout.splitlines() if l.startswith("keyid:"))
    assert f'keyids = ["{keyid}"]' in released.stderr
    refused = pipeline(clone, "audit")
    assert refused.returncode != 0 and keyid in refused.stdout and "pinned" in refused.stdout
    # With the auditor's own copy of that key (`pipeline key` wrote the public half) it passes,
    # SBOM against the image's layers (dist/oci) included.
    proc = pipeline(clone, "audit", "--key", str(clone / ".release" / "keys" / "release.pub.pem"))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert proc.stdout.startswith("AUDIT PASSED") and "FAIL" not in proc.stdout


def test_release_pushed_standard_referrers_that_sigstore_js_and_the_audit_verify(release_copy, sigstore_js):
    """From the image digest alone, over plain HTTP: the local registry holds one Sigstore bundle
    per signed statement and the release's verification summary (the referrers tag schema:
    docker-registry has no referrers API), and sigstore-js verifies each with the release key;
    `audit --registry` finds and verifies them, the summary (the release's self-check) too."""
    clone = release_copy
    state = localregistry.start(clone / ".release" / "registry")
    try:
        image = json.loads((clone / "submission.json").read_text())["image"]
        key = clone / ".release" / "keys" / "release.pub.pem"
        proc = subprocess.run(
            ["node", str(sigstore_js), f"{state.address}/{image}", "--key", str(key)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        digest = image.split("@")[1]
        assert proc.stdout.splitlines()[-1] == f"5 of 5 Sigstore bundles referring to {digest} verified"
        assert proc.stdout.splitlines()[4].startswith("OK https://slsa.dev/verification_summary/v1 ")
        audited = pipeline(clone, "audit", "--registry", "--verbose", "--key", str(key))
        assert audited.returncode == 0, audited.stdout[-4000:] + audited.stderr[-2000:]
        for cid in (
            "registry/referrers",
            "registry/vsa",
            "registry/release",
            "registry/provenance",
            "registry/sbom",
            "registry/checks",
        ):
            assert re.search(rf"^PASS +{re.escape(cid)} ", audited.stdout, re.M), audited.stdout[-4000:]
        assert "-> 5 Sigstore bundle(s) signed by the trust root: " in audited.stdout
        # The summary the release signed and kept in dist/ (not a record), and its report's table.
        summary = json.loads((clone / "dist" / "vsa.release.dsse.json").read_text())
        assert summary["signatures"][0]["keyid"] in audited.stdout
        report = (clone / "dist" / "report.md").read_text()
        assert "| `https://slsa.dev/verification_summary/v1` |" in report and "self-check" in report
    finally:
        localregistry.stop(clone / ".release" / "registry")


def test_reproduce_whole_image_digest_when_the_base_is_available(release_copy):
    clone = release_copy
    localregistry.start(clone / ".release" / "registry")
    try:
        proc = pipeline(clone, "reproduce")
    finally:
        localregistry.stop(clone / ".release" / "registry")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    digest = json.loads((clone / "provenance.json").read_text())["image"]["digest"]
    assert f"image same: recorded {digest}  rebuilt {digest}" in proc.stdout


def test_release_writes_verified_signed_records_and_stops_what_it_started(released):
    clone = released.checkout
    sub = json.loads((clone / "submission.json").read_text())
    # Exactly the request the platform accepted.
    assert set(sub) == {
        "submission_id",
        "name",
        "image",
        "schema",
        "tasks",
        "example_actions",
        "finish_action",
        "dataset",
        "source",
    }
    assert len(sub["tasks"]) == 34
    assert [t["task_id"] for t in sub["tasks"]][8] == "format-code-task-000666"
    assert {t["workspace_gib"] for t in sub["tasks"]} == {10} and sub["finish_action"] == {"operation": "finish"}
    prov = json.loads((clone / "provenance.json").read_text())
    assert sub["source"].endswith("/tree/" + prov["project"]["commit"])
    ours = [t for t in prov["tasks"] if t["kind"] == "procedural"]
    assert len(ours) == 32 and all(t["verification"]["status"] == "verified" for t in ours)
    assert sub["image"] == f"{prov['image']['name']}@{prov['image']['digest']}"
    for name in (
        "release.dsse.json",
        "provenance.dsse.json",
        "sbom.dsse.json",
        "checks.dsse.json",
        "sbom.cdx.json",
        "checks.json",
        "layout.json",
        "release.pub.pem",
        "keyid",
    ):
        assert (clone / "attestations" / name).is_file(), name
    report = (clone / "dist" / "report.md").read_text()
    assert prov["image"]["digest"] in report and "Stage timings" in report
    # The share of SBOM components with a licence, as the SBOM committed counts it, in both places.
    from pipeline.records import sbom_licenses

    sbom_doc = json.loads((clone / "attestations" / "sbom.cdx.json").read_text())
    coverage = sbom_licenses.coverage_line(sbom_doc["components"])
    assert f"- SBOM licences: {coverage}" in report and f"sbom: {coverage}" in released.stderr
    # The diff against the records committed at HEAD (pipeline.diff), in the report and the output.
    changes = report.split("## Changes since the committed records", 1)[1].split("## Stage timings")[0]
    assert "- old: `HEAD (" in changes and "- new: `the records this release wrote`" in changes
    assert "changes since the committed records: " in released.stderr
    assert "checks: " in released.stderr  # the suite ran in containers that carried the label
    assert localregistry.status(clone / ".release" / "registry") is None
    assert released.scope.containers() == []
    # The suite ran under podman and the private Docker engine, which the release stopped.
    checks = json.loads((clone / "attestations" / "checks.json").read_text())
    assert [(r["name"], r["isolation"]) for r in checks["runtimes"]] == [
        ("podman", "namespaces"),
        ("docker", "unprivileged"),
    ]
    assert "stopped the private Docker engine (its last user ended)" in released.stderr
    assert dockerd.status(released.scope.docker_dir) is None


def test_release_writes_the_dataset_folder_and_says_it_was_not_published(released, tmp_path):
    clone = released.checkout
    folder = clone / "dist" / "dataset"
    files = _dataset_bytes(clone)
    lines = files["tasks.jsonl"].decode().splitlines()
    sub = json.loads((clone / "submission.json").read_text())
    assert [json.loads(line)["task_id"] for line in lines] == [t["task_id"] for t in sub["tasks"]]
    assert len(lines) == 34
    assert not any(name.startswith("vendor/") for name in files)  # the local profile vendors nothing
    assert files["openenv.yaml"] == (clone / "env" / "openenv.yaml").read_bytes()  # the OpenEnv manifest
    card = files["README.md"].decode()
    assert "No upstream file is vendored in the `local` profile" in card and "does not publish it" in card
    assert sub["image"] in card
    for name in ("provenance.json", "submission.json", "attestations/release.dsse.json", "attestations/checks.json"):
        assert files[name] == (clone / name).read_bytes(), name
    prov = json.loads((clone / "provenance.json").read_text())
    assert prov["dataset"] == {
        "repository": "arena/openenv-data-workflows",
        "published": False,
        "revision": None,
        "url": None,
        "files_read_back": 0,
        "reason": "not published: the local profile does not publish the dataset",
    }
    assert "NOT PUBLISHED: the local profile does not upload it" in released.stderr
    # a consumer's own reader, offline
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import datasets, sys; t = datasets.load_dataset(sys.argv[1])['train'];"
            " print(t.num_rows, list(t['task_id'])[8])",
            str(folder),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-2:] == ["34", "format-code-task-000666"]
