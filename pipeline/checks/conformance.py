"""OpenEnv conformance: openenv-core's own validator against a running server.

The check is `openenv validate --url URL` (openenv-core's CLI, installed with its `cli`
requirements in the pipeline's environment), as the seed release's
`openenv_endpoint_validation` ran it and as the platform's admission judges an image. It
passes when the command would exit 0; its JSON report (one criterion per line of the
OpenEnv runtime standard) is kept as the observed value, and a failure names the
criteria that failed.

For a URL the command calls one function, openenv-core's
`openenv.cli._validation.validate_running_environment(url, timeout_s=5.0)` (its
`--timeout` default), prints the report it returns and exits 1 unless the report passed
(1 too, with the error, when the function raises). When this interpreter has that module,
the check calls the same function in this process: a process of the CLI spends 3 s of CPU
importing it (fastmcp, mcp, openai) before a check of under a second, and a release or a
test run validates dozens of servers; the process that checks has imported openenv-core
already (its client opens the suite's sessions). Otherwise the `openenv` console script on
PATH runs. tests/checks/test_conformance.py holds both to the console script's exit code
and report.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.checks._record import Recorder

log = logging.getLogger("pipeline.checks.conformance")

# The validator's own per-request timeout is 5 s; the whole run gets this long.
VALIDATE_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Validation:
    """What `openenv validate --url` said about one server."""

    command: tuple[str, ...]
    exit_code: int | None
    report: dict[str, Any] = field(default_factory=dict)
    error: str = ""

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and bool(self.report.get("passed"))

    @property
    def failed_criteria(self) -> list[str]:
        return [c.get("id", "?") for c in self.report.get("criteria", []) if not c.get("passed")]

    def observed(self) -> dict[str, Any]:
        criteria = {c.get("id", "?"): bool(c.get("passed")) for c in self.report.get("criteria", [])}
        out: dict[str, Any] = {
            "command": shlex.join(self.command),
            "exit_code": self.exit_code,
            "criteria": criteria,
            "mode": self.report.get("mode"),
        }
        if self.error:
            out["error"] = self.error
        failed = [c for c in self.report.get("criteria", []) if not c.get("passed")]
        if failed:
            out["failed"] = [{k: c.get(k) for k in ("id", "details", "expected", "actual")} for c in failed]
        return out


def openenv_command() -> str:
    """The `openenv` console script of this interpreter's environment (else PATH's)."""
    beside = Path(sys.executable).with_name("openenv")
    if beside.exists():
        return str(beside)
    found = shutil.which("openenv")
    if found is None:
        raise FileNotFoundError(
            "openenv-core's command line `openenv` is not installed here: install the "
            "pipeline's dependencies (nox does) or `pip install 'openenv-core[cli]==0.3.0'`"
        )
    return found


def validate(url: str, *, timeout_s: float = VALIDATE_TIMEOUT_S) -> Validation:
    """`openenv validate --url <url>`: its exit code and JSON report (see the module's doc)."""
    command = ("openenv", "validate", "--url", url)
    validator = _validator()
    if validator is not None:
        log.info("$ %s (openenv-core's validator, in this process)", shlex.join(command))
        return _validate_here(validator, command, url, timeout_s)
    try:
        command = (openenv_command(), *command[1:])
    except FileNotFoundError as exc:
        return Validation(command, None, error=str(exc))
    log.info("$ %s", shlex.join(command))
    ran = _run_command(command, {**os.environ, "NO_COLOR": "1", "TERM": "dumb"}, timeout_s)
    if ran is None:
        return Validation(command, None, error=f"did not finish within {timeout_s:g} s")
    exit_code, stdout, stderr = ran
    try:
        report = json.loads(stdout)
    except ValueError:
        tail = (stderr or stdout).strip().splitlines()[-3:]
        return Validation(command, exit_code, error="no JSON report: " + " | ".join(tail))
    return Validation(command, exit_code, report if isinstance(report, dict) else {})


# The CLI's `--timeout` default: each of the validator's HTTP requests waits this long.
CLI_REQUEST_TIMEOUT_S = 5.0


def _validator() -> Callable[..., dict[str, Any]] | None:
    """openenv-core's runtime validator, when this interpreter has it."""
    try:
        from openenv.cli._validation import validate_running_environment
    except ImportError:
        return None
    return validate_running_environment


def _validate_here(
    validator: Callable[..., dict[str, Any]], command: tuple[str, ...], url: str, timeout_s: float
) -> Validation:
    """What the command line would say, from the validator it calls, in a thread of this
    process given `timeout_s` in all (past it, the thread is left to its requests' own
    timeouts and the run is reported unfinished)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            # As printed and read back: the JSON the command line writes.
            outcome["report"] = json.loads(json.dumps(validator(url, timeout_s=CLI_REQUEST_TIMEOUT_S)))
        except Exception as exc:  # the command line prints it and exits 1
            outcome["error"] = f"{type(exc).__name__}: {exc}"

    thread = threading.Thread(target=run, name="openenv validate", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        return Validation(command, None, error=f"did not finish within {timeout_s:g} s")
    if "error" in outcome:
        return Validation(command, 1, error=outcome["error"])
    report = outcome["report"] if isinstance(outcome.get("report"), dict) else {}
    return Validation(command, 0 if report.get("passed") else 1, report)


def _run_command(argv: tuple[str, ...], env: dict[str, str], timeout_s: float) -> tuple[int, str, str] | None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env, check=False)
    except subprocess.TimeoutExpired:
        return None
    return proc.returncode, proc.stdout, proc.stderr


def record_validation(rec: Recorder, name: str, url: str) -> Validation:
    """Run the validator against `url` and record it as check `name`."""
    result = validate(url)
    rec.add(
        name,
        result.passed,
        observed=result.observed(),
        expected="`openenv validate --url` exits 0: every criterion of the OpenEnv runtime standard passes",
        detail="" if result.passed else "failed: " + ", ".join(result.failed_criteria or [result.error]),
    )
    return result
