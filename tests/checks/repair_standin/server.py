"""Stand-in for a MiMo repair image's server (test code; shipped as /opt/arena/server.py).

Written from docs/spec/mimo.md's description of the MiMo adapter, not from its code: OpenEnv's
`create_app(..., env_name="mimo_software", max_concurrent_envs=1)` on port 8000 (the
image's Cmd runs uvicorn on `server:app` from /opt/arena); reset with the image's own
task id only; reset deletes /workspace/repo and unpacks /opt/arena/workspace.tar there
for UID 2000; shell actions run `/bin/bash -c` in /workspace/repo as UID/GID 2000 (no
extra groups, HOME /home/arena-agent) for at most 60 s, output the last 12,000 bytes;
grading, on `finish` or on the 64th step (graded, not run), resets the files the
record's test patch touches, applies it and runs its test command, all as UID 2000,
reward 1.0 iff that exits 0; the terminal observation is returned unchanged for every
later step until reset. The models are the release's (models.py beside this file, a
copy of env/server/models.py).

REPAIR_FAULT (set in the config of a broken stand-in) breaks exactly one rule.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from typing import Any

import models
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata, State

ARENA = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(ARENA, "instance.json"), encoding="utf-8") as _f:
    INSTANCE: dict[str, Any] = json.load(_f)
TASK_ID = INSTANCE["instance_id"]
WORKSPACE = INSTANCE["cwd"]
FAULT = os.environ.get("REPAIR_FAULT", "")
AGENT_UID = AGENT_GID = 2000
AGENT_HOME = "/home/arena-agent"
SHELL_TIMEOUT_S = 60
TAIL_BYTES = 12_000
MAX_STEPS = 64
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DONE_TEXT = "Original MiMo verifier completed."
# A broken stand-in's grading leftover from its image build (fault "stale-verdict").
STALE_VERDICT = os.path.join(ARENA, "last-verdict.json")

if FAULT == "slow-start":
    time.sleep(130)  # healthy only after the 120 s the seed allowed
if FAULT in ("shell-root", "grader-root"):
    # What a careless image does to let root's git work in the agent's repository.
    with open("/etc/gitconfig", "w", encoding="utf-8") as _f:
        _f.write("[safe]\n\tdirectory = *\n")
if FAULT == "stale-verdict":
    with open(STALE_VERDICT, "w", encoding="utf-8") as _f:
        json.dump({"exit_code": 0}, _f)

ShellAction, ShellObservation = models.ShellAction, models.ShellObservation
if FAULT == "different-schema":

    class ShellObservation(models.ShellObservation):
        """What a shell command printed."""


def _run(
    argv: list[str], *, as_root: bool, timeout: float, stdin: bytes | None = None, cwd: str = WORKSPACE
) -> tuple[int, bytes]:
    """Run `argv` as UID/GID 2000 (or root), its own process group; 124 on timeout."""
    env = {
        "PATH": PATH,
        "LANG": "C.UTF-8",
        "HOME": "/root" if as_root else AGENT_HOME,
        "USER": "root" if as_root else "arena-agent",
    }
    who: dict[str, Any] = {} if as_root else {"user": AGENT_UID, "group": AGENT_GID, "extra_groups": []}
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        start_new_session=True,
        **who,
    )
    try:
        out, _ = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return 124, out
    return proc.returncode, out


def _tail(out: bytes) -> str:
    if len(out) <= TAIL_BYTES:
        return out.decode(errors="replace")
    return f"[output cut: the last {TAIL_BYTES} of {len(out)} bytes]\n" + out[-TAIL_BYTES:].decode(errors="replace")


def _kill_agent_processes() -> None:
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid == AGENT_UID:
                os.kill(int(name), signal.SIGKILL)
        except OSError:
            continue


def _chown_agent(root: str) -> None:
    for path, dirs, files in os.walk(root):
        for name in [path, *(os.path.join(path, n) for n in dirs + files)]:
            os.lchown(name, AGENT_UID, AGENT_GID)


def _unpack(tar: str) -> None:
    os.makedirs(WORKSPACE, exist_ok=True)
    subprocess.run(["tar", "-xf", os.path.join(ARENA, tar), "-C", WORKSPACE, "--no-same-owner"], check=True)


def _touched(patch: str) -> list[str]:
    """The paths a `git diff` patch touches."""
    return [
        line.split(" b/", 1)[1] for line in patch.splitlines() if line.startswith("diff --git a/") and " b/" in line
    ]


class MimoStandIn(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = FAULT == "two-sessions"

    def __init__(self) -> None:
        super().__init__()
        self._terminal: Any = None
        self._steps = 0
        self._gradings = 0
        self._started = False

    def reset(self, seed=None, episode_id=None, task_id=None, **kwargs) -> Any:
        if task_id != TASK_ID and FAULT != "any-task":
            raise ValueError(f"unknown task_id {task_id!r}: this image serves {TASK_ID}")
        _kill_agent_processes()
        if FAULT == "reset-by-git-clean" and os.path.isdir(os.path.join(WORKSPACE, ".git")):
            # Removes what the agent added, keeps what it changed in tracked files.
            _run(["git", "clean", "-fdxq"], as_root=False, timeout=SHELL_TIMEOUT_S)
        else:
            if FAULT != "keeps-edits":
                shutil.rmtree(WORKSPACE, ignore_errors=True)
            _unpack("workspace-with-fix-branch.tar" if FAULT == "future-history" else "workspace.tar")
        _chown_agent(WORKSPACE)
        self._terminal, self._steps, self._started = None, 0, True
        shown = "repo" if FAULT == "reset-wrong-id" else TASK_ID
        return ShellObservation(
            task_id=shown,
            done=False,
            reward=0.0,
            output=f"{INSTANCE['problem_statement']}\n\nThe repository is {WORKSPACE}. "
            'Run shell commands with operation "shell"; when done, send '
            'operation "finish" to have it graded.',
        )

    def step(self, action: Any, timeout_s=None, **kwargs) -> Any:
        if not self._started:
            raise ValueError("reset first")
        if self._terminal is not None and not (FAULT == "regrades" and action.operation == "finish"):
            return self._terminal.model_copy()
        self._steps += 1
        if action.operation == "finish" or self._steps >= MAX_STEPS:
            self._terminal = self._grade()
            return self._terminal.model_copy()
        code, out = _run(["/bin/bash", "-c", action.command], as_root=FAULT == "shell-root", timeout=SHELL_TIMEOUT_S)
        return ShellObservation(
            task_id=TASK_ID,
            output=_tail(out),
            done=False,
            reward=0.0,
            exit_code=None if FAULT == "exit-code-null" else code,
        )

    def _grade(self) -> Any:
        self._gradings += 1
        code = self._verify()
        text = DONE_TEXT if FAULT != "regrades" else f"{DONE_TEXT[:-1]} (grading {self._gradings})."
        return ShellObservation(
            task_id=TASK_ID, output=text, exit_code=code, done=True, reward=1.0 if code == 0 else 0.0
        )

    def _verify(self) -> int:
        """The grader: the touched files reset, the test patch applied, the tests run;
        the hidden tests are gone again afterwards. Their exit code."""
        if FAULT == "stale-verdict" and os.path.exists(STALE_VERDICT):
            with open(STALE_VERDICT, encoding="utf-8") as f:
                verdict = json.load(f)
            os.remove(STALE_VERDICT)
            return int(verdict["exit_code"])
        as_root = FAULT == "grader-root"
        patch = INSTANCE["test_patch"]
        touched = _touched(patch)
        self._restore(touched, as_root)
        try:
            if FAULT != "no-test-patch":
                applied, out = _run(
                    ["git", "apply", "--whitespace=nowarn", "-"],
                    as_root=as_root,
                    timeout=SHELL_TIMEOUT_S,
                    stdin=patch.encode(),
                )
                if applied != 0:
                    return applied
            code, _ = _run(
                ["bash", "-c", INSTANCE["test_command"]],
                as_root=as_root,
                timeout=float(INSTANCE["verifier_timeout_sec"]),
            )
            return code
        finally:
            self._restore(touched, as_root)

    @staticmethod
    def _restore(touched: list[str], as_root: bool) -> None:
        tracked = [
            p for p in touched if _run(["git", "cat-file", "-e", f"HEAD:{p}"], as_root=as_root, timeout=30)[0] == 0
        ]
        added = [p for p in touched if p not in tracked]
        if tracked:
            _run(["git", "checkout", "-q", "HEAD", "--", *tracked], as_root=as_root, timeout=60)
        if added:
            _run(["git", "rm", "-r", "-q", "--cached", "--ignore-unmatch", "--", *added], as_root=as_root, timeout=60)
            _run(["rm", "-rf", "--", *added], as_root=as_root, timeout=60)

    @property
    def state(self) -> State:
        return State(episode_id=None, step_count=self._steps)

    def close(self) -> None:
        # openenv-core also closes throwaway instances (for /metadata): only a session
        # that reset owns the agent's processes.
        if self._started:
            _kill_agent_processes()

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name="" if FAULT == "metadata-unnamed" else "mimo_software",
            description=f"MiMo repair task {TASK_ID} (test stand-in)",
            version="0",
        )


app = create_app(
    MimoStandIn,
    ShellAction,
    ShellObservation,
    env_name="mimo_software",
    max_concurrent_envs=2 if FAULT == "two-sessions" else 1,
)
if FAULT == "no-openapi":
    app.router.routes[:] = [r for r in app.router.routes if getattr(r, "path", None) != "/openapi.json"]
