"""`openenv validate --url`, run in the checking process, says what the command line says.

The suite calls openenv-core's runtime validator, the function the command line calls for a
URL, in its own process (pipeline/checks/conformance.py). These tests hold it to the real
console script: the same exit code and JSON report for a server that fails every criterion
and for the real environment server (which passes them all); a run past its time limit is
reported; the console script on PATH runs when the validator cannot be imported here.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time

import pytest

from pipeline.checks import conformance


def _command_line(url: str) -> tuple[int, dict]:
    """What the real `openenv` console script prints and exits with."""
    ran = conformance._run_command(
        (conformance.openenv_command(), "validate", "--url", url), {**os.environ, "NO_COLOR": "1", "TERM": "dumb"}, 120
    )
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
    """In this process, then (the validator not importable here) the console script on PATH:
    one verdict, the command line's."""
    url = _closed_port()
    here = conformance.validate(url)
    monkeypatch.setattr(conformance, "_validator", lambda: None)
    script = conformance.validate(url)
    assert here.command == ("openenv", "validate", "--url", url)
    assert script.command == (conformance.openenv_command(), "validate", "--url", url)
    assert here.exit_code == script.exit_code == 1 and not here.passed and not script.passed
    assert _without_timestamps(here.report) == _without_timestamps(script.report)
    assert "health_endpoint" in here.failed_criteria


@pytest.mark.root
@pytest.mark.slow
def test_the_real_server_passes_every_criterion_both_ways(live_server):
    here = conformance.validate(live_server.url)
    code, report = _command_line(live_server.url)
    assert here.passed and here.exit_code == code == 0, here.observed()
    assert _without_timestamps(here.report) == _without_timestamps(report)
    assert all(c["passed"] for c in report["criteria"]) and len(report["criteria"]) >= 5


def test_a_run_past_its_time_limit_is_reported(silent_server):
    started = time.monotonic()
    result = conformance.validate(silent_server, timeout_s=1.0)
    assert time.monotonic() - started < 30
    assert result.exit_code is None and not result.passed
    assert result.error == "did not finish within 1 s"
    assert "did not finish" in result.observed()["error"]


def test_what_the_validator_raises_fails_the_check_as_the_command_line_exits_1(monkeypatch):
    """The command line prints a validator's error and exits 1: so does the check."""

    def broken(url, timeout_s):
        raise ValueError(f"not a runtime URL: {url}")

    monkeypatch.setattr(conformance, "_validator", lambda: broken)
    result = conformance.validate("http://127.0.0.1:9")
    assert result.exit_code == 1 and not result.passed
    assert result.error == "ValueError: not a runtime URL: http://127.0.0.1:9"


def test_a_report_that_did_not_pass_fails_the_check(monkeypatch):
    monkeypatch.setattr(
        conformance,
        "_validator",
        lambda: lambda url, timeout_s: {"passed": False, "criteria": [{"id": "health_endpoint", "passed": False}]},
    )
    result = conformance.validate("http://127.0.0.1:9")
    assert (result.exit_code, result.passed, result.failed_criteria) == (1, False, ["health_endpoint"])
