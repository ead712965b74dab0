"""The repair checks against stand-in MiMo repair images in the real container runtime.

The stand-ins (tests/checks/repair_standin) are built once per module with the
project's base builder and image machinery and pushed to the real local registry
standing in for ghcr.io (plain HTTP on loopback); each is checked as the release and
`repair-checks` check any repair image: registry facts, anonymous pull by digest,
started under the external budget, checked over the OpenEnv WebSocket protocol. The
good stand-in passes every check; each broken one fails exactly the check it breaks.
The runs share a small thread pool: most of a run is waiting on its container.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from concurrent.futures import ThreadPoolExecutor

import pytest

from pipeline import config
from pipeline.checks import external, repair
from pipeline.config import ExternalPolicy
from pipeline.errors import CheckFailure
from pipeline.image.oci.image import DOCKER, parse_config, parse_manifest
from pipeline.imageref import ImageRef
from pipeline.registry.client import RegistryClient
from pipeline.runtime.limits import ExternalLimits
from pipeline.runtime.runtime import ContainerRuntime

from ..base.basefixtures import base_image  # noqa: F401
from .repair_standin import FAULT_FAILS, REFERENCE_SCRIPT, build_standins

# The module's fixture runs twenty stand-ins' checks (one waits over two minutes by design):
# 430 s alone on two cores, twice that beside a second run of the suite. `first`: it waits
# for the run's base (the stand-ins' base) and then runs two to four minutes; queued behind
# the other tests that need the base, it started six minutes into a run and ended it.
pytestmark = [pytest.mark.root, pytest.mark.container, pytest.mark.slow, pytest.mark.first, pytest.mark.timeout(1800)]
TASK = "format-code-task-000666"
REFERENCE = repair.ReferenceRepair.read(REFERENCE_SCRIPT)
# References that are not the repair: one runs and repairs nothing, one fails.
NO_FIX = repair.ReferenceRepair(b"print('looked around, changed nothing')\n", "no-fix.py")
FAILING = repair.ReferenceRepair(b"raise SystemExit('cannot repair')\n", "failing.py")
# job -> (stand-in fault, reference); every job runs once, in parallel, for the module.
JOBS = {
    "good": ("", REFERENCE),
    "no-reference": ("", None),
    "reference-no-fix": ("", NO_FIX),
    "reference-fails": ("", FAILING),
    **{fault: (fault, REFERENCE) for fault in FAULT_FAILS},
}


@pytest.fixture(scope="module")
def standins(local_registry, base_image, tmp_path_factory):
    return build_standins(local_registry, base_image, tmp_path_factory.mktemp("standins"), task_id=TASK)


def check(image: str, reference: repair.ReferenceRepair | None) -> external.ExternalResult:
    cfg = config.load()
    runtime = ContainerRuntime(cfg.runtime)
    budget = cfg.budgets["external"]
    plan = external.StartPlan(
        runtime=runtime,
        budget=budget.values,
        limits=ExternalLimits.from_budgets(budget),
        references={TASK: reference} if reference else {},
    )
    try:
        return external.check_image(image, TASK, start=plan)
    finally:
        runtime.cleanup()


@pytest.fixture(scope="module")
def runs(standins) -> dict[str, external.ExternalResult]:
    # The slow-start stand-in first: it alone takes over two minutes.
    order = sorted(JOBS, key=lambda job: job != "slow-start")
    with ThreadPoolExecutor(4) as pool:
        futures = {job: pool.submit(check, standins[JOBS[job][0]].reference, JOBS[job][1]) for job in order}
        return {job: future.result() for job, future in futures.items()}


def _failed(result: external.ExternalResult) -> dict[str, object]:
    return {repair.check_name(c): c.observed for c in result.checks if c.failed}


def test_standin_passes_every_seed_check_and_every_extra(runs, standins):
    result = runs["good"]
    assert result.verified and result.fully_checked, _failed(result)
    assert [repair.check_name(c) for c in result.checks] == list(repair.REPAIR_CHECKS)
    assert [c.id for c in result.checks][:12] == [f"{TASK}/{name}" for name in repair.SEED_CHECKS]
    assert result.media_type == DOCKER.manifest and result.schema_equal is True
    assert result.compressed_bytes == standins[""].compressed_bytes
    loaded = external.ExternalResult.from_json(result.to_json())
    assert loaded.outcomes() == result.outcomes() and loaded.status == result.status


def test_writable_layer_peak_holds_at_least_the_unpacked_workspace(runs, standins):
    """The peak is the container's own upper layer after grading: the workspace reset
    unpacks is in it, so it is at least the bytes of the workspace's files."""
    workspace = _standin_file(standins[""].reference, "opt/arena/workspace.tar")
    with tarfile.open(fileobj=io.BytesIO(workspace)) as tar:
        unpacked = sum(m.size for m in tar.getmembers() if m.isfile())
    peak = runs["good"].writable_layer_peak_bytes
    assert peak is not None and peak >= unpacked > 0
    assert runs["good"].to_json()["writable_layer_peak_bytes"] == peak


