"""The admission preflight: the platform's checks by name on the real request, each with teeth.

The evidence (check results, per-task verification, sizes) is a stand-in of a release's, with
the real layer descriptors of the MiMo images (tests/submission/test_sizes.py); the built image
is a real image in the real local registry. ghcr.io is the public internet: resolving the MiMo
images there passes online and is "not checked" offline, never a pass by skipping."""

from __future__ import annotations

import copy
import json
import socket
import subprocess
import sys
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline import config, plan
from pipeline.checks import schema
from pipeline.checks.external import ExternalResult
from pipeline.checks.results import CheckResult, SuiteResult
from pipeline.config import Admission
from pipeline.errors import CheckFailure
from pipeline.image.oci import image as oci_image
from pipeline.image.oci.layer import FileEntry, write_layer
from pipeline.image.oci.layout import Layout
from pipeline.records import preflight, sizes, submission, verification
from pipeline.registry.push import push_layout
from tests.curriculum import all_cases

from .test_sizes import CONFIG_000666, CONFIG_001926, MIMO_000666, MIMO_001926

REPO = Path(__file__).resolve().parents[2]
COMMIT = "c" * 40
CASE_CHECKS = ("reset", "identity-across-seeds", "correct", "wrong", "cached-terminal")
EXTERNAL_CHECKS = (
    "health",
    "openenv_endpoint_validation",
    "reset_task_identity",
    "unsolved_terminal_reward_zero",
    "reference_terminal_reward_one",
)


@pytest.fixture(scope="module")
def pushed(local_registry, tmp_path_factory) -> str:
    """A small real image in the local registry: the request's built image, by digest."""
    layout = Layout.init(tmp_path_factory.mktemp("preflight-image"))
    layer = write_layer(
        [FileEntry("opt", "dir", 0o755), FileEntry("opt/marker", "file", 0o644, source=b"x\n")],
        layout.root / "blobs" / "sha256",
        source_date_epoch=1_700_000_000,
    )
    built = oci_image.derive(
        None,
        [oci_image.NewLayer(layer.digest, layer.diff_id, layer.size, "test")],
        oci_image.ConfigChanges(cmd=("/bin/sh",)),
        source_date_epoch=1_700_000_000,
    )
    layout.put_bytes(built.config_bytes)
    layout.add_manifest(built.manifest_bytes, built.media_type, ref_name="t")
    repository = f"arena/preflight-{uuid.uuid4().hex[:8]}"
    done = push_layout(local_registry.client(), repository, layout.root, ref_name="t", tag="t")
    return f"{repository}@{done.manifest_digest}"


def _suite(
    image: str,
    *,
    failing: tuple[str, ...] = (),
    missing: tuple[str, ...] = (),
    external_checks: tuple[str, ...] = EXTERNAL_CHECKS,
    started: bool = True,
    served=None,
) -> SuiteResult:
    cfg = config.load()
    ids = [f"image/{n}" for n in ("health", "schema", "openenv-validate", "uid")]
    ids += [f"{c.id}/{n}" for c in all_cases() for n in CASE_CHECKS]
    checks = [CheckResult(i, i not in failing, 0.1) for i in ids if i not in missing]
    descriptors = {
        "format-code-task-000666": (CONFIG_000666, MIMO_000666),
        "format-code-task-001926": (CONFIG_001926, MIMO_001926),
    }
    ext = []
    for task in cfg.external.tasks:
        conf, layers = descriptors[task.task_id]
        ran = (
            tuple(
                CheckResult(f"{task.task_id}/{n}", f"{task.task_id}/{n}" not in failing, 0.1) for n in external_checks
            )
            if started
            else ()
        )
        ext.append(
            ExternalResult(
                task.task_id,
                task.image,
                config_digest=conf.digest,
                config_size=conf.size,
                layers=tuple((b.digest, b.size) for b in layers),
                checks=ran,
                schema_equal=True if started else None,
                notes=() if started else ("image not started: repair checks not run",),
            ).to_json()
        )
    return SuiteResult(
        image=image,
        targets=("http://127.0.0.1:1",),
        checks=tuple(checks) + tuple(c for e in ext for c in (CheckResult.from_json(x) for x in e["checks"])),
        seconds=1.0,
        schema=schema.declared() if served is None else served,
        external=tuple(ext),
        layers=(("sha256:" + "e" * 64, 40_000),),
        config=("sha256:" + "f" * 64, 1_500),
    )


