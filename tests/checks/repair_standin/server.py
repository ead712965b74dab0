"""Stand-in for a MiMo repair image's OpenEnv server (tests only; shipped into the image).

Follows the most plausible conventions of the real images (unseen offline): reset
with `task_id` puts the buggy repository in /workspace/repo, shell actions run as
UID 2000 there, `finish` has the root-only grader run the hidden tests and rewards
1.0 when they pass, the terminal result is kept until the next reset, one session.
REPAIR_TASK_ID names the task; REPAIR_FAULT (teeth tests) breaks one rule.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from typing import Literal

import uvicorn
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field

HERE = os.path.dirname(os.path.abspath(__file__))
TASK_ID = os.environ["REPAIR_TASK_ID"]
FAULT = os.environ.get("REPAIR_FAULT", "")
WORKSPACE = "/workspace/repo"
UID = GID = 2000
SANDBOX = ["setpriv", f"--reuid={UID}", f"--regid={GID}", "--clear-groups", "--no-new-privs", "--"]
# No bytecode: the grader must leave the workspace as the agent left it.
SANDBOX_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8",
               "PYTHONDONTWRITEBYTECODE": "1"}
TIMEOUT_S = 120
TAIL = 12_000


class ShellAction(Action):
    operation: Literal["shell", "finish"]
    command: str = Field(default="", max_length=16_000)


class ShellObservation(Observation):
    task_id: str
    output: str = Field(default="", max_length=16_000)
    exit_code: int | None = None


if FAULT == "different-schema":
    class ShellObservation(ShellObservation):  # noqa: F811 - the fault: a field the contract lacks
        stderr: str = ""


def _kill_sandbox() -> None:
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/status") as f:
                uid = next(l.split()[1] for l in f if l.startswith("Uid:"))
            if uid == str(UID):
                os.kill(int(name), signal.SIGKILL)
        except (OSError, StopIteration, ValueError):
            continue


def _sandboxed(argv: list[str], stdin: bytes | None = None) -> tuple[int, str]:
    try:
        proc = subprocess.run([*SANDBOX, *argv], cwd=WORKSPACE, env=SANDBOX_ENV, input=stdin,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return 124, f"[timed out after {TIMEOUT_S} s]"
    return proc.returncode, proc.stdout[-TAIL:].decode(errors="replace")


class RepairEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = False

    def __init__(self) -> None:
        super().__init__()
        self._terminal: ShellObservation | None = None
        self._started = False

    def reset(self, seed=None, episode_id=None, task_id=None, **unknown) -> ShellObservation:
        if task_id != TASK_ID:
            raise ValueError(f"unknown task {task_id!r}: this image serves {TASK_ID}")
        _kill_sandbox()
        if not (FAULT == "keeps-edits" and os.path.isdir(WORKSPACE)):
            shutil.rmtree(WORKSPACE, ignore_errors=True)
            os.makedirs(os.path.dirname(WORKSPACE), exist_ok=True)
            shutil.copytree(os.path.join(HERE, "project"), WORKSPACE)
            for root, dirs, files in os.walk(WORKSPACE):
                for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
                    os.chown(name, UID, GID)
                    os.chmod(name, 0o755 if os.path.isdir(name) else 0o644)
        self._terminal = None
        self._started = True
        return ShellObservation(task_id=TASK_ID, output="Repair calc.py in /workspace/repo, then finish.",
                                done=False, reward=None)

    def step(self, action: ShellAction, timeout_s=None, **kwargs) -> ShellObservation:
        if self._terminal is not None:
            return self._terminal.model_copy()
        if action.operation == "finish":
            reward = 1.0 if FAULT == "rewards-unsolved" else self._grade()
            self._terminal = ShellObservation(task_id=TASK_ID, output=f"hidden tests: reward {reward}",
                                              done=True, reward=reward)
            return self._terminal.model_copy()
        code, output = _sandboxed(["bash", "-c", action.command])
        return ShellObservation(task_id=TASK_ID, output=output, exit_code=code, done=False, reward=None)

    def _grade(self) -> float:
        # The grader reads the hidden tests as root and feeds them to a sandboxed python:
        # the candidate code never runs as root, the tests are never a readable file.
        with open(os.path.join(HERE, "grader", "hidden_tests.py"), "rb") as f:
            code, _ = _sandboxed(["python3", "-"], stdin=f.read())
        return 1.0 if code == 0 else 0.0

    @property
    def state(self) -> State:
        return State(episode_id=None, step_count=0)

    def close(self) -> None:
        # openenv-core also closes throwaway instances (for /metadata): only a session
        # that reset owns the sandbox processes.
        if self._started:
            _kill_sandbox()

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name="mimo-repair-standin", description=f"stand-in repair task {TASK_ID}",
                                   version="0")


if __name__ == "__main__":
    app = create_app(RepairEnvironment, ShellAction, ShellObservation, env_name="mimo-repair-standin",
                     max_concurrent_envs=1)
    uvicorn.run(app, host="0.0.0.0", port=8000, log_level="warning")
