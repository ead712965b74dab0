"""`python -m pipeline diff OLD NEW` on real records: the committed release's, copied and edited.

Each edit is one a release can make (a case swapped, a budget raised, a package upgraded, a
file of the image changed); the diff must name it and exit 1, and say "no change" (exit 0)
for two copies of the same records. Revisions are read from a real git repository made here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline import cli
from pipeline import diff as diff_mod
from pipeline.config import REPO_ROOT
from pipeline.sources.toolchain import Distribution

RECORDS = ("provenance.json", "submission.json", "attestations/sbom.cdx.json")


def copy_records(dest: Path) -> Path:
    for name in RECORDS:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO_ROOT / name, dest / name)
    return dest


def edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["diff", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def pair(tmp_path) -> tuple[Path, Path]:
    return copy_records(tmp_path / "old"), copy_records(tmp_path / "new")


def first_case(records: Path) -> str:
    prov = json.loads((records / "provenance.json").read_text())
    return next(t["task_id"] for t in prov["tasks"] if t["kind"] == "procedural")


def test_identical_releases_print_no_change_and_exit_0(pair, capsys):
    old, new = pair
    code, out, _ = run(capsys, str(old), str(new))
    assert code == 0
    assert out.splitlines()[-1] == "no change"


def test_a_swapped_case_is_named_added_and_removed(pair, capsys):
    old, new = pair
    gone = first_case(new)
    family = gone.split("-d")[0]
    came = f"{family}-d3-s999"

    def swap(data):
        for task in data["tasks"]:
            if task["task_id"] == gone:
                task["task_id"] = came

    edit(new / "submission.json", swap)
    edit(new / "provenance.json", swap)
    code, out, err = run(capsys, str(old), str(new))
    assert code == 1
    assert ("case", came, "-", "added") in _rows(out)
    assert ("case", gone, "removed", "-") in _rows(out)
    assert "differ" in err
    result = json.loads(run(capsys, str(old), str(new), "--json")[1])
    assert (result["cases_added"], result["cases_removed"], result["tasks_added"]) == ([came], [gone], [])


def test_reordered_tasks_are_named_with_their_positions(pair, capsys):
    old, new = pair

    def swap_first_two(data):
        data["tasks"][0], data["tasks"][1] = data["tasks"][1], data["tasks"][0]

    edit(new / "submission.json", swap_first_two)
    edit(new / "provenance.json", swap_first_two)
    a, b = (t["task_id"] for t in json.loads((old / "submission.json").read_text())["tasks"][:2])
    code, out, _ = run(capsys, str(old), str(new))
    assert code == 1
    assert {("order", a, "position 1", "position 2"), ("order", b, "position 2", "position 1")} <= set(_rows(out))


def test_a_changed_budget_is_named_per_task(pair, capsys):
    old, new = pair
    task = first_case(new)

    def raise_budget(data):
        for t in data["tasks"]:
            if t["task_id"] == task:
                t["tool_calls_total"] += 4

    edit(new / "submission.json", raise_budget)
    before = next(t for t in json.loads((old / "submission.json").read_text())["tasks"] if t["task_id"] == task)
    code, out, _ = run(capsys, str(old), str(new))
    assert code == 1
    assert _rows(out) == [
        ("budget", f"{task} tool_calls_total", str(before["tool_calls_total"]), str(before["tool_calls_total"] + 4))
    ]


def test_packages_upgraded_added_and_removed_are_named(pair, capsys):
    old, new = pair
    sbom = new / "attestations" / "sbom.cdx.json"
    libs = [c for c in json.loads(sbom.read_text())["components"] if c.get("purl", "").startswith("pkg:pypi/")]
    up, gone = libs[0], libs[1]

    def change(data):
        for c in data["components"]:
            if c["bom-ref"] == up["bom-ref"]:
                c["version"] = "999.0"
                c["purl"] = c["purl"].replace(f"@{up['version']}", "@999.0")
        data["components"] = [c for c in data["components"] if c["bom-ref"] != gone["bom-ref"]]
        data["dependencies"] = [d for d in data["dependencies"] if d["ref"] != gone["bom-ref"]]

    edit(sbom, change)
    code, out, _ = run(capsys, str(old), str(new))
    assert code == 1
    name = up["purl"].split("/")[1].split("@")[0]
    gone_name = gone["purl"].split("/")[1].split("@")[0]
    assert ("package", f"pypi:{name}", up["version"], "999.0") in _rows(out)
    assert ("package", f"pypi:{gone_name}", gone["version"], "-") in _rows(out)
    # and the other way round: added
    code, out, _ = run(capsys, str(new), str(old))
    assert ("package", f"pypi:{gone_name}", "-", gone["version"]) in _rows(out)


def test_a_changed_file_is_named_in_its_layer(pair, capsys):
    old, new = pair
    sbom = new / "attestations" / "sbom.cdx.json"
    files = [c for c in json.loads(sbom.read_text())["components"] if c["type"] == "file"]
    target = next(c["name"] for c in files if c["name"].endswith("/env/server/app.py"))
    removed = next(c["name"] for c in files if c["name"].endswith("/licenses/LICENSE"))
    was = next(c["hashes"][0]["content"] for c in files if c["name"] == target)

    def change(data):
        for c in data["components"]:
            if c["name"] == target:
                c["hashes"][0]["content"] = "0" * 64
        data["components"] = [c for c in data["components"] if c["name"] != removed]
        data["dependencies"] = [d for d in data["dependencies"] if d["ref"] != f"file:{removed}"]

    edit(sbom, change)
    code, out, _ = run(capsys, str(old), str(new))
    assert code == 1
    assert set(_rows(out)) == {
        ("file", f"env: {target}", f"sha256:{was[:12]}", "sha256:000000000000"),
        ("file", f"licenses: {removed}", "removed", "-"),
    }


def test_allow_exits_0_on_a_difference(pair, capsys):
    old, new = pair
    edit(new / "provenance.json", lambda d: d["sizes"].update(seed_bytes=d["sizes"]["seed_bytes"] + 1))
    code, out, _ = run(capsys, str(old), str(new), "--allow")
    assert code == 0
    assert [r[:2] for r in _rows(out)] == [("size", "release seed_bytes")]


def git_in(repo: Path):
    """A function running git in `repo` (no user or system configuration) and returning its stdout."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(repo.parent),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), *args], env=env, check=True, capture_output=True, text=True
        ).stdout.strip()

    git("init", "-q", "-b", "main")
    return git


