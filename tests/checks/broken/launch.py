"""Test-only launcher: the real environment server with one deliberate fault.

`python launch.py FAULT PORT` patches or subclasses the real server (imported from
PYTHONPATH, like the image does) and serves it on 127.0.0.1:PORT. Faults live here,
never in the production server; each one must make specific suite checks fail.
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import sys
import threading
from functools import partial
from pathlib import Path

import uvicorn
from openenv.core.env_server.http_server import create_app
from pydantic import Field
from starlette.websockets import WebSocketDisconnect

from env.loader import load_task_module
from env.server import answer as answer_mod
from env.server import app as app_mod
from env.server import environment as env_mod
from env.server import sandbox as sandbox_mod
from env.server import serve as serve_mod
from env.server import shell as shell_mod
from env.server import workspace as ws_mod
from env.server.messages import MessageGuard
from env.server.models import ShellAction, ShellObservation
from env.server.serve import run


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
            shell_mod.run_command(
                self._sandbox,
                action.command,
                cwd=ws_mod.repo_dir(self._config.workspace_root),
                home=ws_mod.home_dir(self._config.workspace_root),
            )
        return super().step(action, timeout_s=timeout_s, **kwargs)


class RunsAfterDoneQuietly(env_mod.ShellEnvironment):
    """Replays the cached terminal reply at once and runs the action in the background:
    neither the reply's text nor its timing shows it, only the file it makes."""

    def step(self, action, timeout_s=None, **kwargs):
        episode = self._episode
        if episode is not None and episode.terminal is not None and action.operation == "shell":
            root = self._config.workspace_root
            threading.Thread(
                target=shell_mod.run_command,
                args=(self._sandbox, action.command),
                daemon=True,
                kwargs={"cwd": ws_mod.repo_dir(root), "home": ws_mod.home_dir(root)},
            ).start()
        return super().step(action, timeout_s=timeout_s, **kwargs)


class GradesWithoutReason(env_mod.ShellEnvironment):
    """Scores a refused answer 0.0 but never says why."""

    def _finish(self, episode, prefix, exit_code):
        observation = super()._finish(episode, prefix, exit_code)
        if observation.reward == 0.0:
            observation = observation.model_copy(update={"output": "Episode finished, reward 0.0.\n", "metadata": {}})
            episode.terminal = observation
        return observation


class LosesOutputWithBackground(env_mod.ShellEnvironment):
    """Returns no output when a command starts a background process with setsid (as a server reading
    until end of file with a timeout would): what the command made cannot be shown, so
    the isolation check must not pass on what it then fails to find."""

    def step(self, action, timeout_s=None, **kwargs):
        observation = super().step(action, timeout_s=timeout_s, **kwargs)
        if not observation.done and "setsid" in action.command:
            observation = observation.model_copy(update={"output": ""})
        return observation


class ResetLeavesFiles(env_mod.ShellEnvironment):
    """One sandbox for the server's life: a reset only rewrites the case's files in it."""

    kept = None

    def reset(self, seed=None, episode_id=None, task_id=None, **unknown):
        cls = type(self)
        if cls.kept is None:
            cls.kept = self._sandboxes.take()
        self._sandbox = cls.kept
        case_id = self._curriculum.case_ids[0] if task_id is None else task_id
        task = self._curriculum.task(case_id)
        repo = self._sandbox.path(ws_mod.repo_dir(self._config.workspace_root))
        instructions = env_mod.instructions_for(task, self._config)
        for name in [*task["files"], ws_mod.INSTRUCTIONS_NAME]:
            (repo / name).unlink(missing_ok=True)
        ws_mod.write_case_files(repo, task["files"], instructions, self._config.uid, self._config.gid)
        self._episode = env_mod._Episode(case_id=case_id, task=task, episode_id=episode_id or "kept")
        return ShellObservation(task_id=case_id, output=instructions[:16_000], exit_code=None, done=False)

    def close(self):
        self._episode = None
        self._sandbox = None


class TwoSessions(env_mod.ShellEnvironment):
    """Claims to support concurrent sessions, so a second session is not refused."""

    SUPPORTS_CONCURRENT_SESSIONS = True


# The action schema with another description of `command` (a comment, not a docstring:
# pydantic would publish a docstring as one more difference).
class DriftedAction(ShellAction):
    command: str = Field(default="", max_length=16_000, description="A bash command.")