def _release(image: str, suite: SuiteResult | None = None, profile: str = "local"):
    """The request the release writes from the real release.toml, and its evidence."""
    cfg = config.load()
    suite = suite or _suite(image)
    tasks = verification.build(cfg, plan.resolve(cfg, profile).external, suite, image=image)
    measured = sizes.measure(sizes.descriptors(suite, image, cfg.external.tasks))
    request = submission.build(cfg, plan.resolve(cfg, profile).request, tasks, image=image, source_revision=COMMIT)
    return submission.to_json(request), preflight.Evidence(suite, tasks, measured)


def _run(data, evidence, local_registry, admission: Admission | None = None) -> preflight.Report:
    name = data["image"].partition("@")[0] if isinstance(data.get("image"), str) else ""
    return preflight.run(
        data,
        evidence=evidence,
        admission=admission or config.load().admission,
        resolve=preflight.resolver({name: local_registry.address}),
    )


def _by_name(report: preflight.Report, status: str) -> set[str]:
    return {o.name for o in report.outcomes if o.status == status}


def test_the_real_request_passes_every_admission_check(pushed, local_registry):
    data, evidence = _release(pushed)
    report = _run(data, evidence, local_registry)
    assert not report.failures, report.render()
    names = {o.name for o in report.outcomes}
    assert names == set(preflight.REQUEST_CHECKS) | set(preflight.TASK_CHECKS)
    resolved = {o.subject: o.status for o in report.outcomes if o.name == "image_resolved"}
    assert resolved.pop(pushed) == preflight.PASS
    # ghcr.io: resolved online; offline it says so, and that is not a pass.
    assert set(resolved.values()) <= {preflight.PASS, preflight.NOT_CHECKED} and len(resolved) == 2
    assert [o for o in report.outcomes if o.status == preflight.NOT_CHECKED and o.name != "image_resolved"] == []
    assert sum(o.name == "native_episode" and o.status == preflight.PASS for o in report.outcomes) == 34
    if report.not_checked:
        assert not report.ok(strict=True) and report.ok(strict=False)
        with pytest.raises(CheckFailure, match="image_resolved ghcr.io/.* could not be checked"):
            report.enforce(strict=True)
    report.enforce(strict=False)


def test_an_external_task_asking_for_44_gib_fails_the_disk_rule(pushed, local_registry):
    data, evidence = _release(pushed)
    copied = copy.deepcopy(data)
    copied["tasks"][8]["workspace_gib"] = 44
    report = _run(copied, evidence, local_registry)
    assert [(o.name, o.status) for o in report.failures] == [("sandbox_disk", preflight.FAIL)]
    detail = report.failures[0].detail
    assert detail.startswith(
        "ENVIRONMENT_TOO_LARGE_FOR_SANDBOX: compressed image + workspace + headroom exceeds "
        "the 50 GiB sandbox disk for 1 task(s): format-code-task-000666 (image 0.53 + "
        "workspace 44 + headroom 24 = 68.53 GiB)"
    )
    with pytest.raises(CheckFailure, match="admission preflight: sandbox_disk failed: ENVIRONMENT_TOO_LARGE"):
        report.enforce(strict=False)


def test_the_headroom_is_a_setting_whose_default_agrees_with_the_platforms_answers(pushed, local_registry):
    # The platform refused a 0.63 GB image with 44 GiB and admitted a 0.67 GB image with 10 GiB:
    # its headroom lies between 5.4 and 39.3 GiB, and so does the default.
    default = config.load().admission
    assert default == Admission() and 5.4 < default.headroom_gib < 39.3 and default.sandbox_disk_gib == 50
    GB = 10**9
    for image_bytes, workspace, admitted in ((0.63 * GB, 44, False), (0.67 * GB, 10, True)):
        needed = image_bytes / preflight.GIB + workspace + default.headroom_gib
        assert (needed <= default.sandbox_disk_gib) is admitted
    # The release.toml value is the one applied: with 5 GiB of headroom the 44 GiB task fits.
    data, evidence = _release(pushed)
    data["tasks"][8]["workspace_gib"] = 44
    report = _run(data, evidence, local_registry, Admission(sandbox_disk_gib=50, headroom_gib=5))
    assert not report.failures, report.render()


