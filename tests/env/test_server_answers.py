"""The answer.json rejection matrix: every bad answer scores 0.0 with a reason, never an error."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from env.server.answer import parse_answer, read_answer

pytestmark = pytest.mark.root

CASE = "security_triage-d1-s101"

# name -> (shell command that leaves a bad answer.json, fragment of the reason)
BAD_ANSWERS = {
    "missing": ("rm -f answer.json", "answer.json is missing"),
    "empty": (": > answer.json", "answer.json is empty"),
    "not-json": ("echo '{\"a\": 1,' > answer.json", "not valid JSON"),
    "array": ("echo '[1, 2]' > answer.json", "must hold a JSON object, not an array"),
    "bool": ("echo true > answer.json", "must hold a JSON object, not a boolean"),
    "nan": ("echo '{\"allowed_ids\": NaN}' > answer.json", "NaN is not valid JSON"),
    "too-deep": (
        "python3 -c \"print('{\\\"a\\\": ' + '[' * 25 + ']' * 25 + '}')\" > answer.json",
        "nested 26 levels deep; the limit is 20",
    ),
    "16385-bytes": (
        "python3 -c \"import sys; sys.stdout.write('{\\\"a\\\": \\\"' + 'x' * 16376 + '\\\"}')\" > answer.json"
        " && test $(stat -c %s answer.json) -eq 16385",
        "answer.json is 16385 bytes; the limit is 16384",
    ),
    "symlink": ("ln -sf /workspace/home/valid.json answer.json", "is a symbolic link"),
    "fifo": ("mkfifo answer.json", "not a regular file (a FIFO)"),
    "directory": ("mkdir answer.json", "not a regular file (a directory)"),
}


@pytest.mark.parametrize("kind", list(BAD_ANSWERS))
def test_bad_answer_scores_zero_with_reason_and_server_stays_healthy(server, oracle_json, kind):
    command, reason = BAD_ANSWERS[kind]
    with server.session() as env:
        env.reset(task_id=CASE)
        # A correct answer sits next to the bad one: only the file at answer.json counts.
        setup = env.step(
            {
                "operation": "shell",
                "command": server.write_command("/workspace/home/valid.json", oracle_json(CASE)) + "\n" + command,
            }
        )
        assert setup.observation["exit_code"] == 0, setup.observation["output"]
        started = time.monotonic()
        result = env.step({"operation": "finish"})
        assert time.monotonic() - started < 5  # a FIFO must not block the grader
        assert (result.done, result.reward) == (True, 0.0)
        assert reason in result.observation["output"]
    assert server.healthy()
    with server.session() as env:
        assert env.reset(task_id=CASE).observation["task_id"] == CASE


def test_the_valid_answer_used_by_the_matrix_scores_one(server, oracle_json):
    with server.session() as env:
        env.reset(task_id=CASE)
        env.step({"operation": "shell", "command": server.write_command("answer.json", oracle_json(CASE))})
        assert env.step({"operation": "finish"}).reward == 1.0


def test_answer_with_booleans_inside_is_graded_zero(server, oracle_json):
    with server.session() as env:
        env.reset(task_id=CASE)
        env.step({"operation": "shell", "command": "echo '{\"allowed_ids\": [true]}' > answer.json"})
        result = env.step({"operation": "finish"})
        assert (result.done, result.reward) == (True, 0.0)


def test_read_answer_bounds_and_kinds(tmp_path: Path):
    answer = tmp_path / "answer.json"
    answer.write_bytes(b'{"a": "' + b"x" * (16_384 - 9) + b'"}')
    assert answer.stat().st_size == 16_384
    assert read_answer(answer).answer is not None
    answer.write_bytes(b"\xff\xfe{}")
    assert "not UTF-8" in read_answer(answer).reason
    answer.write_text("{}\n")
    assert read_answer(answer).answer == {}
    answer.write_text('{"a": Infinity}')
    assert "Infinity is not valid JSON" in read_answer(answer).reason
    answer.write_text("[" * 16_000 + "]" * 16_000)
    assert read_answer(answer).reason  # over the size limit, never a RecursionError
    assert "nested deeper" in parse_answer(b"[" * 100_000 + b"]" * 100_000).reason
    nodes = "{" + ",".join(f'"k{i}": 1' for i in range(2_048)) + "}"
    assert "2049 JSON values" in parse_answer(nodes.encode()).reason
    os.unlink(answer)
    os.symlink("/dev/null", answer)
    assert "symbolic link" in read_answer(answer).reason
