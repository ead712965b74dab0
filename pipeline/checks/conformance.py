"""OpenEnv conformance: openenv-core's own validator against a running server.

The check runs the real command line, `openenv validate --url URL` (openenv-core's
CLI, installed with its `cli` requirements in the pipeline's environment), exactly as
the seed release's `openenv_endpoint_validation` did and as the platform's admission
judges an image. It passes when the command exits 0; its JSON report (one criterion
per line of the OpenEnv runtime standard) is kept as the observed value, and a failure
names the criteria that failed.

openenv-core's CLI takes seconds of CPU to import (fastmcp, mcp, openai), and a release
or a test run validates dozens of servers. When this interpreter has openenv-core, each
run is therefore a process forked from a multiprocessing forkserver that imported the CLI
once: the console script's own entry point (`openenv.cli.__main__:main`, all the
`openenv` script calls) with the same argv and environment, its stdout and stderr to
files, its exit code read as the command line's. Otherwise the `openenv` on PATH runs.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import logging
import multiprocessing
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
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
    args = ("validate", "--url", url)
    env = {**os.environ, "NO_COLOR": "1", "TERM": "dumb"}
    if _forkable():
        command = ("openenv", *args)
        log.info("$ %s (forked from the preloaded CLI)", shlex.join(command))
        ran = _run_forked(args, env, timeout_s)
    else:
        try:
            command = (openenv_command(), *args)
        except FileNotFoundError as exc:
            return Validation(("openenv", *args), None, error=str(exc))
        log.info("$ %s", shlex.join(command))
        ran = _run_command(command, env, timeout_s)
    if ran is None:
        return Validation(command, None, error=f"did not finish within {timeout_s:g} s")
    exit_code, stdout, stderr = ran
    try:
        report = json.loads(stdout)
    except ValueError:
        tail = (stderr or stdout).strip().splitlines()[-3:]
        return Validation(command, exit_code, error="no JSON report: " + " | ".join(tail))
    return Validation(command, exit_code, report if isinstance(report, dict) else {})


def _run_command(argv: tuple[str, ...], env: dict[str, str],
                 timeout_s: float) -> tuple[int, str, str] | None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env, check=False)
    except subprocess.TimeoutExpired:
        return None
    return proc.returncode, proc.stdout, proc.stderr


CLI_MODULE = "openenv.cli.__main__"
_fork_lock = threading.Lock()
_fork_context: multiprocessing.context.ForkServerContext | None = None


def _forkable() -> bool:
    try:
        return importlib.util.find_spec(CLI_MODULE) is not None
    except ImportError:
        return False


def _forkserver() -> multiprocessing.context.ForkServerContext:
    """The forkserver context whose server imports the CLI once (started on first use,
    stopped at this process's exit)."""
    global _fork_context
    with _fork_lock:
        if _fork_context is None:
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload([CLI_MODULE, __name__])
            atexit.register(_stop_helpers)
            _fork_context = context
        return _fork_context


def _stop_helpers() -> None:
    """At exit: stop the forkserver and multiprocessing's resource tracker and wait for them.
    (They would exit on their own once this process is gone, a moment later: by then whoever
    checks that nothing was left behind has looked.)"""
    from multiprocessing import forkserver, resource_tracker

    for helper in (getattr(forkserver, "_forkserver", None), getattr(resource_tracker, "_resource_tracker", None)):
        stop = getattr(helper, "_stop", None)
        if stop is not None:
            try:
                stop()
            except OSError as exc:
                log.debug("stopping %s: %s", type(helper).__name__, exc)


def _run_forked(args: tuple[str, ...], env: dict[str, str],
                timeout_s: float) -> tuple[int, str, str] | None:
    with tempfile.TemporaryDirectory(prefix="openenv-validate-") as tmp:
        out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
        for path in (out, err):  # there to read even if the child dies before writing
            open(path, "wb").close()
        child = _forkserver().Process(target=_cli_main, args=(args, env, out, err),
                                      name="openenv validate", daemon=True)
        child.start()
        child.join(timeout_s)
        if child.is_alive():
            child.kill()
            child.join()
            return None
        with open(out, encoding="utf-8", errors="replace") as o, open(err, encoding="utf-8", errors="replace") as e:
            return child.exitcode if child.exitcode is not None else -1, o.read(), e.read()


def _cli_main(args: tuple[str, ...], env: dict[str, str], out: str, err: str) -> None:
    """In the forked child: the `openenv` console script, stdout and stderr to files."""
    os.environ.clear()
    os.environ.update(env)
    for path, fd in ((out, 1), (err, 2)):
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(handle, fd)
        os.close(handle)
    sys.argv = ["openenv", *args]
    from openenv.cli.__main__ import main

    main()


def record_validation(rec: Recorder, name: str, url: str) -> Validation:
    """Run the validator against `url` and record it as check `name`."""
    result = validate(url)
    rec.add(name, result.passed, observed=result.observed(),
            expected="`openenv validate --url` exits 0: every criterion of the OpenEnv runtime "
                     "standard passes",
            detail="" if result.passed else "failed: " + ", ".join(result.failed_criteria or [result.error]))
    return result
