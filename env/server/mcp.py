"""`POST /mcp`: a JSON-RPC 2.0 endpoint that offers no tools.

OpenEnv's runtime standard asks every server for an MCP endpoint that answers JSON-RPC
(`openenv validate`'s `mcp_endpoint`). openenv-core's own `/mcp` builds an environment
per request or session and would offer its tools (reset, step) there; here every
environment shares the one workspace and the UID 2000 process table, so such a tool
could wipe the live episode, bypass the one-session limit or run a shell outside the
16-action budget. This endpoint speaks the protocol (initialize, ping, tools/list) and
lists no tools: nothing sent to it can open an episode, run a command, read an answer
or reach the grader. The episode is served over `/ws` only.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

MCP_PATH = "/mcp"
PROTOCOL_VERSION = "2025-06-18"
# A JSON-RPC request to this endpoint is a few hundred bytes; anything longer is refused
# before it is parsed.
MAX_BODY_BYTES = 64 * 1024

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND = -32700, -32600, -32601


def _error(code: int, message: str, request_id: Any = None) -> JSONResponse:
    return JSONResponse({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}})


def _result(request_id: Any, result: dict[str, Any]) -> JSONResponse:
    return JSONResponse({"jsonrpc": "2.0", "id": request_id, "result": result})


async def _body(request: Request) -> bytes | None:
    """The request body, or None when it is longer than MAX_BODY_BYTES."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def answer(message: Any, server_name: str) -> JSONResponse | None:
    """The reply to one decoded JSON-RPC message (None for a notification)."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or not isinstance(message.get("method"), str):
        request_id = message.get("id") if isinstance(message, dict) else None
        return _error(
            INVALID_REQUEST,
            "Invalid Request: a JSON-RPC 2.0 request object is expected",
            request_id if isinstance(request_id, (str, int)) else None,
        )
    if "id" not in message:
        return None
    request_id, method = message["id"], message["method"]
    if method == "initialize":
        return _result(
            request_id,
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": server_name, "version": "1.0.0"},
                "instructions": "This environment offers no MCP tools; episodes run over the /ws session.",
            },
        )
    if method == "ping":
        return _result(request_id, {})
    if method == "tools/list":
        return _result(request_id, {"tools": []})
    return _error(METHOD_NOT_FOUND, f"Method not found: {method} (this endpoint offers no tools)", request_id)


def endpoint(server_name: str):
    """The `POST /mcp` handler for a server called `server_name`."""

    async def mcp(request: Request) -> Response:
        body = await _body(request)
        if body is None:
            return _error(INVALID_REQUEST, f"Invalid Request: the body exceeds {MAX_BODY_BYTES} bytes")
        try:
            message = json.loads(body) if body.strip() else {}
        except (ValueError, UnicodeDecodeError, RecursionError):
            # RecursionError: json's decoder recurses per nesting level, so a body of a few
            # thousand "[" would otherwise be a server error.
            return _error(PARSE_ERROR, "Parse error: the body is not JSON")
        reply = answer(message, server_name)
        return Response(status_code=202) if reply is None else reply

    return mcp


# openenv-core's http_server imports this module of its own for the MCP tools of an
# MCPEnvironment; that import pulls in fastmcp and mcp, about a second of CPU at every
# server start. ShellEnvironment is no MCPEnvironment and this server offers no tools, so
# the module's code never runs here.
OPENENV_MCP_MODULE = "openenv.core.env_server.mcp_environment"


def _no_server_tools(server: Any) -> dict:
    raise RuntimeError("this server offers no MCP tools (env/server/mcp.py)")


def skip_openenv_mcp_tools() -> None:
    """Stand in for openenv-core's MCP environment module before openenv is imported, in
    the server process only: `get_server_tools` refuses, `MCPEnvironment` is None (what
    openenv-core itself sets when fastmcp is absent). A process that imported the real
    module already keeps it."""
    import sys
    import types

    if OPENENV_MCP_MODULE in sys.modules:
        return
    stand_in = types.ModuleType(OPENENV_MCP_MODULE, "openenv-core's MCP tools: not offered by this server")
    stand_in.get_server_tools = _no_server_tools  # type: ignore[attr-defined]
    stand_in.MCPEnvironment = None  # type: ignore[attr-defined]
    sys.modules[OPENENV_MCP_MODULE] = stand_in
