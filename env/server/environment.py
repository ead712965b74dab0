"""The episode rules of environment.md as an openenv-core ``Environment``.

reset(task_id=...) rebuilds the workspace for one curriculum case; step runs a shell
command or grades; the 16th action grades automatically; the terminal result is cached
until the next reset. Expected answers stay in this process: they come from the task
module's ``make_task`` for the case, never from the files the agent can edit.
"""

from __future__ import annotations

import copy
import functools
import math
import os
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata, State

from env.catalog import CASE_IDS, make_case, parse_case_id
from env.server.answer import ANSWER_NAME, MAX_ANSWER_BYTES, read_answer
from env.server.ipc import IpcError, remove_sandbox_ipc
from env.server.models import MAX_OUTPUT_CHARS, ShellAction, ShellObservation
from env.server.shell import (
    DEFAULT_TIMEOUT_S,
    OUTPUT_TAIL_BYTES,
    SANDBOX_GID,
    SANDBOX_UID,
    run_command,
)
from env.server.workspace import (
    DEFAULT_ROOT,
    INSTRUCTIONS_NAME,
    PURGE_BUDGET_S,
    WorkspaceError,
    home_dir,
    kill_sandbox_processes,
    rebuild_workspace,
    remove_sandbox_files,
    repo_dir,
    sandbox_writable_dirs,
)

MAX_ACTIONS = 16
RESET_FIELDS = ("seed", "episode_id", "task_id")


@dataclass(frozen=True)
class ServerConfig:
    """Knobs of the server; the defaults are the contract, tests may shorten the timeout."""

    shell_timeout_s: float = DEFAULT_TIMEOUT_S
    max_actions: int = MAX_ACTIONS
    uid: int = SANDBOX_UID
    gid: int = SANDBOX_GID
    workspace_root: Path = DEFAULT_ROOT


class Curriculum:
    """The 32 catalog cases generated with one task module, each generated once and kept."""

    def __init__(self, tasks: ModuleType) -> None:
        self.tasks = tasks
        self._generated: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    @property
    def case_ids(self) -> tuple[str, ...]:
        return CASE_IDS

    def task(self, case_id: str) -> dict[str, Any]:
        """The task dict of ``case_id`` (ValueError listing the valid IDs if unknown)."""
        case = parse_case_id(case_id)
        with self._lock:
            if case_id not in self._generated:
                self._generated[case_id] = make_case(self.tasks, case)
            return self._generated[case_id]


@dataclass
class _Episode:
    case_id: str
    task: dict[str, Any]
    episode_id: str
    actions: int = 0
    terminal: ShellObservation | None = None


def instructions_for(task: dict[str, Any], config: ServerConfig) -> str:
    """INSTRUCTIONS.md: the case's prompt plus how this environment takes the answer."""
    return (
        f"{task['prompt'].rstrip()}\n\n"
        "## How this environment works\n"
        f"- Your working directory is {repo_dir(config.workspace_root)}; the three input files are there.\n"
        f"- Each action is one shell command (bash, {config.shell_timeout_s:g} s limit, the last "
        f"{OUTPUT_TAIL_BYTES} bytes of output are returned) or `finish`.\n"
        f"- The episode has {config.max_actions} actions; after the last one it is graded automatically.\n"
        f"- The answer is read from `{ANSWER_NAME}` in the working directory: a regular file (not a "
        f"link, FIFO or directory), at most {MAX_ANSWER_BYTES} bytes, UTF-8 JSON holding one object. "
        "Anything else scores 0.0.\n"
        "- Editing the input files does not change the expected answer.\n"
    )


@functools.lru_cache(maxsize=None)
def _writable_dirs(uid: int, gid: int, workspace_root: Path) -> tuple[Path, ...]:
    # Scanned once per server: the directories the sandbox can write to are fixed by
    # the image (or host), and a scan of a large host tree takes seconds.
    return sandbox_writable_dirs(uid, gid, exclude=(workspace_root,))


def clear_sandbox(config: ServerConfig) -> None:
    """Remove every trace of the last episode outside the workspace: its processes, its
    files in every directory it could write to, its System V IPC objects.

    A reset that cannot clean raises WorkspaceError (the client gets the message as
    an error; the server stays up and the next reset tries again).
    """
    deadline = time.monotonic() + PURGE_BUDGET_S
    kill_sandbox_processes(config.uid)
    try:
        remove_sandbox_ipc(config.uid, config.gid)
    except IpcError as exc:
        raise WorkspaceError(f"reset could not remove the last episode's IPC objects: {exc}") from exc
    remove_sandbox_files(config.uid, _writable_dirs(config.uid, config.gid, config.workspace_root),
                         deadline=deadline)