def test_git_revisions_are_read_from_the_repository(tmp_path, capsys):
    repo = copy_records(tmp_path / "repo")
    git = git_in(repo)
    git("add", ".")
    git("commit", "-q", "-m", "records of release 1")
    first = git("rev-parse", "HEAD")
    task = first_case(repo)

    def raise_budget(data):
        for t in data["tasks"]:
            if t["task_id"] == task:
                t["verifier_wall_s"] += 1

    edit(repo / "submission.json", raise_budget)
    git("commit", "-q", "-am", "records of release 2")
    git("tag", "v2")
    code, out, _ = run(capsys, "HEAD~1", "v2", "--repo", str(repo))
    assert code == 1
    assert [r[:2] for r in _rows(out)] == [("budget", f"{task} verifier_wall_s")]
    assert out.splitlines()[:2] == [f"old: HEAD~1 ({first[:12]})", f"new: v2 ({git('rev-parse', 'HEAD')[:12]})"]
    # a revision against a directory: the working tree holds release 2's records
    assert run(capsys, "v2", str(repo), "--repo", str(repo))[0] == 0
    assert run(capsys, first, str(repo), "--repo", str(repo))[0] == 1
    # a revision without records, and a name that is neither
    (repo / "x").write_text("x")
    git("rm", "-q", "-r", "provenance.json", "submission.json", "attestations")
    git("add", "x")
    git("commit", "-q", "-m", "no records")
    code, _, err = run(capsys, "HEAD", "v2", "--repo", str(repo))
    assert code == 2 and "holds no release records: provenance.json, submission.json" in err
    code, _, err = run(capsys, "no-such-rev", "v2", "--repo", str(repo))
    assert code == 2 and "neither a records directory nor a revision" in err


def test_the_release_report_compares_with_the_records_committed_at_head(tmp_path):
    repo = copy_records(tmp_path / "repo")
    git = git_in(repo)
    changed, lines = diff_mod.against_committed(repo)
    assert changed.startswith("not compared with the committed records: 'HEAD' is neither") and lines == [changed]
    git("add", ".")
    git("commit", "-q", "-m", "records")
    assert diff_mod.against_committed(repo)[0] == "no change"
    edit(repo / "provenance.json", lambda d: d["base"].update(digest="sha256:" + "1" * 64))
    changed, lines = diff_mod.against_committed(repo)
    assert changed == "1 digest"
    base = json.loads(git("show", "HEAD:provenance.json"))["base"]["digest"]
    assert lines[-1] == f"| digest | `base digest` | {base} | sha256:{'1' * 64} |"


def test_a_directory_without_records_is_refused(tmp_path, capsys):
    old = copy_records(tmp_path / "old")
    (old / "submission.json").unlink()
    code, _, err = run(capsys, str(old), str(REPO_ROOT))
    assert code == 2
    assert "not a records directory: submission.json missing" in err


def test_the_toolchain_list_is_compared_and_its_absence_said():
    release = diff_mod.load(REPO_ROOT)

    def built(*dists):
        tools = tuple(Distribution(n, v, f"{n}-{v}-py3-none-any.whl", "0" * 64) for n, v in dists)
        return replace(
            release,
            provenance=replace(release.provenance, builder=replace(release.provenance.builder, toolchain=tools)),
        )

    a = built(("nox", "1"), ("uv", "2"))
    b = built(("nox", "3"))
    rows = diff_mod.rows(diff_mod.diff(a, b))
    assert rows == [("toolchain", "dist:uv", "2", "-"), ("toolchain", "dist:nox", "1", "3")]
    assert diff_mod.rows(diff_mod.diff(built(), b)) == [
        ("toolchain", "installed distributions", "not recorded", "1 recorded")
    ]


def _rows(table: str) -> list[tuple[str, ...]]:
    """The table's rows as (section, what, old, new), read back by column position."""
    lines = table.splitlines()
    header = next(i for i, l in enumerate(lines) if l.startswith("section "))
    starts = [lines[header].index(h) for h in ("section", "what", "old", "new")]
    out = []
    for line in lines[header + 1 : -1]:
        cells = [line[a:b].strip() for a, b in zip(starts, starts[1:] + [None])]
        out.append(tuple(cells))
    return out
