"""Test-only launcher: the real environment server with one deliberate fault.

`python launch.py FAULT PORT` patches or subclasses the real server (imported from
PYTHONPATH, like the image does) and serves it on 127.0.0.1:PORT. Faults live here,
never in the production server; each one must make specific suite checks fail.
"""

from __future__ import annotations

import sys
import threading
from functools import partial
from pathlib import Path

import uvicorn
from openenv.core.env_server.http_server import create_app
from pydantic import Field

from env.loader import load_task_module
from env.server import answer as answer_mod
from env.server import app as app_mod
from env.server import environment as env_mod
from env.server import shell as shell_mod
from env.server import workspace as ws_mod
from env.server.models import ShellAction, ShellObservation


class AcceptsWrong(env_mod.ShellEnvironment):
    """A grader that gives full marks to any answer with the expected keys."""

    def _grade(self, task, answer):
        if set(answer) == set(task["expected"]):
            return 1.0
        return super()._grade(task, answer)


class RunsAfterDone(env_mod.ShellEnvironment):
    """Executes actions after done, though it replays the cached terminal reply."""

    def step(self, action, timeout_s=None, **kwargs):
        episode = self._episode
        if episode is not None and episode.terminal is not None and action.operation == "shell":
            shell_mod.run_command(action.command, cwd=ws_mod.repo_dir(self._config.workspace_root),
                                  home=ws_mod.home_dir(self._config.workspace_root))
        return super().step(action, timeout_s=timeout_s, **kwargs)


class RunsAfterDoneQuietly(env_mod.ShellEnvironment):
    """Replays the cached terminal reply at once and runs the action in the background:
    neither the reply's text nor its timing shows it, only the file it makes."""

    def step(self, action, timeout_s=None, **kwargs):
        episode = self._episode
        if episode is not None and episode.terminal is not None and action.operation == "shell":
            root = self._config.workspace_root
            threading.Thread(target=shell_mod.run_command, args=(action.command,), daemon=True,
                             kwargs={"cwd": ws_mod.repo_dir(root), "home": ws_mod.home_dir(root)}).start()
        return super().step(action, timeout_s=timeout_s, **kwargs)


class GradesWithoutReason(env_mod.ShellEnvironment):
    """Scores a refused answer 0.0 but never says why."""

    def _finish(self, episode, prefix, exit_code):
        observation = super()._finish(episode, prefix, exit_code)
        if observation.reward == 0.0:
            observation = observation.model_copy(update={"output": "Episode finished, reward 0.0.\n",
                                                         "metadata": {}})
            episode.terminal = observation
        return observation


class LosesOutputWithBackground(env_mod.ShellEnvironment):
    """Returns no output when a command leaves a background process (as a server reading
    until end of file with a timeout would): what the command made cannot be shown, so
    the isolation check must not pass on what it then fails to find."""

    def step(self, action, timeout_s=None, **kwargs):
        observation = super().step(action, timeout_s=timeout_s, **kwargs)
        if not observation.done and ws_mod.sandbox_pids(self._config.uid):
            observation = observation.model_copy(update={"output": ""})
        return observation


class TwoSessions(env_mod.ShellEnvironment):
    """Claims to support concurrent sessions, so a second session is not refused."""

    SUPPORTS_CONCURRENT_SESSIONS = True


# The action schema with another description of `command` (a comment, not a docstring:
# pydantic would publish a docstring as one more difference).
class DriftedAction(ShellAction):
    command: str = Field(default="", max_length=16_000, description="A bash command.")


def _follow_symlinks() -> None:
    original = answer_mod.read_answer
    env_mod.read_answer = lambda path: original(Path(path).resolve())


def _no_output_cap() -> None:
    shell_mod.OUTPUT_TAIL_BYTES = 10 ** 8


def _no_uid_drop() -> None:
    original = shell_mod.sandbox_argv
    shell_mod.sandbox_argv = lambda command, uid, gid: original(command, 0, 0)


def _reset_leaves_files() -> None:
    def keep_and_overwrite(root, files, instructions, uid, gid):
        repo = ws_mod.repo_dir(root)
        if repo.is_dir():
            for name in [*files, ws_mod.INSTRUCTIONS_NAME]:
                (repo / name).unlink(missing_ok=True)
            for name, text in {**files, ws_mod.INSTRUCTIONS_NAME: instructions}.items():
                ws_mod._write_owned(repo / name, text, uid, gid)
            return repo
        return ws_mod.rebuild_workspace(root, files, instructions, uid, gid)

    env_mod.rebuild_workspace = keep_and_overwrite
    env_mod.clear_sandbox = lambda config: None


PATCHES = {
    "follows-symlinks": _follow_symlinks,
    "no-output-cap": _no_output_cap,
    "no-uid-drop": _no_uid_drop,
    "reset-leaves-files": _reset_leaves_files,
}
CLASSES = {"accepts-wrong": AcceptsWrong, "runs-after-done": RunsAfterDone,
           "runs-after-done-quietly": RunsAfterDoneQuietly, "grades-without-reason": GradesWithoutReason,
           "loses-output-with-background": LosesOutputWithBackground, "two-sessions": TwoSessions}
# How the routes are served: the real server's (the OpenEnv standard, `/mcp` offering no tools),
# without `/mcp` (the validator's mcp_endpoint criterion fails), or openenv-core's own: its
# stateless /reset, /step, /state and its /mcp (session create/close, tools), which the real
# server drops because they reach the one workspace around the live session.
ROUTES = {"no-mcp": "no-mcp", "openenv-core-routes": "openenv-core"}
ACTIONS = {"schema-drift": DriftedAction}
FAULTS = sorted({*PATCHES, *CLASSES, *ROUTES, *ACTIONS})


def build(fault: str):
    if fault not in FAULTS:
        raise SystemExit(f"unknown fault {fault!r}; one of {', '.join(FAULTS)}")
    PATCHES.get(fault, lambda: None)()
    environment = CLASSES.get(fault, env_mod.ShellEnvironment)
    curriculum = env_mod.Curriculum(load_task_module(None))
    shell_mod.ensure_sandbox_identity(shell_mod.SANDBOX_UID, shell_mod.SANDBOX_GID)
    app = create_app(partial(environment, curriculum, env_mod.ServerConfig()), ACTIONS.get(fault, ShellAction),
                     ShellObservation, env_name="openenv-arena",
                     max_concurrent_envs=2 if fault == "two-sessions" else 1)
    routes = ROUTES.get(fault, "standard")
    if routes == "standard":
        app_mod.serve_standard_routes(app)
    elif routes == "no-mcp":
        app_mod.keep_served_routes(app)
    return app


if __name__ == "__main__":
    uvicorn.run(build(sys.argv[1]), host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
