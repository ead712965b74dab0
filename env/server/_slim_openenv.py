"""Let openenv-core's HTTP server import without its MCP stack (fastmcp, mcp).

openenv-core 0.3.0's ``http_server`` imports ``mcp_environment`` unconditionally, and
that module imports ``fastmcp`` and ``mcp`` at its top, which pull in dozens of
distributions (auth, crypto, telemetry, CLI toolkits). This server exposes no MCP
tools: the MCP handler answers "Environment does not support MCP" before it would
touch that module. So when fastmcp is not installed (the slim image runtime) a small
stand-in provides the two names the rest of openenv-core imports from it.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from typing import Any

MCP_ENVIRONMENT_MODULE = "openenv.core.env_server.mcp_environment"


def _server_has_no_mcp_tools(mcp_server: Any) -> dict[str, Any]:
    raise RuntimeError("this server exposes no MCP tools (fastmcp is not installed)")


def install() -> bool:
    """Register the stand-in if fastmcp is absent; return True when it was registered.

    Must run before the first import of ``openenv.core``.
    """
    if MCP_ENVIRONMENT_MODULE in sys.modules or importlib.util.find_spec("fastmcp") is not None:
        return False
    stand_in = types.ModuleType(MCP_ENVIRONMENT_MODULE, __doc__)
    # env_server/__init__ falls back to None for MCPEnvironment itself when MCP is missing.
    stand_in.MCPEnvironment = None  # type: ignore[attr-defined]
    stand_in.get_server_tools = _server_has_no_mcp_tools  # type: ignore[attr-defined]
    sys.modules[MCP_ENVIRONMENT_MODULE] = stand_in
    return True
