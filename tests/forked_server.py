"""Contained servers forked from a process that has already imported the server's stack.

A host-mode server (tests/contained.py) spends about 2.5 s of CPU importing openenv-core,
FastAPI, MCP and pydantic's models before it answers, and a test run starts about fifty.
Here each pytest worker keeps one multiprocessing forkserver that imported that stack
(the third-party part only: never `env`, which each server loads from its own
PYTHONPATH, e.g. a root-only copy); a server is a fork of it that then makes the same
namespaces `contained_argv` makes, as the same steps in the same order (the same shell
script for the overlay, tests/userns_exec.py's `enter` for the user namespace), and runs
the same Python command line (`-c CODE`, `-m MODULE` or `SCRIPT`, with its arguments)
as PID 1 of the new PID namespace, pivoted into the overlay, with the requested
environment, working directory and sys.path of a fresh interpreter.

Only commands of this interpreter are forked; anything else (another virtualenv's
python, a shell) runs through `contained_argv` as before. `Forked` answers what the
tests ask a `subprocess.Popen` of the contained command (pid, poll, wait, kill,
returncode); its pid is the process in the new user namespace whose child is the
namespace's PID 1, as the `unshare` process is.

This module must not import pytest or the test suite: the forkserver imports it.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import resource
import runpy
import signal
import subprocess
import sys
from pathlib import Path

from tests import userns_exec

# What every server imports before it reads its own code: openenv-core's server (which
# brings FastAPI, MCP and pydantic's models) and uvicorn.
PRELOAD = ["tests.forked_server", "openenv.core.env_server.http_server", "uvicorn"]

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1

CPU_SUFFIX = ".cpu"
_context = None
# CPU seconds of the forked servers that have ended in this process's view (`Forked.poll`).
ended_cpu_s = 0.0


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _unshare(flags: int, what: str) -> None:
    libc = _libc()
    _check(libc.unshare(flags), f"unshare({what})")
    if flags & CLONE_NEWNS:  # --propagation private
        _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")


def fresh_sys_path(first: str, pythonpath: str) -> list[str]:
    """sys.path as `python` started afresh with PYTHONPATH=`pythonpath` has it: `first`
    (the script's directory, or '' for -c and -m), PYTHONPATH, then this interpreter's own
    entries (the standard library and site-packages)."""
    own = [p for p in sys.path if p and (p.startswith(sys.base_prefix) or p.startswith(sys.prefix))]
    return [first, *[p for p in pythonpath.split(os.pathsep) if p], *own]


def _run_python(pyargv: list[str], env: dict[str, str]) -> int:
    """Run `python PYARGV...` in this process (after the namespaces are made)."""
    os.environ.clear()
    os.environ.update(env)
    if env.get("PYTHONUNBUFFERED"):  # as `python` started with it writes its output
        for stream in (sys.stdout, sys.stderr):
            stream.reconfigure(line_buffering=True, write_through=True)
    pythonpath = env.get("PYTHONPATH", "")
    for name in [m for m in sys.modules if m == "env" or m.startswith("env.")]:
        del sys.modules[name]
    try:
        if pyargv[0] == "-c":
            sys.argv = ["-c", *pyargv[2:]]
            sys.path[:] = fresh_sys_path("", pythonpath)
            exec(compile(pyargv[1], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
        elif pyargv[0] == "-m":
            sys.argv = [pyargv[1], *pyargv[2:]]
            sys.path[:] = fresh_sys_path("", pythonpath)
            runpy.run_module(pyargv[1], run_name="__main__", alter_sys=True)
        else:
            script = os.path.abspath(pyargv[0])
            sys.argv = [pyargv[0], *pyargv[1:]]
            sys.path[:] = fresh_sys_path(os.path.dirname(script), pythonpath)
            runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    except BaseException:
        import traceback

        traceback.print_exc()
        return 1
    return 0


def _serve(
    scratch: str,
    share: str,
    cwd: str,
    env: dict[str, str],
    pyargv: list[str],
    log: str,
    setup_mounts: str,
    enter_script: str,
) -> None:
    """The forked child: the namespaces of `contained_argv`, then `python PYARGV` as PID 1."""
    code = 1
    try:
        out = os.open(log, os.O_WRONLY | os.O_APPEND)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        os.close(devnull)
        os.chdir(cwd)
        # unshare --mount --propagation private sh -c SETUP_MOUNTS (as the host's root)
        _unshare(CLONE_NEWNS, "CLONE_NEWNS")
        subprocess.run(["/bin/sh", "-c", setup_mounts, "contained", scratch, share, sys.executable], check=True)
        # python userns_exec.py -- unshare --mount --pid --ipc --fork --kill-child --propagation private
        userns_exec.enter()
        _unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC, "CLONE_NEWNS|CLONE_NEWPID|CLONE_NEWIPC")
        init = os.fork()
        if init == 0:
            status = 1
            try:
                _check(_libc().prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
                # the mounts of _ENTER (setup_mounts pivoted the whole mount namespace, this
                # process included, into the overlay), then cd to the shared directory
                subprocess.run(["/bin/sh", "-c", enter_script, "contained", share], check=True)
                os.chdir(share)
                status = _run_python(pyargv, env)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(status)
        _, wait_status = os.waitpid(init, 0)
        code = os.waitstatus_to_exitcode(wait_status)
        code = code if code >= 0 else 128 - code
        # For the test's CPU figure (tests/conftest.py): this process and the server, with
        # everything the server waited for, as a Popen's would be counted when reaped.
        used = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
        Path(log + CPU_SUFFIX).write_text(str(sum(u.ru_utime + u.ru_stime for u in used)))
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class Forked:
    """The forked server's handle, as much of `subprocess.Popen` as the tests use."""

    def __init__(self, process, log: Path) -> None:
        self._process = process
        self._cpu = Path(str(log) + CPU_SUFFIX)
        self._counted = False
        self.pid = process.pid

    def _ended(self) -> int | None:
        global ended_cpu_s
        code = self._process.exitcode
        if code is not None and not self._counted:
            self._counted = True
            try:
                ended_cpu_s += float(self._cpu.read_text())
            except (OSError, ValueError):
                pass  # killed before it could say
        return code

    @property
    def returncode(self) -> int | None:
        return self._ended()

    def poll(self) -> int | None:
        return self._ended()

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        code = self._ended()
        if code is None:
            raise subprocess.TimeoutExpired(["forked server"], timeout)
        return code

    def kill(self) -> None:
        if self._process.exitcode is None:
            self._process.kill()


def forkable(argv: list[str]) -> bool:
    """Whether `argv` is a command of this interpreter that `start` can fork."""
    return (
        len(argv) >= 2
        and argv[0] == sys.executable
        and (argv[1] in ("-c", "-m") and len(argv) >= 3 or not argv[1].startswith("-"))
    )


def start(
    scratch: Path,
    share: Path,
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    log: Path,
    setup_mounts: str,
    enter_script: str,
) -> Forked:
    """Fork `argv` (see `forkable`) contained; its output is appended to `log`."""
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    scratch.mkdir(parents=True, exist_ok=True)
    log.touch()
    process = _context.Process(
        target=_serve,
        daemon=True,
        name="contained-server",
        args=(str(scratch), str(share), str(cwd), dict(env), argv[1:], str(log), setup_mounts, enter_script),
    )
    process.start()
    return Forked(process, log)