def _bad_schema(data):
    data["schema"]["action"]["properties"]["operation"]["description"] = "another description"


@pytest.mark.parametrize(
    "name,forge",
    [
        ("typed_contract", lambda d: d.update(format="openenv-arena-submission/v1")),
        ("unique_tasks", lambda d: d["tasks"].append(dict(d["tasks"][0]))),
        ("training_tasks", lambda d: d["tasks"][8].update(split="code")),
        ("openenv_schema", _bad_schema),
        ("native_schema", _bad_schema),
        ("sandbox_disk", lambda d: d["tasks"][20].update(workspace_gib=30)),
    ],
)
def test_a_forged_request_fails_its_check(pushed, local_registry, name, forge):
    data, evidence = _release(pushed)
    forged = copy.deepcopy(data)
    forge(forged)
    report = _run(forged, evidence, local_registry)
    assert name in {o.name for o in report.failures}, report.render()


@pytest.mark.parametrize(
    "name,suite",
    [
        ("pinned_openenv_endpoint", dict(failing=("image/openenv-validate",))),
        ("pinned_openenv_endpoint", dict(failing=("format-code-task-000666/openenv_endpoint_validation",))),
        ("native_schema", dict(missing=("image/schema",))),
        ("native_schema", dict(served={**schema.declared(), "observation": {"type": "object", "properties": {}}})),
        ("openenv_schema", dict(served={**schema.declared(), "observation": {"type": "object", "properties": {}}})),
        ("native_episode", dict(failing=("math_route-d2-s307/correct",))),
    ],
    ids=[
        "procedural-validate-failed",
        "external-validate-failed",
        "schema-check-missing",
        "served-other-schema",
        "one-schema",
        "episode-failed",
    ],
)
def test_evidence_that_does_not_hold_fails_the_task_checks(pushed, local_registry, name, suite):
    data, good = _release(pushed)
    forged = _suite(pushed, **suite)
    evidence = replace(good, checks=forged)
    if "failing" in suite and suite["failing"][0].startswith("math_route"):
        tasks = tuple(
            replace(t, verification=replace(t.verification, status="failed", failed=1))
            if t.task_id == "math_route-d2-s307"
            else t
            for t in good.tasks
        )
        evidence = replace(evidence, tasks=tasks)
    report = _run(data, evidence, local_registry)
    assert name in {o.name for o in report.failures}, report.render()


def test_an_external_image_never_validated_is_not_checked_not_passed(pushed, local_registry):
    data, evidence = _release(pushed)
    unvalidated = _suite(pushed, external_checks=EXTERNAL_CHECKS[:1] + EXTERNAL_CHECKS[2:])
    report = _run(data, replace(evidence, checks=unvalidated), local_registry)
    endpoint = {o.subject: o for o in report.outcomes if o.name == "pinned_openenv_endpoint"}
    assert endpoint["format-code-task-000666"].status == preflight.NOT_CHECKED
    assert "openenv_endpoint_validation" in endpoint["format-code-task-000666"].detail
    assert not report.failures and not report.ok(strict=True)


def test_the_checks_of_the_pulled_reference_count_for_its_digest_not_another(pushed, local_registry):
    """The suite records the reference it pulled (with the registry's address): the same digest
    is the same image; another digest is not."""
    data, evidence = _release(pushed)
    pulled = replace(evidence.checks, image=f"{local_registry.address}/{pushed}")
    assert not _run(data, replace(evidence, checks=pulled), local_registry).failures
    other = replace(evidence.checks, image=pushed.partition("@")[0] + "@sha256:" + "0" * 64)
    failed = {(o.name, o.subject) for o in _run(data, replace(evidence, checks=other), local_registry).failures}
    assert ("pinned_openenv_endpoint", "math_route-d2-s307") in failed


