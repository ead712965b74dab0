"""A second curriculum released end to end with no code edited (issue 41): a fresh clone whose
only change is release.toml, [curriculum] declaring 3 families at difficulties 1 to 3 and seeds
101 and 202, and one external task after block 2. It is released (the suite runs against the
image pulled back from the registry), audited, and diffed against the committed records; the
request, tasks.jsonl, checks.json and the dataset card list exactly its cases, in its order.

One release, in its own clone, in one test: it is as slow as tests/e2e/test_release.py's."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from pipeline.curriculum import Case
from pipeline.registry import local as localregistry

from ..base.basefixtures import base_image  # noqa: F401  (a fixture)
from ..containers import ContainerScope
from ..shared import suite_slot
from .test_release import _clone, _git, pipeline

# Not docs/spec/families.md's TASK_IDS order: a block follows the declared order.
FAMILIES = ("media_timeline", "math_route", "software_change")
DIFFICULTIES = (1, 2, 3)
SEEDS = (101, 202)
EXTERNAL = "format-code-task-000666"
DROPPED = "format-code-task-001926"
CURRICULUM = f"""[curriculum]
families = {json.dumps(list(FAMILIES))}
difficulties = {json.dumps(list(DIFFICULTIES))}
seeds = {json.dumps(list(SEEDS))}
blocks = "difficulty-seed"
"""
CASES = [f"{f}-d{d}-s{s}" for d in DIFFICULTIES for s in SEEDS for f in FAMILIES]
# Six blocks of three; the one external task after the second.
ORDER = CASES[:6] + [EXTERNAL] + CASES[6:]


def edit_release_toml(text: str) -> str:
    """The release engineer's edit: the curriculum, the external task after block 2, the other
    external task dropped. Each replacement must match exactly once."""
    edits = (
        (r"(?ms)^\[curriculum\]\n.*?^blocks = \"difficulty-seed\"\n", CURRICULUM),
        (r"(?m)^after_block = 1$", "after_block = 2"),
        (rf"(?ms)^\[\[external\.tasks\]\]\ntask_id = \"{DROPPED}\"\n.*?\n\n", ""),
    )
    for pattern, replacement in edits:
        text, count = re.subn(pattern, lambda _m, r=replacement: r, text)
        assert count == 1, pattern
    return text


def test_edit_matches_the_committed_release_toml():
    """The edit the slow test makes still applies to this checkout's release.toml (fast: it
    fails here, not after a release, when release.toml's layout moves)."""
    text = edit_release_toml((Path(__file__).resolve().parents[2] / "release.toml").read_text())
    assert CURRICULUM in text and f'task_id = "{DROPPED}"' not in text


@pytest.fixture
def new_curriculum(tmp_path, base_image):  # base_image: the pinned base's layout, to copy
    clone = _clone(tmp_path / "checkout")
    (clone / "release.toml").write_text(edit_release_toml((clone / "release.toml").read_text()))
    _git(clone, "commit", "-qam", "curriculum: 3 families, difficulties 1-3, seeds 101 and 202")
    yield clone
    localregistry.stop(clone / ".release" / "registry")


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.root
@pytest.mark.container
def test_a_second_curriculum_releases_verifies_and_audits_with_no_code_edited(new_curriculum):
    clone = new_curriculum
    changed = subprocess.run(
        ["git", "diff", "--name-only", "HEAD~1", "HEAD"], cwd=clone, check=True, capture_output=True, text=True
    ).stdout.split()
    assert changed == ["release.toml"]  # no code edited
    scope = ContainerScope.new()
    with suite_slot():
        proc = pipeline(clone, "release", scope=scope, timeout=2400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert scope.containers() == []

    # The request: exactly its cases and the one external task, in the declared order.
    sub = json.loads((clone / "submission.json").read_text())
    assert [t["task_id"] for t in sub["tasks"]] == ORDER
    prov = json.loads((clone / "provenance.json").read_text())
    assert sub["image"] == f"{prov['image']['name']}@{prov['image']['digest']}"
    ours = [t for t in prov["tasks"] if t["kind"] == "procedural"]
    assert [t["task_id"] for t in ours] == CASES
    assert all(t["verification"]["status"] == "verified" for t in ours)

    # tasks.jsonl: the same tasks, each case described by its family, difficulty and seed.
    lines = [json.loads(line) for line in (clone / "dist" / "dataset" / "tasks.jsonl").read_text().splitlines()]
    assert [line["task_id"] for line in lines] == ORDER
    for line in lines:
        if line["task_id"] != EXTERNAL:
            case = Case.parse(line["task_id"])
            assert (line["family"], line["difficulty"], line["seed"]) == (case.family, case.difficulty, case.seed)

    # checks.json: the per-case checks ran for exactly its cases, against the pulled image.
    checks = json.loads((clone / "attestations" / "checks.json").read_text())
    groups = {c["id"].split("/", 1)[0] for c in checks["checks"]}
    assert {g for g in groups if g != "image" and not g.startswith("format-code-task-")} == set(CASES)
    for case in CASES:
        assert any(c["id"] == f"{case}/correct" and c["passed"] for c in checks["checks"]), case
    # (pulled back by digest from the release's loopback registry, then checked)
    assert re.fullmatch(r"127\.0\.0\.1:\d+/" + re.escape(sub["image"]), checks["image"]), checks["image"]
    assert all(c["passed"] for c in checks["checks"])

    # The card says where the cases come from.
    card = (clone / "dist" / "dataset" / "README.md").read_text()
    assert (
        "The 18 procedural cases are the curriculum declared in `release.toml`'s `[curriculum]` at the "
        "project commit: families `media_timeline`, `math_route`, `software_change`, difficulties 1, 2, 3 "
        "and seeds 101, 202,"
    ) in card

    # The auditor: every record, the SBOM against the built layers, the dataset folder.
    audited = pipeline(clone, "audit", "--key", str(clone / ".release" / "keys" / "release.pub.pem"))
    assert audited.returncode == 0, audited.stdout[-4000:] + audited.stderr[-2000:]

    # The diff against the records committed at HEAD names exactly the cases that changed.
    diffed = pipeline(clone, "diff", "HEAD", ".", "--json", "--allow")
    assert diffed.returncode == 0, diffed.stdout[-3000:] + diffed.stderr[-3000:]
    old = json.loads(
        subprocess.run(
            ["git", "show", "HEAD:submission.json"], cwd=clone, check=True, capture_output=True, text=True
        ).stdout
    )
    old_cases = [t["task_id"] for t in old["tasks"] if not t["task_id"].startswith("format-code-task-")]
    d = json.loads(diffed.stdout)
    assert d["cases_added"] == [c for c in CASES if c not in old_cases]
    assert d["cases_removed"] == [c for c in old_cases if c not in CASES]
    assert d["tasks_added"] == [] and d["tasks_removed"] == [DROPPED]
