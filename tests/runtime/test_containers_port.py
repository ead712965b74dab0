"""A container whose engine-picked host port another process took before it started is run
again (pipeline/runtime/runtime.py, `_run_published`). The race itself cannot be forced with a
real engine, so the engine's answer is replayed: the first `run` fails as podman does then."""

from __future__ import annotations

import subprocess

import pytest

from pipeline.errors import ToolError
from pipeline.runtime import runtime

TAKEN = b"Error: cannot listen on the TCP port: listen tcp4 127.0.0.1:38713: bind: address already in use\n"


def _engine(answers: list[tuple[int, bytes]], calls: list[list[str]]):
    def cli(*argv: str, check: bool = True, timeout: float | None = 600):
        calls.append(list(argv))
        code, err = answers.pop(0) if argv[0] == "run" else (0, b"")
        if argv[0] == "run" and "--cidfile" in argv:
            path = argv[argv.index("--cidfile") + 1]
            with open(path, "w") as out:
                out.write(f"cid{len(calls)}")
        proc = subprocess.CompletedProcess(["podman", *argv], code, b"cid\n" if code == 0 else b"", err)
        return runtime._proc.checked(proc) if check else proc

    rt = runtime.ContainerRuntime.__new__(runtime.ContainerRuntime)
    rt._cli = cli  # type: ignore[method-assign]
    rt.remove = lambda cid: calls.append(["rm", cid])  # type: ignore[method-assign]
    return rt


def test_replayed_a_taken_port_is_run_again_and_what_was_created_removed():
    calls: list[list[str]] = []
    rt = _engine([(126, TAKEN), (0, b"")], calls)
    out = rt._run_published(["run", "--detach"], "img", (), retry=True)
    assert out.returncode == 0
    assert [c[0] for c in calls] == ["run", "rm", "run"] and calls[1] == ["rm", "cid1"]


def test_replayed_a_taken_port_three_times_or_another_failure_is_an_error_at_once():
    for answers, runs in (([(126, TAKEN)] * 3, 3), ([(125, b"Error: no such image\n")], 1)):
        calls: list[list[str]] = []
        with pytest.raises(ToolError, match="failed; expected exit 0"):
            _engine(list(answers), calls)._run_published(["run"], "img", (), retry=True)
        assert sum(c[0] == "run" for c in calls) == runs
    calls = []
    with pytest.raises(ToolError):  # a port the caller chose: never taken over by another pick
        _engine([(126, TAKEN)], calls)._run_published(["run"], "img", (), retry=False)
    assert sum(c[0] == "run" for c in calls) == 1
