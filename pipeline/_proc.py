"""The one way the pipeline runs an external program: logged, checked, explained."""

from __future__ import annotations

import logging
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from pipeline.errors import ToolError

log = logging.getLogger("pipeline.proc")


def which(tool: str, *, package: str | None = None) -> str:
    """Absolute path of a tool, or a ToolError saying how to install it."""
    path = shutil.which(tool)
    if path is None:
        pkg = package or tool
        raise ToolError(
            f"required tool '{tool}' is not installed",
            hint=f"install it (Debian: apt-get install {pkg}) or run `python -m pipeline setup`",
        )
    return path


STDERR_LINES = 20


def run(
    argv: Sequence[str | Path],
    *,
    check: bool = True,
    capture: bool = True,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    input: bytes | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run argv (no shell), log its exact command line, raise ToolError on failure."""
    args = [str(a) for a in argv]
    log.info("$ %s", shlex.join(args))
    try:
        proc = subprocess.run(
            args,
            check=False,
            stdout=subprocess.PIPE if capture else None,
            stderr=subprocess.PIPE if capture else None,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            input=input,
            timeout=timeout,
        )
    except FileNotFoundError as exc:
        raise ToolError(f"cannot run {args[0]}: not found", hint="install it first") from exc
    except subprocess.TimeoutExpired as exc:
        raise ToolError(f"`{shlex.join(args)}` did not finish within {timeout} s") from exc
    if check:
        checked(proc)
    return proc


def checked(proc: subprocess.CompletedProcess[bytes]) -> subprocess.CompletedProcess[bytes]:
    """`proc` if it exited 0; else the ToolError `run` raises, with its stderr's last lines."""
    args = [str(a) for a in proc.args]
    if proc.returncode != 0:
        err = (proc.stderr or b"").decode(errors="replace").strip().splitlines()
        tail = err[-1] if err else "(no output)"
        # The lines before the last often say why (mmdebstrap's last line is only
        # "mmdebstrap failed to run").
        before = err[-STDERR_LINES:-1]
        raise ToolError(
            f"`{shlex.join(args)}` failed",
            expected="exit 0",
            actual=f"exit {proc.returncode}: {tail}",
            hint=("its stderr before that:\n" + "\n".join(before)) if before else None,
        )
    return proc
