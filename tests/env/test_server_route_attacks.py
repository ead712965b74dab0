"""Attacks on the routes the OpenEnv standard adds (`POST /mcp`, `GET /openapi.json`): from inside
an episode (the agent, UID 2000, on 127.0.0.1) and from a client outside. Nothing sent there opens
an episode, runs a command, reads an answer, reaches the grader or spends the 16 actions; no body
is a server error; a flood during an episode leaves it and its budget as they were.

The same battery runs in a container (tests/runtime/test_attacks_in_container.py) and against a
server that keeps openenv-core's own routes, which it must catch (tests/checks/test_teeth.py)."""

from __future__ import annotations

import http.client
import json
import threading
import urllib.request
from urllib.parse import urlsplit

import pytest

from env.server import mcp

from . import route_attacks

pytestmark = pytest.mark.root

CASE = "finance_ledger-d2-s307"


def _port(server) -> int:
    return urlsplit(server.url).port


def _post(
    server, body: bytes, *, headers: dict[str, str] | None = None, chunked: bool = False, path: str = "/mcp"
) -> tuple[int, bytes]:
    """POST raw bytes (optionally with chunked transfer: no Content-Length to trust)."""
    conn = http.client.HTTPConnection("127.0.0.1", _port(server), timeout=30)
    try:
        if chunked:
            conn.putrequest("POST", path)
            conn.putheader("Content-Type", "application/json")
            conn.putheader("Transfer-Encoding", "chunked")
            conn.endheaders()
            for start in range(0, len(body), 8192):
                piece = body[start : start + 8192]
                conn.send(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            conn.send(b"0\r\n\r\n")
        else:
            conn.request("POST", path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
        reply = conn.getresponse()
        return reply.status, reply.read()
    finally:
        conn.close()


def test_the_battery_beside_an_episode_leaves_it_as_it_was(server, oracle_json):
    assert (
        route_attacks.attack(
            server.url, CASE, port=_port(server), secrets=(oracle_json(CASE), "/opt/arena", "expected")
        )
        == []
    )
    assert server.healthy()


DEEP = b"[" * 5000 + b"]" * 5000


@pytest.mark.parametrize(
    "body,code",
    [
        (b"", -32600),
        (b"{}", -32600),
        (b"not json", -32700),
        (b"\xff\xfe\x00garbage", -32700),
        (DEEP, -32700),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": ' + DEEP + b"}", -32700),
        (b"[" + json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode() + b"]", -32600),
        (b'"tools/list"', -32600),
        (b"NaN", -32600),
        (b"1" * 5000, -32700),
        (b'{"jsonrpc": "1.0", "id": 1, "method": "tools/list"}', -32600),
        (b'{"jsonrpc": "2.0", "id": 1, "method": 5}', -32600),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "x' + b"y" * 60_000 + b'"}', -32601),
    ],
    ids=[
        "empty",
        "empty-object",
        "not-json",
        "not-utf8",
        "nested-5000",
        "nested-params",
        "batch",
        "string",
        "nan",
        "huge-number",
        "old-jsonrpc",
        "method-not-string",
        "long-method",
    ],
)
def test_malformed_bodies_get_json_rpc_errors_never_a_server_error(server, body, code):
    status, raw = _post(server, body)
    assert status == 200, raw[:300]
    reply = json.loads(raw)
    assert reply["jsonrpc"] == "2.0" and reply["error"]["code"] == code and "result" not in reply
    assert server.healthy()


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_oversized_bodies_are_refused_before_they_are_parsed(server, chunked):
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"pad": "x" * (mcp.MAX_BODY_BYTES + 1)}}
    ).encode()
    status, raw = _post(server, body, chunked=chunked)
    assert status == 200
    reply = json.loads(raw)
    assert reply["error"]["code"] == -32600 and f"exceeds {mcp.MAX_BODY_BYTES} bytes" in reply["error"]["message"]
    assert server.healthy()


def test_a_notification_is_accepted_and_does_nothing(server):
    status, raw = _post(server, json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode())
    assert (status, raw) == (202, b"")


def test_mcp_session_methods_from_outside_take_no_session_slot(server):
    """openenv-core's /mcp creates sessions (`openenv/session/create`): with one session allowed,
    a client could hold the slot and lock every trainer out. Here the slot stays free."""
    for _ in range(3):
        status, raw = _post(
            server, json.dumps({"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}).encode()
        )
        assert status == 200 and json.loads(raw)["error"]["code"] == -32601
    first = server.client()
    try:
        assert first.reset(task_id=CASE).observation["task_id"] == CASE
    finally:
        first.close()


def test_openapi_shows_the_standard_routes_and_nothing_of_the_episode(server, oracle_json):
    with server.session() as env:
        env.reset(task_id=CASE)
        with urllib.request.urlopen(server.url + "/openapi.json", timeout=10) as reply:
            text = reply.read().decode()
    spec = json.loads(text)
    assert set(spec["paths"]) == route_attacks.STANDARD_PATHS
    assert set(spec["paths"]["/mcp"]) == {"post"}
    for secret in (oracle_json(CASE), "/opt/arena", "/workspace", "expected"):
        assert secret not in text


def test_a_flood_of_mcp_requests_during_an_episode_leaves_it_and_its_budget_as_they_were(server):
    bodies = [json.dumps(m).encode() for _, m in route_attacks.MCP_CALLS] + [b"{", DEEP, b"[]"]
    statuses: list[int] = []
    stop = threading.Event()

    def flood() -> None:
        i = 0
        while not stop.is_set():
            status, _ = _post(server, bodies[i % len(bodies)])
            statuses.append(status)
            i += 1

    threads = [threading.Thread(target=flood) for _ in range(8)]
    for t in threads:
        t.start()
    try:
        with server.session() as env:
            env.reset(task_id=CASE)
            replies = [
                env.step({"operation": "shell", "command": f"echo {n} >> count && wc -l < count"}) for n in range(1, 17)
            ]
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert len(statuses) > 100 and set(statuses) == {200}
    assert [r.done for r in replies] == [False] * 15 + [True]
    assert [r.observation["output"].strip() for r in replies[:15]] == [str(n) for n in range(1, 16)]
    assert server.healthy()
