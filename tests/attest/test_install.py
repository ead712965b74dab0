"""The records' one commit point (pipeline.records.install), with real files and real kills:
a release killed (SIGKILL, through RELEASE_TEST_PAUSE_AT) before its journal, after it, and
after each path was switched leaves every record path present, and the next run's `recover`
ends with the old set whole (no journal) or the new set whole (a journal), says so in one
line, and removes the staging directories of runs that are gone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.records import install

REPO = Path(__file__).resolve().parents[2]


def _tree(root: Path) -> dict[str, bytes]:
    out = {}
    for rel in install.PATHS:
        p = root / rel
        files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
        for f in files:
            if f.exists():
                out[f.relative_to(root).as_posix()] = f.read_bytes()
    return out


def _write_set(root: Path, tag: str) -> None:
    (root / "attestations" / "links").mkdir(parents=True, exist_ok=True)
    (root / "dist" / "dataset").mkdir(parents=True, exist_ok=True)
    (root / "provenance.json").write_text(f'{{"release": "{tag}"}}\n')
    (root / "submission.json").write_text(f'{{"submission": "{tag}"}}\n')
    (root / "attestations" / "release.dsse.json").write_text(tag)
    (root / "attestations" / "links" / f"build.{tag}.link").write_text(tag)
    (root / "dist" / "dataset" / "tasks.jsonl").write_text(tag * 3)


@pytest.fixture
def checkout(tmp_path):
    repo = tmp_path / "checkout"
    _write_set(repo, "old")
    return repo


def _stage(repo: Path) -> Path:
    staging = install.new_staging(repo)
    _write_set(staging, "new")
    return staging


COMMIT = """
import sys
from pathlib import Path
from pipeline.records import install
repo = Path(sys.argv[1])
staging = install.new_staging(repo)
{stage}
install.commit(repo, staging)
"""


def _killed_commit(repo: Path, point: str) -> subprocess.CompletedProcess:
    """Stage the new set and commit it in a child, SIGKILLed once it says it paused at `point`."""
    code = COMMIT.format(stage="import tests.attest.test_install as t\nt._write_set(staging, 'new')")
    env = {**os.environ, install.runs.PAUSE_ENV: point, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(repo)], env=env, cwd=REPO, stderr=subprocess.PIPE, text=True
    )
    line = proc.stderr.readline()
    assert line.startswith(f"paused at {point}"), line + proc.stderr.read()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    return proc


def test_commit_switches_the_whole_set_and_removes_the_old(checkout):
    staging = _stage(checkout)
    placed = install.commit(checkout, staging)
    assert [p.relative_to(checkout).as_posix() for p in placed] == list(install.PATHS)
    assert _tree(checkout) == _tree(_new_reference(checkout.parent))
    assert not staging.exists() and not (checkout / install.JOURNAL).exists()


def _new_reference(tmp: Path) -> Path:
    ref = tmp / "reference-new"
    if not ref.exists():
        _write_set(ref, "new")
    return ref


def test_a_kill_before_the_journal_leaves_the_old_set_and_the_next_run_clears_its_staging(checkout):
    before = _tree(checkout)
    staging = _stage(checkout)  # staged by this process: alive, so kept
    # A dead run's staging directory: its owner is a PID that exited.
    dead = subprocess.run(
        [
            sys.executable,
            "-c",
            "from pipeline.records import install; import sys; "
            "print(install.new_staging(__import__('pathlib').Path(sys.argv[1])))",
            str(checkout),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    lines = install.recover(checkout)
    assert _tree(checkout) == before
    assert staging.exists() and not Path(dead).exists()
    assert len(lines) == 1 and "removed 1 staging directory" in lines[0] and Path(dead).name in lines[0]


@pytest.mark.parametrize("point", ["install:journal", *(f"install:{p}" for p in install.PATHS)])
def test_a_kill_inside_the_install_leaves_every_path_and_the_next_run_completes_it(checkout, point):
    old = _tree(checkout)
    _killed_commit(checkout, point)
    assert (checkout / install.JOURNAL).exists()
    # Every path is there at every instant: the old copy or the new one, never none.
    for rel in install.PATHS:
        assert (checkout / rel).exists(), rel
    mixed = _tree(checkout)
    assert set(mixed) - {k for k in mixed if "links/" in k} <= set(old) | set(_tree(_new_reference(checkout.parent)))
    lines = install.recover(checkout)
    assert _tree(checkout) == _tree(_new_reference(checkout.parent))
    assert not (checkout / install.JOURNAL).exists()
    assert list((checkout / install.STAGING).iterdir()) == []
    assert len(lines) == 1 and lines[0].startswith("recovered: a killed release had committed its records")
    # Run again: nothing more to do, nothing said.
    assert install.recover(checkout) == []


def test_a_journal_whose_new_set_is_gone_is_refused_with_what_to_do(checkout):
    staging = _stage(checkout)
    (checkout / install.JOURNAL).write_text(
        json.dumps({"staging": str(staging), "entries": [{"path": "provenance.json", "sha256": "0" * 64}]})
    )
    with pytest.raises(install.InstallError, match="neither in place nor staged.*git checkout --"):
        install.recover(checkout)


def test_an_old_two_step_install_left_attestations_missing_is_moved_back(checkout):
    before = _tree(checkout)
    aside = checkout / install.STAGING / "abc123.old-attestations"
    aside.parent.mkdir(parents=True)
    os.replace(checkout / "attestations", aside)
    lines = install.recover(checkout)
    assert _tree(checkout) == before
    assert lines == [
        "recovered: a killed release's install had left attestations (from abc123.old-attestations) missing; moved back"
    ]


def test_the_audit_view_holds_the_staged_set_and_hard_links_of_the_rest(checkout):
    (checkout / "release.toml").write_text("x")
    (checkout / "vendor").mkdir()
    (checkout / "vendor" / "tasks.py").write_text("y")
    (checkout / "dist" / "oci").mkdir()
    (checkout / "dist" / "oci" / "index.json").write_text("{}")
    staging = _stage(checkout)
    view = install.audit_view(checkout, staging)
    assert (view / "provenance.json").read_text() == '{"release": "new"}\n'
    assert (view / "dist" / "dataset" / "tasks.jsonl").read_text() == "new" * 3
    for rel in ("release.toml", "vendor/tasks.py", "dist/oci/index.json"):
        assert (view / rel).stat().st_ino == (checkout / rel).stat().st_ino, rel
    install.commit(checkout, staging)
    assert (checkout / "release.toml").read_text() == "x"


def test_a_journal_of_a_release_still_running_is_left_to_it(checkout):
    staging = _stage(checkout)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        owner = install.runs.Owner(sleeper.pid, install.runs._start_time(sleeper.pid))
        (checkout / install.JOURNAL).parent.mkdir(parents=True, exist_ok=True)
        (checkout / install.JOURNAL).write_text(
            json.dumps({"staging": str(staging), "entries": [], "owner": owner.to_json()})
        )
        with pytest.raises(install.InstallError, match=f"another release \\(PID {sleeper.pid}\\) is switching"):
            install.recover(checkout)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert (checkout / install.JOURNAL).exists() and staging.exists()