def test_an_image_without_a_recorded_size_fails_image_sizes(pushed, local_registry):
    data, evidence = _release(pushed)
    fewer = replace(evidence.sizes, images=evidence.sizes.images[:2])
    report = _run(data, replace(evidence, sizes=fewer), local_registry)
    assert ("image_sizes", preflight.FAIL) in {(o.name, o.status) for o in report.outcomes}


def test_an_image_named_with_its_registry_resolves_there(pushed, local_registry):
    """The arena profile names its image with the registry (the local profile without): a mapping
    for the name changes nothing then."""
    named = f"{local_registry.address}/{pushed}"
    data, evidence = _release(named, _suite(named))
    report = preflight.run(
        data,
        evidence=evidence,
        admission=Admission(),
        resolve=preflight.resolver({named.partition("@")[0]: local_registry.address}),
    )
    assert next(o for o in report.outcomes if o.subject == named).status == preflight.PASS


def test_an_image_the_registry_does_not_hold_fails_image_resolved(pushed, local_registry):
    data, evidence = _release(pushed)
    absent = pushed.partition("@")[0] + "@sha256:" + "0" * 64
    report = _run({**data, "image": absent}, evidence, local_registry)
    resolved = {o.subject: o for o in report.outcomes if o.name == "image_resolved"}
    assert resolved[absent].status == preflight.FAIL and "HTTP 404" in resolved[absent].detail


def test_an_unreachable_registry_is_not_checked_and_strict_fails_on_it(pushed):
    data, evidence = _release(pushed)
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{sock.getsockname()[1]}"
    report = preflight.run(
        data, evidence=evidence, admission=Admission(), resolve=preflight.resolver({pushed.partition("@")[0]: closed})
    )
    mine = next(o for o in report.outcomes if o.name == "image_resolved" and o.subject == pushed)
    assert mine.status == preflight.NOT_CHECKED and mine.detail.startswith("registry not reachable")
    assert not report.ok(strict=True)
    with pytest.raises(CheckFailure, match="image_resolved"):
        report.enforce(strict=True)


def test_external_images_not_started_are_not_checked_not_passed(pushed, local_registry):
    data, evidence = _release(pushed, _suite(pushed, started=False))
    report = _run(data, evidence, local_registry)
    external = {(o.name, o.status) for o in report.outcomes if o.subject.startswith("format-code-task-")}
    assert external == {(n, preflight.NOT_CHECKED) for n in preflight.TASK_CHECKS}
    assert ("openenv_schema", preflight.NOT_CHECKED) in {(o.name, o.status) for o in report.outcomes}
    assert not report.failures


def test_no_evidence_is_not_checked(pushed, local_registry):
    data, _ = _release(pushed)
    report = _run(data, preflight.Evidence(), local_registry)
    assert not report.failures
    assert {"image_sizes", "sandbox_disk", "openenv_schema", *preflight.TASK_CHECKS} <= _by_name(
        report, preflight.NOT_CHECKED
    )


# ------------------------------------------------------------------ the command line, on signed records


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", "preflight", *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
def test_the_command_passes_a_releases_request_and_fails_its_44_gib_copy(tmp_path, monkeypatch):
    from tests.attest.conftest import EPOCH, make_records

    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(EPOCH))
    records = make_records(tmp_path / "records").root
    proc = _cli(str(records / "submission.json"), "--config", str(records / "release.toml"), "--registry", "")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("PREFLIGHT PASSED")
    # registry.example.invalid cannot be reached: said, and --strict fails on it.
    assert "NOT CHECKED  image_resolved registry.example.invalid/" in proc.stdout
    assert (
        _cli(
            str(records / "submission.json"), "--config", str(records / "release.toml"), "--registry", "", "--strict"
        ).returncode
        == 1
    )
    data = json.loads((records / "submission.json").read_text())
    data["tasks"][8]["workspace_gib"] = 44
    copied = records / "submission-44.json"
    copied.write_text(json.dumps(data))
    proc = _cli(str(copied), "--config", str(records / "release.toml"), "--registry", "")
    assert proc.returncode == 1
    assert "FAIL         sandbox_disk: ENVIRONMENT_TOO_LARGE_FOR_SANDBOX" in proc.stdout
    assert proc.stderr.strip().endswith("preflight: FAILED (sandbox_disk)")