@pytest.mark.parametrize("fault", sorted(FAULT_FAILS))
def test_broken_standin_fails_exactly_its_check(fault, runs):
    result = runs[fault]
    assert set(_failed(result)) == {FAULT_FAILS[fault]}, _failed(result)
    assert not result.verified and FAULT_FAILS[fault] in result.status
    assert [repair.check_name(c) for c in result.checks] == list(repair.REPAIR_CHECKS)


def test_grader_running_planted_hook_as_root_is_named(runs):
    observed = _failed(runs["grader-root"])["verifier_git_hooks_are_unprivileged"]
    assert observed["hook_planted"] is True and observed["hook_ran_as_uid"] == "0"


def test_reference_that_repairs_nothing_fails_only_reward_one(runs):
    assert set(_failed(runs["reference-no-fix"])) == {"reference_terminal_reward_one"}


def test_reference_that_fails_fails_both_reference_checks(runs):
    failed = _failed(runs["reference-fails"])
    assert set(failed) == {"reference_repair_applied_through_action", "reference_terminal_reward_one"}
    assert failed["reference_repair_applied_through_action"]["exit_code"] == 1


def test_without_reference_its_checks_are_not_applicable_and_arena_refuses(runs):
    result = runs["no-reference"]
    outcomes = result.outcomes()
    assert outcomes["failed"] == [] and outcomes["not_applicable"] == {
        "reference_repair_applied_through_action": "no reference repair script was given",
        "reference_terminal_reward_one": "no reference repair script was given",
    }
    assert result.verified and not result.fully_checked
    with pytest.raises(CheckFailure, match="not applicable"):
        external.enforce([result], ExternalPolicy(required=True, profile="arena"))


def _manifest(image: str):
    ref = ImageRef.parse(image, registry=True)
    client = RegistryClient(ref.registry)
    fetched = client.get_manifest(ref.repository, ref.digest)
    return client, ref, parse_manifest(fetched.raw, fetched.media_type)


def _standin_layer(image: str) -> tarfile.TarFile:
    """The stand-in's own layer (the last one), from the registry."""
    client, ref, manifest = _manifest(image)
    blob = client.get_blob_bytes(ref.repository, manifest.layers[-1].digest)
    return tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob)))


def _standin_file(image: str, path: str) -> bytes:
    with _standin_layer(image) as tar:
        return tar.extractfile(path).read()


def test_standin_is_shaped_like_the_mimo_images(standins):
    image = standins[""].reference
    client, ref, manifest = _manifest(image)
    assert manifest.media_type == DOCKER.manifest
    cfg = parse_config(client.get_blob_bytes(ref.repository, manifest.config.digest)).raw["config"]
    assert cfg["User"] == "root" and cfg["WorkingDir"] == "/opt/arena" and "Entrypoint" not in cfg
    assert cfg["Cmd"] == [
        "/opt/arena-python/bin/python3",
        "-m",
        "uvicorn",
        "server:app",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
    ]
    assert cfg["ExposedPorts"] == {"8000/tcp": {}}
    assert {"PYTHONUNBUFFERED=1", "ENABLE_WEB_INTERFACE=false"} <= set(cfg["Env"])
    assert not any(e.startswith("REPAIR_FAULT=") for e in cfg["Env"])
    assert cfg["Labels"] == {"org.opencontainers.image.source": "https://github.com/akseljoonas/mimo-openenv-software"}
    with _standin_layer(image) as tar:
        arena, home = tar.getmember("opt/arena"), tar.getmember("home/arena-agent")
        assert (arena.mode, arena.uid) == (0o700, 0) and (home.mode, home.uid, home.gid) == (0o755, 2000, 2000)
        assert {"opt/arena/server.py", "opt/arena/instance.json", "opt/arena/workspace.tar"} <= set(tar.getnames())
    assert b"arena-agent:x:2000:2000::/home/arena-agent:/bin/bash\n" in _standin_file(image, "etc/passwd")
    assert _standin_file(image, "opt/arena/instance.json") == standins[""].instance_json
    record = json.loads(standins[""].instance_json)
    assert sorted(record) == [
        "cwd",
        "dataset_type",
        "docker_image",
        "instance_id",
        "problem_statement",
        "test_command",
        "test_patch",
        "verifier_timeout_sec",
    ]
    assert record["instance_id"] == TASK and record["test_command"] == "bash /workspace/repo/mimo_test_command.sh"
    assert "+++ b/mimo_test_command.sh" in record["test_patch"]
    with tarfile.open(fileobj=io.BytesIO(_standin_file(image, "opt/arena/workspace.tar"))) as tar:
        names = tar.getnames()
    assert "calc.py" in names and ".git/HEAD" in names and "mimo_test_command.sh" not in names
    # A broken stand-in differs from the good one in its config's REPAIR_FAULT alone.
    _, _, broken = _manifest(standins["grader-root"].reference)
    assert broken.layers == manifest.layers and broken.config.digest != manifest.config.digest
