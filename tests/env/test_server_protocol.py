"""The OpenEnv surface: /health, /schema, /metadata, the /ws session limit and error replies."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import websockets.exceptions
import websockets.sync.client

from env.catalog import CASE_IDS
from pipeline.checks import schema as release_schema

pytestmark = pytest.mark.root


def test_health_schema_metadata(server):
    assert server.get("/health") == (200, {"status": "healthy"})
    status, schema = server.get("/schema")
    assert status == 200
    # The one schema of every image of the release, JSON-equal (descriptions, required).
    assert {k: schema[k] for k in ("action", "observation")} == release_schema.declared()
    status, metadata = server.get("/metadata")
    assert status == 200 and metadata["name"] == "openenv-arena"


def test_openapi_declares_production_mode(server):
    status, spec = server.get("/openapi.json")
    assert status == 200 and isinstance(spec["info"]["version"], str)
    assert set(spec["paths"]) == {"/health", "/metadata", "/schema", "/mcp"}


@pytest.mark.parametrize("path", ["/reset", "/step"])
def test_stateless_http_episode_routes_are_not_served(server, path):
    request = urllib.request.Request(
        server.url + path, data=b"{}", method="POST", headers={"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=10)
    assert caught.value.code in (404, 405)
    assert server.get("/state")[0] in (404, 405)


@pytest.mark.parametrize("path", ["/docs", "/redoc", "/mcp"])
def test_only_the_standard_routes_answer_http_get(server, path):
    assert server.get(path)[0] in (404, 405)


def _mcp(server, message) -> dict:
    request = urllib.request.Request(
        server.url + "/mcp",
        data=json.dumps(message).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        assert reply.status == 200
        return json.loads(reply.read())


def test_mcp_answers_json_rpc_and_offers_no_tools(server):
    assert _mcp(server, {})["error"]["code"] == -32600
    assert _mcp(server, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})["result"] == {"tools": []}
    called = _mcp(
        server, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "reset", "arguments": {}}}
    )
    assert called["error"]["code"] == -32601


def test_mcp_websocket_is_not_served(server):
    # The one WebSocket route is the episode session; /mcp's handshake is refused.
    with pytest.raises((websockets.exceptions.InvalidStatus, websockets.exceptions.InvalidHandshake)):
        with websockets.sync.client.connect(server.url.replace("http", "ws") + "/mcp", open_timeout=10) as ws:
            ws.send(json.dumps({"jsonrpc": "2.0", "method": "tools/list", "id": 1}))
            ws.recv(timeout=5)


def test_reset_defaults_to_first_case_and_accepts_every_case(server):
    with server.session() as env:
        assert env.reset().observation["task_id"] == CASE_IDS[0]
        for case_id in CASE_IDS:
            result = env.reset(task_id=case_id, seed=7, episode_id=f"ep-{case_id}")
            assert result.observation["task_id"] == case_id
            assert result.done is False and result.reward is None
            assert "answer.json" in result.observation["output"]
        state = env.state()
        assert state["episode_id"] == f"ep-{CASE_IDS[-1]}" and state["step_count"] == 0
        assert "expected" not in json.dumps(state)


def test_unknown_task_id_error_lists_valid_ids(server):
    with server.session() as env:
        with pytest.raises(RuntimeError) as caught:
            env.reset(task_id="no_such_family-d1-s1")
        message = str(caught.value)
        assert "no_such_family-d1-s1" in message
        assert all(case_id in message for case_id in CASE_IDS)
        assert env.reset(task_id=CASE_IDS[3]).observation["task_id"] == CASE_IDS[3]
    assert server.healthy()


@pytest.mark.parametrize(
    "action, fragment",
    [
        ({"operation": "delete", "command": "true"}, "VALIDATION_ERROR"),
        ({"operation": "shell", "command": "true", "sudo": True}, "VALIDATION_ERROR"),
        ({"operation": "shell", "command": "x" * 16_001}, "VALIDATION_ERROR"),
        ({"command": "true"}, "VALIDATION_ERROR"),
        ({"operation": "shell", "command": 5}, "VALIDATION_ERROR"),
    ],
    ids=["unknown-operation", "extra-field", "command-too-long", "no-operation", "command-not-string"],
)
def test_bad_actions_get_error_replies_and_run_nothing(server, action, fragment):
    with server.session() as env:
        env.reset(task_id=CASE_IDS[0])
        with pytest.raises(RuntimeError, match=fragment):
            env.step(action)
        assert env.state()["step_count"] == 0
        ok = env.step({"operation": "shell", "command": "echo still-here"})
        assert ok.observation["output"] == "still-here\n"
    assert server.healthy()


def test_command_of_exactly_16000_chars_is_accepted(server):
    with server.session() as env:
        env.reset()
        command = "echo ok #" + "x" * (16_000 - len("echo ok #"))
        assert len(command) == 16_000
        assert env.step({"operation": "shell", "command": command}).observation["output"] == "ok\n"


def test_unknown_reset_field_and_step_before_reset_are_errors(server):
    with server.session() as env:
        with pytest.raises(RuntimeError, match="no episode in progress"):
            env.step({"operation": "shell", "command": "true"})
        with pytest.raises(RuntimeError, match="taskid"):
            env.reset(taskid=CASE_IDS[1])
    assert server.healthy()


def test_second_concurrent_session_gets_capacity_error(server):
    with server.session() as first:
        first.reset()
        # The refusal is OpenEnv's first (and only) message on the second socket.
        with websockets.sync.client.connect(server.url.replace("http", "ws") + "/ws") as raw:
            reply = json.loads(raw.recv(timeout=10))
        assert reply["type"] == "error"
        assert reply["data"]["code"] == "CAPACITY_REACHED"
        assert reply["data"]["max_sessions"] == 1
        # openenv-core's client fails on it too, whichever of its send or receive meets it.
        second = server.client()
        try:
            with pytest.raises((RuntimeError, websockets.exceptions.ConnectionClosed)):
                second.reset()
        finally:
            second.close()
        assert first.step({"operation": "shell", "command": "echo first"}).observation["output"] == "first\n"
    with server.session() as third:
        assert third.reset().observation["task_id"] == CASE_IDS[0]


SERVER_IMPORTS = """
import sys
from env.server.mcp import skip_openenv_mcp_tools
skip_openenv_mcp_tools()
import env.server.app
from openenv.core.env_server import MCPEnvironment
from openenv.core.env_server.mcp_environment import get_server_tools
try:
    get_server_tools(object())
except RuntimeError as exc:
    refused = str(exc)
print(sorted(m for m in ("fastmcp", "mcp") if m in sys.modules), MCPEnvironment, refused)
"""


def test_the_server_process_does_not_import_openenv_mcp_tools():
    # `python -m env.server.serve` stands in for openenv-core's MCP environment module: its
    # fastmcp and mcp imports were most of the server's start (about a second of CPU).
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", SERVER_IMPORTS],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(repo)},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "[] None this server offers no MCP tools (env/server/mcp.py)", out.stdout
