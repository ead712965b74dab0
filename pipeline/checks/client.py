"""Talk to an environment server the way a trainer does: openenv-core's own client.

`Session` wraps one OpenEnv WebSocket session (GenericEnvClient, synchronous wrapper)
and turns its replies into `Reply` records; `http_get` reads the plain HTTP endpoints.
"""

from __future__ import annotations

import functools
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from websockets.exceptions import ConnectionClosed, WebSocketException

# A step may legitimately take the 60 s shell timeout plus kill and reporting time.
MESSAGE_TIMEOUT_S = 120.0
CONNECT_TIMEOUT_S = 15.0


class ServerError(Exception):
    """The server answered with an OpenEnv error reply (or the connection broke)."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


@functools.cache
def _client_class() -> type:
    """GenericEnvClient that keeps the error code of an error reply. Made on first use:
    importing openenv.core imports its whole server side (fastmcp, mcp: two seconds of
    CPU), which the commands that import the checks without talking to a server (setup,
    submission, preflight) would otherwise pay in every process.

    Most of that import is openenv-core's MCP environment module, which only a server
    offering MCP tools uses. The checks host no environment at all, so the server's
    stand-in for that module (env/server/mcp.py) serves here too: a process that checks
    a server no longer loads fastmcp and mcp."""
    from env.server.mcp import skip_openenv_mcp_tools

    skip_openenv_mcp_tools()
    from openenv.core.generic_client import GenericEnvClient

    class _Client(GenericEnvClient):
        async def _send_and_receive(self, message: dict[str, Any]) -> dict[str, Any]:
            try:
                await self._send(message)
            except ConnectionClosed as exc:
                # A refused session (capacity) is closed right after its error reply, often
                # before our first message: the reason is the message still buffered.
                try:
                    response = await self._receive()
                except (TimeoutError, ConnectionClosed):
                    raise ServerError(f"connection closed: {exc}", "CONNECTION_CLOSED") from exc
            else:
                try:
                    response = await self._receive()
                except ConnectionClosed as exc:
                    raise ServerError(f"connection closed: {exc}", "CONNECTION_CLOSED") from exc
            if response.get("type") == "error":
                data = response.get("data") or {}
                raise ServerError(str(data.get("message", "unknown error")), data.get("code"))
            return response

    return _Client


@dataclass(frozen=True)
class Reply:
    """One observation: the ShellObservation fields plus OpenEnv's reward and done."""

    task_id: str | None
    output: str
    exit_code: int | None
    reward: float | None
    done: bool
    seconds: float
    # The reply as it came over the wire (observation, reward, done): what "the identical
    # payload" of two replies is compared on.
    payload: dict[str, Any] = field(default_factory=dict, compare=False)

    def brief(self) -> dict[str, Any]:
        """A short description for failure reports."""
        return {"reward": self.reward, "done": self.done, "exit_code": self.exit_code, "output": self.output[-300:]}


class Session:
    """One OpenEnv session on one server; use as a context manager."""

    def __init__(self, base_url: str, *, message_timeout_s: float = MESSAGE_TIMEOUT_S) -> None:
        self.base_url = base_url.rstrip("/")
        client = _client_class()
        self._client = client(
            base_url=self.base_url, connect_timeout_s=CONNECT_TIMEOUT_S, message_timeout_s=message_timeout_s
        ).sync()

    def __enter__(self) -> Session:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        """Connect the WebSocket (the server creates the session on connect)."""
        self._client.connect()

    def close(self) -> None:
        self._client.close()

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Reply:
        started = time.monotonic()
        try:
            result = fn(*args, **kwargs)
        except ServerError:
            raise
        except (ConnectionError, OSError, TimeoutError, RuntimeError, WebSocketException) as exc:
            raise ServerError(f"{type(exc).__name__}: {exc}") from exc
        obs = result.observation or {}
        return Reply(
            task_id=obs.get("task_id"),
            output=obs.get("output") or "",
            exit_code=obs.get("exit_code"),
            reward=result.reward,
            done=bool(result.done),
            seconds=time.monotonic() - started,
            payload={"observation": obs, "reward": result.reward, "done": result.done},
        )

    def reset(self, task_id: str, seed: int | None = None, *, id_field: str = "task_id") -> Reply:
        """Start an episode of case `task_id` (the OpenEnv seed must not matter); `id_field`
        is the reset keyword that names the task."""
        data: dict[str, Any] = {id_field: task_id}
        if seed is not None:
            data["seed"] = seed
        return self._call(self._client.reset, **data)

    def shell(self, command: str) -> Reply:
        return self._call(self._client.step, {"operation": "shell", "command": command})

    def finish(self) -> Reply:
        return self._call(self._client.step, {"operation": "finish", "command": ""})


def http_get(base_url: str, path: str, timeout: float = 10.0) -> tuple[int, Any]:
    """GET `path`; (status, parsed JSON or text). Status 0 when nothing answered."""
    # Targets are local containers or loopback servers: never route them via a proxy.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(base_url.rstrip("/") + path, timeout=timeout) as resp:
            body = resp.read().decode("utf-8", "replace")
            status = resp.status
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc)
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body
