"""The ASGI app the image serves: ``env.server.app:app`` (run by env/server/serve.py).

The task module comes from ``ARENA_TASKS_FILE`` (a vendored file) or, when unset, the
first-party ``env.families``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from functools import partial

from fastapi import FastAPI
from openenv.core.env_server.http_server import create_app
from starlette.requests import ClientDisconnect
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocketDisconnect, WebSocketDisconnected

from env.loader import load_task_module
from env.server import mcp
from env.server.environment import ArenaMetadata, Curriculum, ServerConfig, ShellEnvironment, sandbox_spec
from env.server.messages import MessageGuard
from env.server.models import ShellAction, ShellObservation
from env.server.sandbox import start_sandboxes
from env.server.shell import check_sandbox_tools, ensure_sandbox_identity
from env.server.workspace import home_dir

TASKS_FILE_VARIABLE = "ARENA_TASKS_FILE"
# `auto` (the default: the strongest mode the runtime allows), `namespaces` or
# `unprivileged` (docs/isolation.md); the mode taken is logged and served at /metadata.
ISOLATION_VARIABLE = "ARENA_ISOLATION"

# What is served: the OpenEnv runtime standard's endpoints, in its "production" mode
# (`openenv validate`: an OpenAPI path set without /reset has neither /step nor /state),
# and the episode over /ws. openenv-core's stateless HTTP routes (/reset, /step, /state)
# and its MCP routes (/mcp over HTTP and WebSocket) each build a fresh environment per
# request or session; here every environment shares the one workspace and the UID 2000
# process table, so they would wipe the live session's workspace and kill its processes,
# bypassing the one-session limit. They are dropped; /mcp is answered by env.server.mcp,
# which speaks JSON-RPC and offers no tools. The interactive API docs are not served.
SERVED_ROUTES = frozenset({"/health", "/metadata", "/schema", "/ws", "/openapi.json"})
ENV_NAME = "openenv-arena"
# uvicorn's own logger, where the server's other one-line reports go (env/server/serve.py).
_LOG = logging.getLogger("uvicorn.error")


def create_server_app(tasks_file: str | None = None, config: ServerConfig = ServerConfig()) -> FastAPI:
    """Build the OpenEnv app for the task module at ``tasks_file`` (None: first-party families)."""
    curriculum = Curriculum(load_task_module(tasks_file))
    sandboxes = None
    if os.geteuid() == 0:
        check_sandbox_tools()
        ensure_sandbox_identity(config.uid, config.gid, home_dir(config.workspace_root))
        config.workspace_root.mkdir(mode=0o755, parents=True, exist_ok=True)
        # The first episode's sandbox, made now: a server that cannot isolate episodes
        # fails here, at start, saying why, rather than at its first reset.
        sandboxes = start_sandboxes(sandbox_spec(config), os.environ.get(ISOLATION_VARIABLE) or "auto")
    environments = partial(ShellEnvironment, curriculum, sandboxes, config)
    app = create_app(
        environments,
        ShellAction,
        ShellObservation,
        env_name=ENV_NAME,
        max_concurrent_envs=1,
    )
    serve_standard_routes(app, environments)
    app.add_middleware(_QuietClientClose)
    app.add_middleware(MessageGuard)
    return app


def serve_standard_routes(app: FastAPI, environments: Callable[[], ShellEnvironment]) -> None:
    """Narrow ``app`` (openenv-core's) to SERVED_ROUTES, answer ``GET /metadata`` with what
    ``environments`` (the app's factory) says, and ``POST /mcp`` with env.server.mcp."""
    keep_served_routes(app)
    # openenv-core's /metadata route drops every field its own model lacks: this one serves
    # the environment's whole answer (its isolation mode included).
    app.router.routes[:] = [route for route in app.router.routes if getattr(route, "path", None) != "/metadata"]
    app.add_api_route(
        "/metadata",
        partial(_metadata, environments),
        methods=["GET"],
        response_model=ArenaMetadata,
        summary="Get environment metadata",
        tags=["Environment Info"],
    )
    app.add_api_route(
        mcp.MCP_PATH, mcp.endpoint(ENV_NAME), methods=["POST"], summary="MCP (JSON-RPC 2.0); no tools are offered"
    )


def _metadata(environments: Callable[[], ShellEnvironment]) -> ArenaMetadata:
    environment = environments()
    try:
        return environment.get_metadata()
    finally:
        environment.close()


class _QuietClientClose:
    """One line, not a traceback, for a client that goes away mid-request.

    - A WebSocket client that goes away while its step runs: openenv-core's /ws loop runs
      the command to its end (at most the shell timeout), fails to send the reply, and
      tries to send an error about that too; Starlette raises WebSocketDisconnected at
      that second send. The session is destroyed by then (openenv-core's ``finally``): one
      line says so.
    - openenv-core 0.3.0 ends every session with ``websocket.close()`` and expects a
      RuntimeError if the client has gone; Starlette 1.x raises WebSocketDisconnect
      instead, after every normal client close: nothing to report.
    - An HTTP client that goes away before its body is complete (ClientDisconnect from
      ``request.stream()``, as ``POST /mcp`` reads it): env/server/serve.py logged the
      line when the connection was lost, so nothing more.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            try:
                await self.app(scope, receive, send)
            except ClientDisconnect:
                pass
            return
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            pass
        except WebSocketDisconnected:
            client = scope.get("client")
            prefix = f"{client[0]}:{client[1]} - " if client else ""
            _LOG.warning(
                "%sWebSocket %s: the client went away before its reply; the session has ended",
                prefix,
                scope.get("path", ""),
            )


def keep_served_routes(app: FastAPI) -> None:
    """Drop every route of ``app`` but SERVED_ROUTES (openenv-core's /mcp routes included)."""
    app.router.routes[:] = [route for route in app.router.routes if _served(route)]


def _served(route: BaseRoute) -> bool:
    return getattr(route, "path", None) in SERVED_ROUTES


def __getattr__(name: str) -> FastAPI:
    # `app` is built on first access (uvicorn's "env.server.app:app"), so importing
    # create_server_app does not also load the task module named by the environment.
    if name == "app":
        built = create_server_app(os.environ.get(TASKS_FILE_VARIABLE) or None)
        globals()["app"] = built
        return built
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
