"""The episode rules of docs/spec/environment.md as an openenv-core ``Environment``.

reset(task_id=...) rebuilds the workspace for one curriculum case; step runs a shell
command or grades; the 16th action grades automatically; the terminal result is cached
until the next reset. Expected answers stay in this process: they come from the task
module's ``make_task`` for the case, never from the files the agent can edit.
"""

from __future__ import annotations

import copy
import math
import os
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata, State
from pydantic import Field

from env.catalog import CASE_IDS, make_case, parse_case_id
from env.server.answer import ANSWER_NAME, MAX_ANSWER_BYTES, read_answer
from env.server.models import MAX_OUTPUT_CHARS, ShellAction, ShellObservation
from env.server.sandbox import Sandbox, SandboxFactory, SandboxSpec, fit_to_memory, memory_limit, workspace_size
from env.server.shell import (
    DEFAULT_TIMEOUT_S,
    OOM_SCORE_ADJ,
    OUTPUT_TAIL_BYTES,
    RESOURCE_LIMITS,
    SANDBOX_GID,
    SANDBOX_UID,
    run_command,
)
from env.server.workspace import (
    DEFAULT_ROOT,
    INSTRUCTIONS_NAME,
    home_dir,
    repo_dir,
    write_case_files,
)

MAX_ACTIONS = 16
RESET_FIELDS = ("seed", "episode_id", "task_id")
# An episode ID is the client's label, echoed in the state: a UUID fits many times over.
MAX_EPISODE_ID_CHARS = 256


@dataclass(frozen=True)
class ServerConfig:
    """Knobs of the server; the defaults are the contract, tests may shorten the timeout."""

    shell_timeout_s: float = DEFAULT_TIMEOUT_S
    max_actions: int = MAX_ACTIONS
    uid: int = SANDBOX_UID
    gid: int = SANDBOX_GID
    workspace_root: Path = DEFAULT_ROOT


class Curriculum:
    """The catalog's cases (the curriculum the image serves) generated with one task module,
    each generated once and kept."""

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


def sandbox_spec(config: ServerConfig) -> SandboxSpec:
    """The sandbox every episode of a server with ``config`` gets."""
    spec = SandboxSpec(
        uid=config.uid,
        gid=config.gid,
        workspace=config.workspace_root,
        workspace_bytes=workspace_size(config.workspace_root),
        limits=RESOURCE_LIMITS,
        oom_score_adj=OOM_SCORE_ADJ,
    )
    return fit_to_memory(spec, memory_limit())


class ArenaMetadata(EnvironmentMetadata):
    """OpenEnv's metadata and how this server contains an episode (docs/isolation.md)."""

    isolation: str = Field(
        description="how each episode is contained: namespaces (its own user, PID, "
        "network, mount and IPC namespaces) or unprivileged (the container's, with "
        "the agent's system calls filtered and its processes killed by UID at reset)"
    )
    proc: str = Field(
        default="container",
        description="the /proc an episode sees: episode (one of its "
        "own PID namespace, showing only its processes) or container (the container's: "
        "its PID counter crosses a reset, docs/isolation.md)",
    )


