"""OpenEnv conformance: openenv-core's own validator against a running server.

The check runs the real command line, `openenv validate --url URL` (openenv-core's
CLI, installed with its `cli` requirements in the pipeline's environment), exactly as
the seed release's `openenv_endpoint_validation` did and as the platform's admission
judges an image. It passes when the command exits 0; its JSON report (one criterion
per line of the OpenEnv runtime standard) is kept as the observed value, and a failure
names the criteria that failed.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
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
        out: dict[str, Any] = {"command": shlex.join(self.command), "exit_code": self.exit_code,
                               "criteria": criteria, "mode": self.report.get("mode")}
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
            "pipeline's dependencies (nox does) or `pip install 'openenv-core[cli]==0.3.0'`")
    return found


def validate(url: str, *, timeout_s: float = VALIDATE_TIMEOUT_S) -> Validation:
    """Run `openenv validate --url <url>` and read its JSON report."""
    try:
        argv = (openenv_command(), "validate", "--url", url)
    except FileNotFoundError as exc:
        return Validation(("openenv", "validate", "--url", url), None, error=str(exc))
    log.info("$ %s", shlex.join(argv))
    env = {**os.environ, "NO_COLOR": "1", "TERM": "dumb"}
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env,
                              check=False)
    except subprocess.TimeoutExpired:
        return Validation(argv, None, error=f"did not finish within {timeout_s:g} s")
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return Validation(argv, proc.returncode, error="no JSON report: " + " | ".join(tail))
    return Validation(argv, proc.returncode, report if isinstance(report, dict) else {})


def record_validation(rec: Recorder, name: str, url: str) -> Validation:
    """Run the validator against `url` and record it as check `name`."""
    result = validate(url)
    rec.add(name, result.passed, observed=result.observed(),
            expected="`openenv validate --url` exits 0: every criterion of the OpenEnv runtime "
                     "standard passes",
            detail="" if result.passed else "failed: " + ", ".join(result.failed_criteria or [result.error]))
    return result