def _follow_symlinks() -> None:
    original = answer_mod.read_answer

    def follow(path):
        # The path is /proc/PID/root/...: an absolute link target is taken inside that root.
        path = Path(path)
        if path.is_symlink():
            target = os.readlink(path)
            root = Path(*path.parts[:4])
            path = root / target.lstrip("/") if target.startswith("/") else path.parent / target
        return original(path)

    env_mod.read_answer = follow


def _no_output_cap() -> None:
    shell_mod.OUTPUT_TAIL_BYTES = 10**8


def _escaped_packets() -> None:
    """Control messages as JSON's ASCII escapes (12 bytes per 4-byte character), unchecked:
    the longest command no longer fits a packet."""

    def send(self, message: dict, fds: list[int] | None = None) -> None:
        try:
            sandbox_mod.socket.send_fds(self.control, [json.dumps(message).encode()], fds or [])
        except OSError as exc:
            raise sandbox_mod.SandboxError(f"the episode's sandbox is gone: {exc}") from exc

    sandbox_mod.Sandbox.send = send


def _no_header_deadline() -> None:
    """Only uvicorn's keep-alive timer waits for a request, and every byte received cancels it."""

    def await_request(self) -> None:
        self.waiting_since = self.loop.time()

    serve_mod.GuardedH11Protocol._await_request = await_request


def _no_body_deadline() -> None:
    serve_mod.GuardedH11Protocol._await_body = lambda self: None


def _no_peer_limit() -> None:
    """Only the total cap: one peer may hold every connection."""
    serve_mod.GuardedH11Protocol._make_room = lambda self, transport: True


def _slow_clients_unguarded() -> None:
    """The connection guard as before issue 47's slow clients: a keep-alive timer from the
    accept, which trickled bytes cancel, and the total cap."""
    _no_header_deadline()
    _no_body_deadline()
    _no_peer_limit()


async def _passes_disconnects_on(self, scope, receive, send) -> None:
    # As before: only a normal WebSocket close is swallowed; an abandoned request's
    # exception reaches uvicorn, which logs its traceback.
    try:
        await self.app(scope, receive, send)
    except WebSocketDisconnect:
        if scope["type"] != "websocket":
            raise


def _loud_aborts() -> None:
    app_mod._QuietClientClose.__call__ = _passes_disconnects_on


class _RootSpec(sandbox_mod.SandboxSpec):
    def setup(self) -> dict:
        return {**super().setup(), "uid": 0, "gid": 0}


def _root_commands(spec):
    """Commands run as the server's root, on a writable root filesystem, in no user
    namespace of their own: no UID drop, as before sandboxes."""
    fields = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
    return _RootSpec(
        **{
            **fields,
            "read_only": False,
            "drop_bounding_set": False,
            "namespaces": tuple(n for n in spec.namespaces if n != "user"),
        }
    )


# Sandboxes without one of their defences (env/server/sandbox.py).
SPECS = {
    "no-uid-drop": _root_commands,
    "no-pid-namespace": lambda spec: dataclasses.replace(
        spec, namespaces=tuple(n for n in spec.namespaces if n != "pid")
    ),
    "no-network-namespace": lambda spec: dataclasses.replace(
        spec, namespaces=tuple(n for n in spec.namespaces if n != "net")
    ),
    # As before sandboxes: no seccomp filter and the server's user namespace (a key's
    # description would otherwise go only when the kernel collects it, not deterministically).
    "keyrings-allowed": lambda spec: dataclasses.replace(
        spec, deny_keyrings=False, namespaces=tuple(n for n in spec.namespaces if n != "user")
    ),
    "scratch-on-disk": lambda spec: dataclasses.replace(spec, scratch=(), read_only=False),
    # As before issue 47: the agent may make namespaces of its own and keeps a full bounding set.
    "nested-namespaces-allowed": lambda spec: dataclasses.replace(spec, deny_namespaces=False, drop_bounding_set=False),
    # PID 1 as likely an OOM victim as the agent's commands (as before issue 47).
    "oom-order-flat": lambda spec: dataclasses.replace(spec, init_oom_score_adj=spec.oom_score_adj),
    # The container's /proc in the namespaces mode: its PID counter crosses a reset.
    "container-proc": lambda spec: dataclasses.replace(spec, own_proc=False),
    # The unprivileged mode (no namespaces of the episode's own), each defence removed alone.
    "unprivileged": sandbox_mod.unprivileged,
    "unprivileged-sockets-allowed": lambda spec: dataclasses.replace(
        sandbox_mod.unprivileged(spec), deny_sockets=False
    ),
    "unprivileged-no-kill-by-uid": lambda spec: dataclasses.replace(sandbox_mod.unprivileged(spec), kill_by_uid=False),
    "unprivileged-scratch-shared": lambda spec: dataclasses.replace(sandbox_mod.unprivileged(spec), lock_scratch=False),
    "unprivileged-ipc-allowed": lambda spec: dataclasses.replace(
        sandbox_mod.unprivileged(spec), deny_sysv=False, deny_mqueue=False
    ),
}
# Served without the message guard, or by plain uvicorn (no connection guard).
UNGUARDED = {"fragile-messages", "no-connection-guard"}


