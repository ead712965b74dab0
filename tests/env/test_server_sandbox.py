"""How a shell command runs: as UID/GID 2000, scrubbed, in its own group, bounded."""

from __future__ import annotations

import time

import pytest

from env.catalog import CASE_IDS

pytestmark = pytest.mark.root

PYTHON = "/usr/bin/python3"


def run(env, command: str) -> dict:
    result = env.step({"operation": "shell", "command": command})
    assert result.done is False
    return result.observation


def test_identity_cwd_and_scrubbed_environment(server):
    with server.session() as env:
        env.reset(task_id=CASE_IDS[0])
        assert run(env, "id -u; id -g; id -G")["output"] == "2000\n2000\n2000\n"
        assert run(env, "pwd")["output"] == "/workspace/repo\n"
        names = run(env, "env -0 | tr '\\0' '\\n' | cut -d= -f1 | sort")["output"].split()
        # bash adds PWD, SHLVL and _ itself; nothing comes from the server's environment.
        assert set(names) <= {"PATH", "HOME", "LANG", "PWD", "SHLVL", "_"}
        assert {"PATH", "HOME", "LANG"} <= set(names)
        assert run(env, "echo $PATH")["output"] == "/usr/local/bin:/usr/bin:/bin\n"
        assert run(env, "grep NoNewPrivs /proc/self/status")["output"].split() == ["NoNewPrivs:", "1"]


def test_command_leads_its_own_session_and_process_group(server):
    with server.session() as env:
        env.reset()
        # Field 5 and 6 of /proc/PID/stat are the process group and the session.
        # /proc is the server's: its PIDs are those of the server's PID namespace.
        pid, pgrp, sid = run(env, "read -a f < /proc/self/stat; echo ${f[0]} ${f[4]} ${f[5]}")["output"].split()
        assert pid == pgrp == sid
        child = run(env, f"{PYTHON} -c 'import os; print(os.getpgid(0), os.getsid(0), os.getppid())'; true")
        assert len(set(child["output"].split())) == 1


def test_exit_code_reported(server):
    with server.session() as env:
        env.reset()
        assert run(env, "exit 7")["exit_code"] == 7
        assert run(env, "true")["exit_code"] == 0
        assert run(env, "kill -9 $$")["exit_code"] == 137


def test_timeout_kills_the_whole_process_group(server):
    with server.session() as env:
        env.reset()
        started = time.monotonic()
        out = run(env, "sleep 1000 & echo $! > child.pid; sleep 1000; echo never")
        elapsed = time.monotonic() - started
        assert 2.5 < elapsed < 10
        assert out["exit_code"] == 124
        assert "timed out after 3 s" in out["output"] and "never" not in out["output"]
        gone = run(env, "kill -0 $(cat child.pid) 2>&1; echo status=$?")["output"]
        assert "No such process" in gone and "status=1" in gone


def test_output_keeps_the_last_12000_bytes_and_says_so(server):
    with server.session() as env:
        env.reset()
        out = run(env, "head -c 50000 /dev/zero | tr '\\0' a; echo; echo END")
        text = out["output"]
        assert text.startswith("[output truncated: showing the last 12000 of 50005 bytes]\n")
        body = text.split("\n", 1)[1]
        assert len(body.encode()) == 12_000 and body.endswith("a\nEND\n")
        assert len(text) <= 16_000
        small = run(env, "printf 'x%.0s' $(seq 12000)")["output"]
        assert small == "x" * 12_000


def test_fork_bomb_is_stopped_by_the_process_limit(server):
    with server.session() as env:
        env.reset()
        script = (
            "import os, time\n"
            "n = 0\n"
            "try:\n"
            "    while n < 2000:\n"
            "        if os.fork() == 0:\n"
            "            time.sleep(30)\n"
            "            os._exit(0)\n"
            "        n += 1\n"
            "except OSError as exc:\n"
            "    print('stopped', n, exc.errno)\n"
        )
        out = run(env, server.write_command("bomb.py", script) + f"\n{PYTHON} bomb.py")
        assert out["output"].startswith("stopped "), out["output"]
        assert int(out["output"].split()[1]) < 256
        # The next reset ends them all; the shell works again.
        env.reset()
        assert run(env, "echo alive")["output"] == "alive\n"


def test_runaway_file_is_stopped_by_the_size_limit(server):
    with server.session() as env:
        env.reset()
        # In 1 MiB writes: `head -c` writes 8 KiB at a time, 0.5 s of system time for the 256 MiB,
        # which a doubly loaded machine (two runs of the suite) stretched past the 3-s timeout.
        out = run(env, "dd if=/dev/zero of=big bs=1M count=300; echo status=$?; stat -c %s big")
        lines = out["output"].split()
        assert "status=153" in lines  # 128 + SIGXFSZ
        assert int(lines[-1]) == 256 * 1024 * 1024
        env.reset()


def test_a_normal_python_run_works_under_the_limits(server):
    with server.session() as env:
        env.reset()
        out = run(env, f"{PYTHON} -c 'import json, sqlite3, subprocess; print(json.dumps(sum(range(10))))'")
        assert out == {"task_id": CASE_IDS[0], "output": "45\n", "exit_code": 0}
