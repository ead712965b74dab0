"""The repair checks against stand-in MiMo repair images in the real container runtime.

The stand-ins (tests/checks/repair_standin) are built with the project's build
machinery on a Docker schema-2 copy of the local base and pushed to the real local
registry standing in for ghcr.io; each is verified as the release does it: registry
facts, anonymous pull by digest, started with the container runtime, checked over
the OpenEnv WebSocket protocol. Broken stand-ins must fail exactly their check.
"""

from __future__ import annotations

import pytest

from pipeline import config
from pipeline.checks import external, repair
from pipeline.checks.results import SuiteResult
from pipeline.checks.run import references_of
from pipeline.config import ExternalTask
from pipeline.verify.runtime import ContainerRuntime

from ..base.basefixtures import base_image  # noqa: F401
from ..build.test_build_runs import _schema2_copy
from .repair_standin import FAULT_FAILS, FAULTS, REFERENCE_PATCH, build_standin

pytestmark = [pytest.mark.root, pytest.mark.container, pytest.mark.slow]
TASK = "format-code-task-000666"


@pytest.fixture(scope="module")
def schema2_base(local_registry, base_image):  # noqa: F811
    return _schema2_copy(local_registry, base_image)


@pytest.fixture(scope="module")
def runtime():
    return ContainerRuntime()


def _verify(standin, runtime, reference: repair.ReferenceSolution) -> external.ExternalResult:
    cfg = config.load()
    plan = external.StartPlan(runtime=runtime, port=8000, budget=cfg.budgets["external"].values,
                              conventions=cfg.external.repair, references={TASK: reference})
    task = ExternalTask(task_id=TASK, image=standin.reference,
                        compressed_bytes=standin.compressed_bytes, after_block=1, split="code",
                        row=50, reference="mimo-reference-000666")
    return external.verify_task(task, start=plan)


def test_standin_passes_every_repair_check(local_registry, schema2_base, runtime, tmp_path):
    standin = build_standin(local_registry, schema2_base, tmp_path, task_id=TASK)
    result = _verify(standin, runtime, repair.ReferenceSolution(REFERENCE_PATCH))
    by_name = {repair.check_name(c): c for c in result.checks}
    assert list(by_name) == list(repair.REPAIR_CHECKS)
    assert result.verified, [(c.id, c.observed) for c in result.checks if not c.passed]
    assert result.media_type.startswith("application/vnd.docker.distribution.manifest.v2")
    assert result.schema_equal is True
    assert by_name["unprivileged"].detail == "uid 2000 gid 2000"
    assert external.ExternalResult.from_json(result.to_json()).outcomes() == result.outcomes()


def test_record_without_reference_solution_is_not_applicable_not_passed(
        local_registry, schema2_base, runtime, tmp_path):
    standin = build_standin(local_registry, schema2_base, tmp_path, task_id=TASK)
    reference = references_of({TASK: (None, "no reference repair vendored")})[TASK]
    result = _verify(standin, runtime, reference)
    outcomes = result.outcomes()
    assert outcomes["failed"] == [] and "reference-repair" not in outcomes["passed"]
    assert outcomes["not_applicable"] == {
        "reference-repair": "no reference repair vendored"}
    suite = SuiteResult(image="x", targets=(), checks=result.checks, seconds=0.0)
    assert suite.ok and suite.counts()["not_applicable"] == 1
    assert suite.counts()["passed"] == len(repair.REPAIR_CHECKS) - 1


@pytest.mark.parametrize("fault", FAULTS)
def test_broken_standin_fails_exactly_its_check(fault, local_registry, schema2_base, runtime, tmp_path):
    standin = build_standin(local_registry, schema2_base, tmp_path, task_id=TASK, fault=fault)
    result = _verify(standin, runtime, repair.ReferenceSolution(REFERENCE_PATCH))
    failed = {repair.check_name(c) for c in result.checks if c.failed}
    assert failed == {FAULT_FAILS[fault]}, [(c.id, c.observed) for c in result.checks if c.failed]
    assert not result.verified and FAULT_FAILS[fault] in result.status


def test_reference_that_does_not_repair_fails_reference_repair(local_registry, schema2_base, runtime,
                                                               tmp_path):
    standin = build_standin(local_registry, schema2_base, tmp_path, task_id=TASK)
    no_fix = REFERENCE_PATCH.replace("+    return total(values) / len(values)",
                                     "+    return total(values) / (len(values) + 2)")
    result = _verify(standin, runtime, repair.ReferenceSolution(no_fix))
    failed = {repair.check_name(c): c for c in result.checks if c.failed}
    assert set(failed) == {"reference-repair"}
    assert failed["reference-repair"].observed["applied"] is True


def test_reference_too_large_for_the_call_budget_fails_reference_repair(local_registry, schema2_base,
                                                                        runtime, tmp_path):
    standin = build_standin(local_registry, schema2_base, tmp_path, task_id=TASK)
    lines = 20_000
    huge = REFERENCE_PATCH + f"--- /dev/null\n+++ b/data.txt\n@@ -0,0 +1,{lines} @@\n" + "".join(
        f"+{'%032d' % i}\n" for i in range(lines))
    result = _verify(standin, runtime, repair.ReferenceSolution(huge))
    failed = {repair.check_name(c): c for c in result.checks if c.failed}
    assert set(failed) == {"reference-repair"}
    assert "at most the episode's 64 tool calls" in failed["reference-repair"].expected
