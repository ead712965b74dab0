"""The shard plan and the merge of shard records.

The records here are made by splitting one whole-suite record along the plan, the
way N shard jobs would have written it; each forged variant (a missing, repeated or
foreign shard, a check moved or repeated, disagreeing facts) must be refused.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.checks import results as results_mod
from pipeline.checks.merge import merge
from pipeline.checks.results import CheckResult, SuiteResult
from pipeline.checks.shards import Shard, plan
from pipeline.checks.suite import JOB_COST_S, job_costs, shard_jobs
from pipeline.errors import ConfigError, VerificationError
from tests.curriculum import all_cases

REPO = Path(__file__).resolve().parents[2]
IMAGE = "127.0.0.1:5000/arena/openenv-data-workflows@sha256:" + "ab" * 32
LAYERS = (("sha256:" + "01" * 32, 1234), ("sha256:" + "02" * 32, 5678))


def _whole() -> SuiteResult:
    """A whole-suite record in the order run_suite writes it (image, timeout, cases)."""
    checks = [CheckResult(f"image/{n}", True, 0.01) for n in ("health", "schema", "uid")]
    checks.append(CheckResult("image/timeout", True, 60.0))
    for case in all_cases():
        checks += [CheckResult(f"{case.id}/{n}", True, 0.1) for n in ("reset", "correct", "wrong")]
    checks[5] = replace(checks[5], passed=False, observed="x", expected="y")
    # An external task's repair checks follow the suite's, as verify_image records them.
    checks += [CheckResult(f"t/{n}", True, 0.2) for n in ("health", "unsolved", "reference-repair")]
    return SuiteResult(
        image=IMAGE,
        targets=("http://a",),
        checks=tuple(checks),
        seconds=90.0,
        schema={"action": {"type": "object"}},
        external=({"task_id": "t", "status": "verified"},),
        layers=LAYERS,
    )


def _job_of(check_id: str) -> str:
    """The job that reports a check: `image/timeout`, `image` or the case (of any runtime)."""
    check_id = check_id.partition("@")[0]
    return check_id if check_id == "image/timeout" else check_id.split("/", 1)[0]


def _split(whole: SuiteResult, count: int) -> list[SuiteResult]:
    """The N shard records of `whole`: shard 1 also carries the external tasks (as verify does)."""
    parts = []
    for index, keys in enumerate(plan(job_costs(all_cases()), count), start=1):
        mine = [c for c in whole.checks if _job_of(c.id) in keys]
        if index == 1:
            mine += [c for c in whole.checks if c.id.startswith("t/")]
        parts.append(
            replace(
                whole,
                targets=(f"http://shard{index}",),
                checks=tuple(mine),
                seconds=10.0 * index,
                schema=whole.schema if "image" in keys else {},
                external=whole.external if index == 1 else (),
                shard=Shard(index, count, keys),
            )
        )
    return parts


def _comparable(result: SuiteResult) -> dict:
    doc = result.to_json()
    for key in ("seconds", "targets"):
        doc.pop(key)
    for check in doc["checks"]:
        check.pop("seconds")
    return doc


def test_shard_spec_parses_i_of_n_and_refuses_the_rest():
    assert Shard.parse("2/4") == Shard(2, 4)
    assert str(Shard.parse(" 1/1 ")) == "1/1"
    for bad in ("0/2", "3/2", "2", "a/b", "1/0", "-1/2", "1/2/3"):
        with pytest.raises(ConfigError, match="not a shard"):
            Shard.parse(bad)


@pytest.mark.parametrize("count", range(1, 35))
def test_every_job_is_in_exactly_one_shard_and_none_is_empty(count):
    shards = plan(job_costs(all_cases()), count)
    keys = [k for k, _ in job_costs(all_cases())]
    assert len(shards) == count and all(shards)
    assert sorted(k for s in shards for k in s) == sorted(keys)
    # Each shard keeps the suite's order.
    for s in shards:
        assert list(s) == [k for k in keys if k in s]
    assert plan(job_costs(all_cases()), count) == shards  # deterministic


def test_the_timeout_check_gets_a_shard_of_its_own_and_the_rest_is_balanced():
    for count in (2, 3, 4, 8):
        shards = plan(job_costs(all_cases()), count)
        assert shards[0] == ("image/timeout",)
        cost = dict(job_costs(all_cases()))
        loads = [sum(cost[k] for k in s) for s in shards[1:]]
        # Longest-first placement: the rest differ by at most the largest remaining job.
        assert max(loads) - min(loads) <= JOB_COST_S["image"]


def test_more_shards_than_jobs_is_refused():
    with pytest.raises(ConfigError, match="shard count"):
        plan(job_costs(all_cases()), len(job_costs(all_cases())) + 1)
    with pytest.raises(ConfigError, match="shard count"):
        shard_jobs(Shard(1, 35), all_cases())


@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_merging_the_shards_gives_the_whole_record_back(count):
    whole = _whole()
    parts = _split(whole, count)
    merged = merge(list(reversed(parts)), all_cases())
    assert _comparable(merged) == _comparable(whole)
    assert merged.targets == tuple(f"http://shard{i}" for i in range(1, count + 1))
    assert merged.seconds == 10.0 * count and merged.shard is None


def test_a_shard_record_round_trips_and_only_the_merge_reads_it(tmp_path):
    part = _split(_whole(), 2)[1]
    path = tmp_path / "shard.json"
    results_mod.write(path, part)
    assert json.loads(path.read_text())["shard"] == {"index": 2, "count": 2, "jobs": list(part.shard.jobs)}
    assert results_mod.load(path, shard=True) == part
    with pytest.raises(VerificationError, match="one shard of the suite"):
        results_mod.load(path)
    results_mod.write(path, _whole())
    assert "shard" not in json.loads(path.read_text())
    with pytest.raises(VerificationError, match="not the record of one shard"):
        results_mod.load(path, shard=True)


def test_a_missing_or_repeated_shard_is_refused():
    parts = _split(_whole(), 3)
    with pytest.raises(VerificationError, match=r"missing \[2\]"):
        merge([parts[0], parts[2]], all_cases())
    with pytest.raises(VerificationError, match=r"repeated \[3\]"):
        merge([parts[0], parts[1], parts[2], parts[2]], all_cases())
    with pytest.raises(VerificationError, match="nothing to merge"):
        merge([], all_cases())


def test_shards_of_different_runs_are_refused():
    two, three = _split(_whole(), 2), _split(_whole(), 3)
    with pytest.raises(VerificationError, match="different shard counts"):
        merge([two[0], three[1], three[2]], all_cases())
    other = replace(two[1], image=IMAGE.replace("ab", "cd"))
    with pytest.raises(VerificationError, match="image they verified"):
        merge([two[0], other], all_cases())
    pulled_else = replace(two[1], layers=LAYERS[:1])
    with pytest.raises(VerificationError, match="layers of the pulled image"):
        merge([two[0], pulled_else], all_cases())
    whole = replace(_whole(), shard=None)
    with pytest.raises(VerificationError, match="not a shard record"):
        merge([two[0], whole], all_cases())


def test_a_shard_claiming_other_jobs_is_refused():
    parts = _split(_whole(), 2)
    swapped = replace(parts[1], shard=replace(parts[1].shard, jobs=parts[1].shard.jobs[1:]))
    with pytest.raises(VerificationError, match="did not run the jobs the plan gives it"):
        merge([parts[0], swapped], all_cases())


def test_a_check_outside_its_shards_jobs_or_a_job_without_checks_is_refused():
    parts = _split(_whole(), 3)
    moved = parts[2].checks[0]
    stray = replace(parts[1], checks=parts[1].checks + (moved,))
    with pytest.raises(VerificationError, match="jobs it does not own"):
        merge([parts[0], stray, parts[2]], all_cases())
    group = parts[2].checks[0].id.split("/", 1)[0]
    dropped = replace(parts[2], checks=tuple(c for c in parts[2].checks if not c.id.startswith(group + "/")))
    with pytest.raises(VerificationError, match="no check for some of its jobs"):
        merge([parts[0], parts[1], dropped], all_cases())


def test_a_check_reported_twice_is_refused():
    parts = _split(_whole(), 2)
    twice = replace(parts[1], checks=parts[1].checks + parts[1].checks[-1:])
    with pytest.raises(VerificationError, match="more than once"):
        merge([parts[0], twice], all_cases())


def test_repair_checks_belong_to_the_shard_that_verified_the_external_tasks():
    parts = _split(_whole(), 2)
    repair = tuple(c for c in parts[0].checks if c.id.startswith("t/"))
    assert repair, "shard 1 carries the external task's repair checks"
    moved = replace(parts[1], checks=parts[1].checks + repair)
    kept = replace(parts[0], checks=tuple(c for c in parts[0].checks if not c.id.startswith("t/")))
    with pytest.raises(VerificationError, match="jobs it does not own"):
        merge([kept, moved], all_cases())


def test_external_tasks_verified_by_two_shards_are_refused():
    parts = _split(_whole(), 2)
    both = replace(parts[1], external=parts[0].external)
    with pytest.raises(VerificationError, match="more than one shard verified the external tasks"):
        merge([parts[0], both], all_cases())


@pytest.mark.slow
def test_the_merge_command_refuses_a_whole_record_and_writes_nothing(tmp_path):
    results_mod.write(tmp_path / "whole.json", _whole())
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            "checks",
            "merge",
            str(tmp_path / "whole.json"),
            "--out",
            str(tmp_path / "merged.json"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    assert "not the record of one shard" in proc.stderr
    assert not (tmp_path / "merged.json").exists()


@pytest.mark.slow
def test_the_merge_command_writes_the_merged_record_and_fails_on_failed_checks(tmp_path):
    paths = []
    for part in _split(_whole(), 2):
        paths.append(tmp_path / f"shard{part.shard.index}.json")
        results_mod.write(paths[-1], part)
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "checks", "merge", *map(str, paths), "--out", str(tmp_path / "merged.json")],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    # The whole record has one failing check: the merged record is written, the command fails.
    assert proc.returncode != 0 and "1 check(s) failed" in proc.stderr
    assert _comparable(results_mod.load(tmp_path / "merged.json")) == _comparable(_whole())


@pytest.mark.slow
@pytest.mark.root
def test_a_shard_against_a_live_server_runs_exactly_its_jobs(live_server, tmp_path):
    """`checks --url URL --shard 3/4 --image NAME` against the real server: the shard's
    cases and nothing else, every check passing, recorded with its plan."""
    out = tmp_path / "shard.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            "checks",
            "--url",
            live_server.url,
            "--app-dir",
            live_server.app_dir,
            "--image",
            IMAGE,
            "--shard",
            "3/4",
            "--out",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    part = results_mod.load(out, shard=True)
    planned = plan(job_costs(all_cases()), 4)[2]
    assert part.shard == Shard(3, 4, planned) and part.image == IMAGE
    assert "image" not in planned and "image/timeout" not in planned
    assert {c.id.split("/", 1)[0] for c in part.checks} == set(planned)
    assert part.ok


def _two_runtimes(whole: SuiteResult, count: int) -> tuple[SuiteResult, list[SuiteResult]]:
    """`whole` as verify records it under podman then docker, and its N shard records, each
    shard's checks under both engines in turn (podman's, docker's, then the external ones)."""
    suite = [c for c in whole.checks if not c.id.startswith("t/")]
    external = [c for c in whole.checks if c.id.startswith("t/")]
    docker = [replace(c, id=c.id + "@docker") for c in suite]

    def runtime(name, suffix, checks, containers):
        part = SuiteResult(image=IMAGE, targets=(), checks=tuple(checks), seconds=0.0)
        return {
            "name": name,
            "suffix": suffix,
            "engine": {"engine": name, "version": "1"},
            "container_security": {"seccomp": "default"},
            "isolation": "namespaces" if not suffix else "unprivileged",
            "containers": containers,
            "summary": part.counts(),
        }

    both = replace(
        whole,
        checks=tuple(suite + docker + external),
        runtimes=(runtime("podman", "", suite, count), runtime("docker", "@docker", docker, count)),
    )
    parts = []
    for index, keys in enumerate(plan(job_costs(all_cases()), count), start=1):
        mine = [c for c in suite if _job_of(c.id) in keys]
        theirs = [replace(c, id=c.id + "@docker") for c in mine]
        parts.append(
            replace(
                both,
                targets=(f"http://shard{index}",),
                seconds=10.0 * index,
                checks=tuple(mine + theirs + (external if index == 1 else [])),
                schema=whole.schema if "image" in keys else {},
                external=whole.external if index == 1 else (),
                shard=Shard(index, count, keys),
                runtimes=(runtime("podman", "", mine, 1), runtime("docker", "@docker", theirs, 1)),
            )
        )
    return both, parts


@pytest.mark.parametrize("count", [1, 2, 3])
def test_shards_under_two_engines_merge_runtime_by_runtime(count):
    whole, parts = _two_runtimes(_whole(), count)
    merged = merge(list(reversed(parts)), all_cases())
    assert _comparable(merged) == _comparable(whole)
    assert [(r["name"], r["containers"]) for r in merged.runtimes] == [("podman", count), ("docker", count)]


def test_shards_under_other_engines_or_modes_are_refused():
    whole, parts = _two_runtimes(_whole(), 2)
    other = replace(parts[1], runtimes=(parts[1].runtimes[0],))
    with pytest.raises(VerificationError, match="the shards disagree on the runtimes they ran under"):
        merge([parts[0], other], all_cases())
    forged = replace(parts[1], runtimes=(parts[1].runtimes[0], {**parts[1].runtimes[1], "isolation": "namespaces"}))
    with pytest.raises(VerificationError, match="the shards disagree on the isolation mode under docker"):
        merge([parts[0], forged], all_cases())
