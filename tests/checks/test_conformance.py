"""`openenv validate --url`, forked from a preloaded CLI, says what the command line says.

The suite runs openenv-core's validator as a process forked from a forkserver that
imported the CLI once (pipeline/checks/conformance.py). These tests hold it to the real
console script: the same exit code and JSON report for a server that fails every criterion
and for the real environment server (which passes them all), a run past its time limit
killed and reported; the console script on PATH runs when the CLI cannot be imported here.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pipeline.checks import conformance

REPO = Path(__file__).resolve().parents[2]


def _command_line(url: str) -> tuple[int, dict]:
    """What the real `openenv` console script prints and exits with."""
    ran = conformance._run_command((conformance.openenv_command(), "validate", "--url", url),
                                   {**os.environ, "NO_COLOR": "1", "TERM": "dumb"}, 120)
    assert ran is not None
    return ran[0], json.loads(ran[1])


def _without_timestamps(report: dict) -> dict:
    return {k: v for k, v in report.items() if "time" not in k}


@pytest.fixture
def silent_server():
    """A loopback socket that accepts connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        held: list[socket.socket] = []
        stop = threading.Event()

        def accept() -> None:
            listener.settimeout(0.2)
            while not stop.is_set():
                try:
                    held.append(listener.accept()[0])
                except OSError:
                    continue

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
        stop.set()
        thread.join()
        for conn in held:
            conn.close()


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_a_server_that_is_not_there_fails_the_same_criteria_both_ways(monkeypatch):
    """Forked, then (the CLI not importable here) the console script on PATH: one verdict."""
    url = _closed_port()
    forked = conformance.validate(url)
    monkeypatch.setattr(conformance, "_forkable", lambda: False)
    script = conformance.validate(url)
    assert forked.command == ("openenv", "validate", "--url", url)
    assert script.command == (conformance.openenv_command(), "validate", "--url", url)
    assert forked.exit_code == script.exit_code == 1 and not forked.passed and not script.passed
    assert _without_timestamps(forked.report) == _without_timestamps(script.report)
    assert "health_endpoint" in forked.failed_criteria


@pytest.mark.root
@pytest.mark.slow
def test_the_real_server_passes_every_criterion_both_ways(live_server):
    forked = conformance.validate(live_server.url)
    code, report = _command_line(live_server.url)
    assert forked.passed and forked.exit_code == code == 0, forked.observed()
    assert _without_timestamps(forked.report) == _without_timestamps(report)
    assert all(c["passed"] for c in report["criteria"]) and len(report["criteria"]) >= 5


def test_a_run_past_its_time_limit_is_killed_and_reported(silent_server):
    started = time.monotonic()
    result = conformance.validate(silent_server, timeout_s=1.0)
    assert time.monotonic() - started < 30
    assert result.exit_code is None and not result.passed
    assert result.error == "did not finish within 1 s"
    assert "did not finish" in result.observed()["error"]
    assert not multiprocessing.active_children()  # killed and reaped


def test_a_process_that_validated_leaves_no_forkserver_behind():
    """The forkserver and multiprocessing's resource tracker are stopped and waited for when the
    process that started them exits, not a moment after."""
    program = (
        "import multiprocessing.forkserver as f, multiprocessing.resource_tracker as r\n"
        "from pipeline.checks import conformance\n"
        f"result = conformance.validate({_closed_port()!r})\n"
        "assert result.exit_code == 1, result\n"
        "print(f._forkserver._forkserver_pid, r._resource_tracker._pid)\n")
    ran = subprocess.run([sys.executable, "-c", program], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr[-2000:]
    helpers = [int(pid) for pid in ran.stdout.split()]
    assert len(helpers) == 2 and all(helpers), ran.stdout
    for pid in helpers:
        assert not Path(f"/proc/{pid}").exists(), f"process {pid} outlived the process that started it"