class ShellEnvironment(Environment[ShellAction, ShellObservation, State]):
    """One agent at a time drives a shell in /workspace/repo and is graded on answer.json."""

    SUPPORTS_CONCURRENT_SESSIONS = False

    def __init__(self, curriculum: Curriculum, config: ServerConfig = ServerConfig()) -> None:
        super().__init__()
        self._curriculum = curriculum
        self._config = config
        self._episode: _Episode | None = None

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | None = None,
        **unknown: Any,
    ) -> ShellObservation:
        """Start an episode of case ``task_id`` (default: the first case); the seed never changes inputs."""
        if unknown:
            raise ValueError(
                f"unknown reset field(s) {', '.join(sorted(unknown))}; accepted: {', '.join(RESET_FIELDS)}"
            )
        case_id = self._curriculum.case_ids[0] if task_id is None else task_id
        task = self._curriculum.task(case_id)
        if os.geteuid() != 0:
            raise PermissionError(
                "the environment server must run as root to give the shell UID "
                f"{self._config.uid}; start it as root (e.g. in the image)"
            )
        self._episode = None
        instructions = instructions_for(task, self._config)
        clear_sandbox(self._config)
        rebuild_workspace(
            self._config.workspace_root, task["files"], instructions, self._config.uid, self._config.gid
        )
        self._episode = _Episode(
            case_id=case_id,
            task=task,
            episode_id=episode_id if episode_id is not None else str(uuid.uuid4()),
        )
        return ShellObservation(
            task_id=case_id,
            output=_fit(instructions, f"The instructions are in {INSTRUCTIONS_NAME}."),
            exit_code=None,
            done=False,
            reward=None,
        )

    def step(
        self, action: ShellAction, timeout_s: float | None = None, **kwargs: Any
    ) -> ShellObservation:
        """Run one action; after ``done`` return the cached terminal result and run nothing."""
        episode = self._episode
        if episode is None:
            raise RuntimeError("no episode in progress: send reset first")
        if episode.terminal is not None:
            return episode.terminal.model_copy()
        episode.actions += 1
        last = episode.actions >= self._config.max_actions
        if action.operation == "finish":
            return self._finish(episode, prefix="", exit_code=None)
        result = run_command(
            action.command,
            cwd=repo_dir(self._config.workspace_root),
            home=home_dir(self._config.workspace_root),
            timeout_s=self._config.shell_timeout_s,
            uid=self._config.uid,
            gid=self._config.gid,
        )
        if last:
            return self._finish(
                episode,
                prefix=result.output + f"\n[action {episode.actions} of {self._config.max_actions}: "
                "the episode is graded now]\n",
                exit_code=result.exit_code,
            )
        return ShellObservation(
            task_id=episode.case_id, output=result.output, exit_code=result.exit_code,
            done=False, reward=None,
        )

    def _finish(self, episode: _Episode, prefix: str, exit_code: int | None) -> ShellObservation:
        read = read_answer(repo_dir(self._config.workspace_root) / ANSWER_NAME)
        if read.answer is None:
            reward = 0.0
            verdict = f"reward 0.0: {read.reason}"
        else:
            reward = self._grade(episode.task, read.answer)
            verdict = f"reward {reward:g}: {ANSWER_NAME} graded"
        observation = ShellObservation(
            task_id=episode.case_id,
            output=_fit(prefix + f"Episode finished, {verdict}.\n", f"Episode finished, {verdict}.\n"),
            exit_code=exit_code,
            done=True,
            reward=reward,
            metadata={"reason": read.reason} if read.reason else {},
        )
        episode.terminal = observation
        return observation.model_copy()

    def _grade(self, task: dict[str, Any], answer: dict[str, Any]) -> float:
        # Copies: a grader that mutated its arguments must not alter the cached task.
        score = self._curriculum.tasks.grade(copy.deepcopy(task), copy.deepcopy(answer))
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not (
            math.isfinite(score) and 0.0 <= score <= 1.0
        ):
            raise RuntimeError(f"the task module's grade() returned {score!r}, not a score in [0, 1]")
        return float(score)

    @property
    def state(self) -> State:
        """Episode ID, actions taken, the case and whether it is over (nothing of the answer key)."""
        episode = self._episode
        if episode is None:
            return State(episode_id=None, step_count=0)
        return State(
            episode_id=episode.episode_id,
            step_count=episode.actions,
            task_id=episode.case_id,
            done=episode.terminal is not None,
            max_actions=self._config.max_actions,
        )

    def close(self) -> None:
        """End the session: its sandbox processes do not outlive it.

        openenv-core also builds throwaway instances (for /metadata) and closes them;
        those never reset, so they leave the live session's processes alone.
        """
        if self._episode is not None:
            self._episode = None
            kill_sandbox_processes(self._config.uid)

    def get_metadata(self) -> EnvironmentMetadata:
        """Name and description served at /metadata."""
        return EnvironmentMetadata(
            name="openenv-arena",
            description=(
                "Procedural data-workflow cases: read three JSON files in /workspace/repo with a "
                f"shell, write answer.json; {len(self._curriculum.case_ids)} cases, "
                f"{self._config.max_actions} actions per episode."
            ),
            version="1.0.0",
        )


def _fit(text: str, fallback: str) -> str:
    """``text`` if it fits an observation, else ``fallback`` (never a silently cut message)."""
    return text if len(text) <= MAX_OUTPUT_CHARS else fallback