class ShellEnvironment(Environment[ShellAction, ShellObservation, State]):
    """One agent at a time drives a shell in /workspace/repo and is graded on answer.json."""

    SUPPORTS_CONCURRENT_SESSIONS = False

    def __init__(
        self, curriculum: Curriculum, sandboxes: SandboxFactory | None, config: ServerConfig = ServerConfig()
    ) -> None:
        super().__init__()
        self._curriculum = curriculum
        self._sandboxes = sandboxes
        self._config = config
        self._episode: _Episode | None = None
        self._sandbox: Sandbox | None = None
        self._repo: int | None = None

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
        if episode_id is not None and (not isinstance(episode_id, str) or len(episode_id) > MAX_EPISODE_ID_CHARS):
            raise ValueError(
                f"episode_id must be a string of at most {MAX_EPISODE_ID_CHARS} characters, got "
                f"{type(episode_id).__name__} of length {len(str(episode_id))}; send a shorter one"
            )
        case_id = self._curriculum.case_ids[0] if task_id is None else task_id
        task = self._curriculum.task(case_id)
        if os.geteuid() != 0:
            raise PermissionError(
                "the environment server must run as root to give the shell UID "
                f"{self._config.uid}; start it as root (e.g. in the image)"
            )
        if self._sandboxes is None:
            raise PermissionError("this server was built without sandboxes (not as root)")
        self._episode = None
        self._end_sandbox()
        instructions = instructions_for(task, self._config)
        sandbox = self._sandboxes.take()
        try:
            write_case_files(
                sandbox.path(repo_dir(self._config.workspace_root)),
                task["files"],
                instructions,
                self._config.uid,
                self._config.gid,
            )
        except BaseException:
            sandbox.destroy()
            raise
        self._sandbox = sandbox
        # The working directory, held open: the answer written there stays readable at
        # `finish` even if the agent's memory use got the sandbox's PID 1 killed (its mount
        # namespace, the workspace's tmpfs, lives on while this descriptor does).
        self._repo = os.open(
            sandbox.path(repo_dir(self._config.workspace_root)), os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
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

    def step(self, action: ShellAction, timeout_s: float | None = None, **kwargs: Any) -> ShellObservation:
        """Run one action; after ``done`` return the cached terminal result and run nothing."""
        episode = self._episode
        if episode is None:
            raise RuntimeError("no episode in progress: send reset first")
        if episode.terminal is not None:
            return episode.terminal.model_copy()
        if action.operation == "shell" and not _is_text(action.command):
            # Nothing is run and no action is counted: the session and its episode go on.
            return ShellObservation(
                task_id=episode.case_id,
                exit_code=2,
                done=False,
                reward=None,
                output="[the command is not valid Unicode text (it holds a lone surrogate such as "
                "\\ud800); nothing was run: send the command as UTF-8 text]\n",
            )
        episode.actions += 1
        last = episode.actions >= self._config.max_actions
        if action.operation == "finish":
            return self._finish(episode, prefix="", exit_code=None)
        assert self._sandbox is not None  # made by the reset that made the episode
        result = run_command(
            self._sandbox,
            action.command,
            cwd=repo_dir(self._config.workspace_root),
            home=home_dir(self._config.workspace_root),
            timeout_s=self._config.shell_timeout_s,
        )
        if last:
            return self._finish(
                episode,
                prefix=result.output + f"\n[action {episode.actions} of {self._config.max_actions}: "
                "the episode is graded now]\n",
                exit_code=result.exit_code,
            )
        return ShellObservation(
            task_id=episode.case_id,
            output=result.output,
            exit_code=result.exit_code,
            done=False,
            reward=None,
        )

    def _finish(self, episode: _Episode, prefix: str, exit_code: int | None) -> ShellObservation:
        assert self._sandbox is not None
        assert self._repo is not None
        read = read_answer(Path(f"/proc/self/fd/{self._repo}") / ANSWER_NAME)
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
        if (
            isinstance(score, bool)
            or not isinstance(score, (int, float))
            or not (math.isfinite(score) and 0.0 <= score <= 1.0)
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
        """End the session: nothing of its episode outlives it.

        openenv-core also builds throwaway instances (for /metadata) and closes them;
        those never reset, so they have no sandbox to end.
        """
        self._episode = None
        self._end_sandbox()

    def _end_sandbox(self) -> None:
        repo, self._repo = self._repo, None
        if repo is not None:
            os.close(repo)
        sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None:
            assert self._sandboxes is not None  # only a reset through them makes a sandbox
            self._sandboxes.retire(sandbox)

    def get_metadata(self) -> ArenaMetadata:
        """Name, description and isolation mode served at /metadata."""
        return ArenaMetadata(
            isolation=self._sandboxes.spec.mode if self._sandboxes is not None else "none",
            proc=self._sandboxes.proc if self._sandboxes is not None else "container",
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


def _is_text(command: str) -> bool:
    try:
        command.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
