"""The server as the image installs it: root-only code, a vendored task file, the slim runtime, 60 s."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from env.catalog import CASE_IDS

pytestmark = pytest.mark.root

REPO_ROOT = Path(__file__).resolve().parents[2]

# A vendored-style single-file task module: the families API over a toy problem, with
# no import of the project, so loading it by path is what makes it served.
TOY_TASKS = """
import json
TASK_IDS = ["software_change", "industrial_schedule", "science_calibration",
            "office_reconciliation", "finance_ledger", "math_route", "security_triage",
            "media_timeline"]
DOMAINS = {t: "toy " + t for t in TASK_IDS}
def _dump(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")) + "\\n"
def make_task(task_id, seed, difficulty=2):
    if task_id not in TASK_IDS or type(seed) is not int or difficulty not in (1, 2, 3):
        raise ValueError("bad arguments")
    files = {"a.json": _dump({"n": seed}), "b.json": _dump({"d": difficulty}), "c.json": _dump({"t": task_id})}
    return {"task_id": task_id, "domain": DOMAINS[task_id], "prompt": "TOY: answer {\\"sum\\": n + d}",
            "files": files, "expected": {"sum": seed + difficulty}, "rubric": {}, "seed": seed,
            "difficulty": difficulty, "generator_version": "toy-1"}
def grade(task, answer):
    return 1.0 if answer == task["expected"] else 0.0
def oracle_answer(task):
    return {"sum": json.loads(task["files"]["a.json"])["n"] + json.loads(task["files"]["b.json"])["d"]}
"""


def _install_root_only(source: Path, target: Path) -> None:
    """Copy ``source`` like the image layer does: directories 0700, files 0600, owned by root."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    for directory, _, files in os.walk(target):
        os.chmod(directory, 0o700)
        for name in files:
            os.chmod(os.path.join(directory, name), 0o600)


@pytest.mark.slow
def test_code_and_task_module_unreadable_by_uid_2000(start_live_server):
    # /srv is traversable and not one of the sandbox's own scratch directories (which
    # hide what the host has there), so only the install's own modes protect it.
    base = Path(tempfile.mkdtemp(prefix="arena-install-", dir="/srv"))
    try:
        os.chmod(base, 0o755)
        install = base / "arena"
        install.mkdir(mode=0o700)
        _install_root_only(REPO_ROOT / "env", install / "env")
        vendored = install / "vendor" / "toy" / "tasks.py"
        vendored.parent.mkdir(parents=True, mode=0o700)
        vendored.write_text(TOY_TASKS)
        os.chmod(vendored, 0o600)
        live = start_live_server(pythonpath=str(install), tasks_file=str(vendored))
        with live.session() as env:
            assert "TOY" in env.reset(task_id=CASE_IDS[0]).observation["output"]
            probes = {
                "ls": f"ls {install}",
                "cat-app": f"cat {install}/env/server/app.py",
                "cat-families": f"cat {install}/env/families/__init__.py",
                "cat-vendored": f"cat {vendored}",
                "import": f"cd {install} && python3 -c 'import env.families'",
            }
            for name, command in probes.items():
                out = env.step({"operation": "shell", "command": command}).observation
                assert out["exit_code"] != 0, name
                assert "Permission denied" in out["output"] or "PermissionError" in out["output"], name
            listing = env.step({"operation": "shell", "command": f"ls {base}"}).observation
            assert listing["output"] == "arena\n"  # the parent is readable; the install is not
    finally:
        shutil.rmtree(base)


@pytest.mark.slow
def test_vendored_task_file_serves_the_same_32_cases(start_live_server, tmp_path):
    vendored = tmp_path / "tasks.py"
    vendored.write_text(TOY_TASKS)
    live = start_live_server(tasks_file=str(vendored))
    with live.session() as env:
        for case_id in CASE_IDS:
            assert env.reset(task_id=case_id).observation["task_id"] == case_id
        seed, difficulty = 307, 2  # the last case
        env.step({"operation": "shell", "command": f"echo '{{\"sum\": {seed + difficulty}}}' > answer.json"})
        assert env.step({"operation": "finish"}).reward == 1.0


@pytest.mark.slow
def test_real_sixty_second_timeout(start_live_server):
    live = start_live_server(shell_timeout_s=60.0)
    with live.session(message_timeout_s=120) as env:
        env.reset()
        started = time.monotonic()
        out = env.step({"operation": "shell", "command": "sleep 600 & sleep 600"}).observation
        elapsed = time.monotonic() - started
        assert 59 < elapsed < 70
        assert out["exit_code"] == 124 and "timed out after 60 s" in out["output"]
        assert json.dumps(out)