PATCHES = {
    "follows-symlinks": _follow_symlinks,
    "no-output-cap": _no_output_cap,
    "escaped-packets": _escaped_packets,
    # The server's guards against slow and vanishing clients (env/server/serve.py, app.py).
    "no-header-deadline": _no_header_deadline,
    "no-body-deadline": _no_body_deadline,
    "no-peer-limit": _no_peer_limit,
    "slow-clients-unguarded": _slow_clients_unguarded,
    "loud-aborts": _loud_aborts,
}
CLASSES = {
    "accepts-wrong": AcceptsWrong,
    "runs-after-done": RunsAfterDone,
    "reset-leaves-files": ResetLeavesFiles,
    "runs-after-done-quietly": RunsAfterDoneQuietly,
    "grades-without-reason": GradesWithoutReason,
    "loses-output-with-background": LosesOutputWithBackground,
    "two-sessions": TwoSessions,
}
# How the routes are served: the real server's (the OpenEnv standard, `/mcp` offering no tools),
# without `/mcp` (the validator's mcp_endpoint criterion fails), or openenv-core's own: its
# stateless /reset, /step, /state and its /mcp (session create/close, tools), which the real
# server drops because they reach the one workspace around the live session.
ROUTES = {"no-mcp": "no-mcp", "openenv-core-routes": "openenv-core"}
ACTIONS = {"schema-drift": DriftedAction}
FAULTS = sorted({*PATCHES, *CLASSES, *ROUTES, *ACTIONS, *SPECS, *UNGUARDED})


def build(fault: str):
    if fault not in FAULTS:
        raise SystemExit(f"unknown fault {fault!r}; one of {', '.join(FAULTS)}")
    PATCHES.get(fault, lambda: None)()
    environment = CLASSES.get(fault, env_mod.ShellEnvironment)
    curriculum = env_mod.Curriculum(load_task_module(None))
    shell_mod.ensure_sandbox_identity(shell_mod.SANDBOX_UID, shell_mod.SANDBOX_GID)
    config = env_mod.ServerConfig()
    spec = SPECS.get(fault, lambda same: same)(env_mod.sandbox_spec(config))
    sandboxes = sandbox_mod.SandboxFactory(spec)
    environments = partial(environment, curriculum, sandboxes, config)
    app = create_app(
        environments,
        ACTIONS.get(fault, ShellAction),
        ShellObservation,
        env_name="openenv-arena",
        max_concurrent_envs=2 if fault == "two-sessions" else 1,
    )
    routes = ROUTES.get(fault, "standard")
    if routes == "standard":
        app_mod.serve_standard_routes(app, environments)
    elif routes == "no-mcp":
        app_mod.serve_standard_routes(app, environments)
        app.router.routes[:] = [r for r in app.router.routes if getattr(r, "path", None) != "/mcp"]
    if fault != "fragile-messages":
        app.add_middleware(MessageGuard)
    return app


if __name__ == "__main__":
    # The descriptor limit of a container run with the budget's limits.
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
    fault, port = sys.argv[1], int(sys.argv[2])
    if fault == "no-connection-guard":
        uvicorn.run(build(fault), host="127.0.0.1", port=port, log_level="warning")
    else:
        run(build(fault), host="127.0.0.1", port=port, log_level="warning")
