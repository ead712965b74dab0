"""Episode rules: reset isolation, same inputs for any seed, 16 actions, grading, cached terminal."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from env.catalog import CASE_IDS
from tests.env.conftest import alive_after_teardown

pytestmark = pytest.mark.root

CASE = "finance_ledger-d2-s307"
REPO = "/workspace/repo"


def shell(env, command: str):
    return env.step({"operation": "shell", "command": command})


def snapshot(server) -> dict[str, str]:
    """sha256 of every file in the workspace, read from the test (root) side."""
    repo = server.path(REPO)
    return {name: hashlib.sha256((repo / name).read_bytes()).hexdigest() for name in sorted(os.listdir(repo))}


def test_reset_writes_inputs_and_instructions_owned_by_2000(server):
    with server.session() as env:
        result = env.reset(task_id=CASE)
        repo_path = server.path(REPO)
        names = sorted(os.listdir(repo_path))
        assert len(names) == 4 and "INSTRUCTIONS.md" in names
        sandbox = server.sandbox_id  # 2000 inside, as this process sees it
        for name in names:
            info = os.lstat(repo_path / name)
            assert (info.st_uid, info.st_gid, info.st_mode & 0o777) == (sandbox, sandbox, 0o644)
        repo = os.stat(repo_path)
        assert (repo.st_uid, repo.st_gid) == (sandbox, sandbox)
        assert os.stat(server.path("/workspace")).st_uid == 0
        instructions = (repo_path / "INSTRUCTIONS.md").read_text()
        assert result.observation["output"] == instructions
        assert "answer.json" in instructions and "16 actions" in instructions
        listing = shell(env, "stat -c '%u:%g %n' *").observation["output"].split("\n")
        assert all(line.startswith("2000:2000 ") for line in listing if line)


def test_same_case_gives_same_files_whatever_the_seed(server):
    with server.session() as env:
        env.reset(task_id=CASE, seed=1)
        first = snapshot(server)
        env.reset(task_id=CASE, seed=987654321, episode_id="other")
        assert snapshot(server) == first
        env.reset(task_id=CASE)
        assert snapshot(server) == first
        env.reset(task_id=CASE_IDS[0], seed=1)
        assert snapshot(server) != first


def test_reset_discards_the_workspace_and_sandbox_temp_files(server):
    with server.session() as env:
        env.reset(task_id=CASE)
        shell(env, "mkdir -p junk/deep && touch junk/deep/f extra.txt /tmp/arena-leftover && echo x >> graph.json")
        assert server.path("/tmp/arena-leftover").exists()
        env.reset(task_id=CASE)
        assert sorted(os.listdir(server.path(REPO))) == sorted(snapshot(server))
        assert not server.path(REPO + "/junk").exists()
        assert not server.path("/tmp/arena-leftover").exists()


def test_reset_kills_a_background_process(server):
    with server.session() as env:
        env.reset(task_id=CASE)
        shell(env, "nohup setsid sleep 1000 >/dev/null 2>&1 & echo $!")
        pids = server.episode_pids()
        assert len(pids) == 1
        env.reset(task_id=CASE)
        assert alive_after_teardown(pids) == []


def test_correct_answer_scores_one_and_finish_ends_the_episode(server, oracle_json):
    with server.session() as env:
        env.reset(task_id=CASE)
        assert shell(env, server.write_command("answer.json", oracle_json(CASE))).observation["exit_code"] == 0
        result = env.step({"operation": "finish"})
        assert (result.done, result.reward) == (True, 1.0)
        assert result.observation["exit_code"] is None
        assert env.state()["done"] is True


def test_partial_answer_gets_partial_credit(server, oracle_json):
    with server.session() as env:
        env.reset(task_id=CASE)
        answer = json.loads(oracle_json(CASE))
        answer["held_ids"] = ["txn_0000"]
        shell(env, server.write_command("answer.json", json.dumps(answer)))
        result = env.step({"operation": "finish"})
        assert result.done and 0.0 < result.reward <= 0.8


def test_edited_inputs_do_not_move_the_target(server, oracle_json):
    with server.session() as env:
        env.reset(task_id=CASE)
        # Rewrite every input file; the expected answer still comes from the originals.
        shell(env, "for f in *.json; do echo '{}' > \"$f\"; done; rm INSTRUCTIONS.md")
        shell(env, server.write_command("answer.json", oracle_json(CASE)))
        assert env.step({"operation": "finish"}).reward == 1.0


def test_sixteenth_shell_action_executes_then_grades(server, oracle_json):
    with server.session() as env:
        env.reset(task_id=CASE)
        for number in range(1, 16):
            result = shell(env, f"echo {number}")
            assert result.done is False and result.observation["output"] == f"{number}\n"
        assert env.state()["step_count"] == 15
        last = shell(env, server.write_command("answer.json", oracle_json(CASE)) + "\necho written")
        assert last.done is True and last.reward == 1.0
        assert last.observation["exit_code"] == 0
        assert last.observation["output"].startswith("written\n")
        assert "graded" in last.observation["output"]


def test_sixteenth_action_without_answer_scores_zero_with_reason(server):
    with server.session() as env:
        env.reset(task_id=CASE)
        for _ in range(15):
            shell(env, "true")
        last = shell(env, "echo done")
        assert (last.done, last.reward) == (True, 0.0)
        assert "answer.json is missing" in last.observation["output"]


def test_terminal_result_is_cached_and_nothing_runs_after_done(server):
    with server.session() as env:
        env.reset(task_id=CASE)
        final = env.step({"operation": "finish"})
        assert (final.done, final.reward) == (True, 0.0)
        for action in (
            {"operation": "shell", "command": "touch /workspace/repo/marker"},
            {"operation": "finish"},
            {"operation": "shell", "command": "echo '{}' > answer.json"},
        ):
            again = env.step(action)
            assert (again.done, again.reward) == (True, 0.0)
            assert again.observation == final.observation
        assert not server.path(REPO + "/marker").exists()
        assert not server.path(REPO + "/answer.json").exists()
        assert env.state()["step_count"] == 1
        # A reset starts a fresh episode.
        env.reset(task_id=CASE)
        assert shell(env, "echo again").observation["output"] == "again\n"
