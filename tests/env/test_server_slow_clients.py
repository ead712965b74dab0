"""Slow and vanishing clients against the real server (issue 47, item 5; env/server/serve.py).

A trickle of header or body bytes does not keep a connection past its deadline, one peer
holds at most its limit of connections while others are served, a client that vanishes
mid-step frees the session when its command ends, and an abandoned request is one line
of log. Each test also runs against the server with just that defence removed
(tests/checks/broken/launch.py's PATCHES): what it checks must then be seen to fail.

Every connection is to the server on 127.0.0.1; the other peer is 127.0.0.2, on the same
loopback interface.
"""

from __future__ import annotations

import json
import resource
import select
import socket
import struct
import time
from urllib.parse import urlparse

import pytest
import websockets.exceptions
import websockets.sync.client

from env.catalog import CASE_IDS
from env.server import serve
from tests.env.conftest import LiveServer

pytestmark = pytest.mark.root

CASE = CASE_IDS[0]
OTHER_PEER = "127.0.0.2"
# The server's descriptor limit, as in a container run with the budget's limits: 1,024
# less the 256 reserved leaves 768 connections in all.
NOFILE = 1024
FLOOD = 800  # more than that, from one peer
HEALTH_WITHIN_S = 1.0
TRICKLE = b"GET /health HTTP/1.1\r\nHost: arena\r\nX-Slow: " + b"a" * 64


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """The real server, with NOFILE descriptors."""
    from tests.env.conftest import require_root, start_server

    require_root()
    live = start_server(tmp_path_factory.mktemp("guarded"), nofile=NOFILE)
    try:
        yield live
    finally:
        live.stop()


@pytest.fixture
def server_with(guarded, start_live_server):
    """server_with(fault): the real server (None), or one with that defence removed."""

    def pick(fault: str | None) -> LiveServer:
        return guarded if fault is None else start_live_server(nofile=NOFILE, fault=fault)

    return pick


def _port(live: LiveServer) -> int:
    return urlparse(live.url).port


# Connections made at once: half the server's listen backlog (env/server/serve.py), so
# that none waits there, made but not yet accepted, while the test counts them.
BATCH = serve.BACKLOG // 2


def _connect(live: LiveServer, count: int, source: str = "127.0.0.1") -> list[socket.socket]:
    """``count`` connections from ``source``, BATCH at a time, each batch once it is made and
    the server has had a moment to accept it."""
    socks: list[socket.socket] = []
    while len(socks) < count:
        batch, pending = [], select.poll()
        for _ in range(min(BATCH, count - len(socks))):
            sock = socket.socket()
            sock.setblocking(False)
            sock.bind((source, 0))
            sock.connect_ex(("127.0.0.1", _port(live)))
            batch.append(sock)
            pending.register(sock, select.POLLOUT)
        waiting, deadline = len(batch), time.monotonic() + 10
        while waiting and time.monotonic() < deadline:
            for fd, _ in pending.poll(100):
                pending.unregister(fd)
                waiting -= 1
        assert not waiting, f"{waiting} connections were not made"
        socks += batch
        time.sleep(0.02)
    return socks


def _still_open(socks: list[socket.socket]) -> list[socket.socket]:
    """Those of ``socks`` the server has not closed (a closed one is readable: its end or a
    reset; the server answers no request here)."""
    poller = select.poll()
    for sock in socks:
        poller.register(sock, select.POLLIN)
    closed = {fd for fd, _ in poller.poll(0)}
    return [sock for sock in socks if sock.fileno() not in closed]


def _settled(socks: list[socket.socket]) -> int:
    """How many of ``socks`` the server keeps open, once it has accepted the last of them."""
    time.sleep(0.5)
    return len(_still_open(socks))


def _health(live: LiveServer, source: str) -> tuple[str, float]:
    """(the status line or the error, seconds) of GET /health from ``source``."""
    started = time.monotonic()
    try:
        with socket.create_connection(
            ("127.0.0.1", _port(live)), timeout=HEALTH_WITHIN_S, source_address=(source, 0)
        ) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: arena\r\nConnection: close\r\n\r\n")
            line = sock.recv(4096).split(b"\r\n", 1)[0].decode()
    except OSError as exc:
        line = f"{type(exc).__name__}: {exc}"
    return line or "closed", round(time.monotonic() - started, 2)


def _answered(probe: tuple[str, float]) -> bool:
    return probe[0] == "HTTP/1.1 200 OK" and probe[1] <= HEALTH_WITHIN_S


def _close(socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()


def _log_since(live: LiveServer, mark: int, wanted: int, within_s: float = 5.0) -> list[str]:
    """The server's log lines after offset ``mark``, once there are ``wanted`` of them (or
    ``within_s`` has passed)."""
    deadline = time.monotonic() + within_s
    while True:
        lines = live.log_path.read_text()[mark:].splitlines()
        if len(lines) >= wanted or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


@pytest.mark.parametrize("fault", [None, "no-header-deadline"])
def test_trickled_headers_do_not_outlast_their_deadline(server_with, fault):
    """Forty connections each send a byte of their headers a second: every byte once
    cancelled the keep-alive timer, so they stayed open for as long as the trickle lasted."""
    live = server_with(fault)
    socks = _connect(live, 40)
    probes = []
    try:
        started = time.monotonic()
        for second in range(serve.HEADERS_WITHIN_S + 2):
            for sock in _still_open(socks):
                try:
                    sock.send(TRICKLE[second : second + 1])
                except OSError:
                    pass
            probes.append(_health(live, OTHER_PEER))
            time.sleep(max(0.0, started + second + 1 - time.monotonic()))
        left = len(_still_open(socks))
    finally:
        _close(socks)
    assert all(_answered(p) for p in probes), probes
    if fault is None:
        assert left == 0, f"{left} of 40 trickling connections outlived the {serve.HEADERS_WITHIN_S} s deadline"
    else:
        assert left == 40, f"without the deadline every trickling connection stays open, not {40 - left} closed"


@pytest.mark.parametrize("fault", [None, "no-peer-limit"])
def test_one_peer_holds_at_most_its_limit_and_others_are_served(server_with, fault):
    """More idle connections from one peer than the server holds in all: it keeps 64,
    /health answers another peer and the flooding peer too, and the flooding peer's session,
    opened before, goes on."""
    live = server_with(fault)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < FLOOD + 256:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(FLOOD + 256, hard), hard))
    ws_url = live.url.replace("http", "ws", 1) + "/ws"
    with websockets.sync.client.connect(ws_url, open_timeout=10) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"task_id": CASE}}))
        assert json.loads(ws.recv(timeout=60))["type"] == "observation"
        socks = _connect(live, FLOOD)
        try:
            held = _settled(socks)
            other, same = _health(live, OTHER_PEER), _health(live, "127.0.0.1")
        finally:
            _close(socks)
        ws.send(json.dumps({"type": "step", "data": {"operation": "shell", "command": "echo went-on"}}))
        reply = ws.recv(timeout=60)
        went_on = "went-on" in reply
    if fault is None:
        # The session is the peer's 64th connection.
        assert held == serve.PEER_CONNECTIONS - 1
        assert _answered(other) and _answered(same), (other, same)
        assert went_on, reply
    else:
        assert held > serve.PEER_CONNECTIONS, held
        assert not _answered(other), f"without the per-peer limit the flood takes every connection ({held} held)"


@pytest.mark.slow  # waits out the body deadline
@pytest.mark.parametrize("fault", [None, "no-body-deadline"])
def test_a_trickled_body_does_not_outlast_its_deadline(server_with, fault):
    live = server_with(fault)
    mark = len(live.log_path.read_text())
    sock = socket.create_connection(("127.0.0.1", _port(live)), timeout=2)
    closed_after = None
    try:
        sock.sendall(
            b"POST /mcp HTTP/1.1\r\nHost: arena\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
        )
        sock.setblocking(False)
        started = time.monotonic()
        for _ in range(serve.BODY_WITHIN_S + 2):
            if not _still_open([sock]):
                closed_after = time.monotonic() - started
                break
            sock.send(b" ")
            time.sleep(1)
    finally:
        sock.close()
    if fault is None:
        assert closed_after is not None and serve.BODY_WITHIN_S - 1 <= closed_after <= serve.BODY_WITHIN_S + 1.5
        lines = _log_since(live, mark, 1)
        assert len(lines) == 1 and "POST /mcp: request body not complete" in lines[0], lines
    else:
        assert closed_after is None, "without the body deadline the trickled body keeps its connection"


def _abandon_requests(live: LiveServer) -> None:
    """A POST /mcp closed mid-body, a request closed mid-header, one reset mid-header, and
    one the server refuses (not HTTP: uvicorn's own line, and nothing more)."""
    for partial, reset in (
        (
            b"POST /mcp HTTP/1.1\r\nHost: arena\r\nContent-Type: application/json\r\n"
            b'Content-Length: 1000\r\n\r\n{"jsonrpc": "2.0"',
            False,
        ),
        (b"GET /health HTTP/1.1\r\nHo", False),
        (b"GET /health HTTP/1.1\r\nHo", True),
        (b"NOT HTTP AT ALL\r\n\r\n", False),
    ):
        with socket.create_connection(("127.0.0.1", _port(live)), timeout=2) as sock:
            sock.sendall(partial)
            time.sleep(0.2)  # read by the server before the close
            if reset:  # a reset rather than the end of the stream
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


@pytest.mark.parametrize("fault", [None, "loud-aborts"])
def test_an_abandoned_request_is_one_line_of_log(server_with, fault):
    live = server_with(fault)
    mark = len(live.log_path.read_text())
    _abandon_requests(live)
    assert live.healthy()
    lines = _log_since(live, mark, 4)
    text = "\n".join(lines)
    if fault is None:
        assert len(lines) == 4, text
        assert "POST /mcp: the client went away before its request body was complete" in lines[0]
        assert "the client went away before its request headers were complete" in lines[1]
        assert "the client went away before its request headers were complete" in lines[2]
        assert "Invalid HTTP request received" in lines[3]
    else:
        assert "Traceback" in "\n".join(_log_since(live, mark, 40, within_s=2.0))


def _session_starts(live: LiveServer) -> bool:
    try:
        with websockets.sync.client.connect(live.url.replace("http", "ws", 1) + "/ws", open_timeout=10) as ws:
            ws.send(json.dumps({"type": "reset", "data": {"task_id": CASE}}))
            return json.loads(ws.recv(timeout=60))["type"] == "observation"
    except websockets.exceptions.ConnectionClosed:  # refused: the capacity error, then the close
        return False


@pytest.mark.parametrize("fault", [None, "loud-aborts"])
def test_a_client_that_vanishes_mid_step_frees_the_session_when_its_command_ends(server_with, fault):
    """openenv-core runs the step to its end, fails to send the reply and ends the session:
    the next session starts once the command ends, and the log says so in one line."""
    live = server_with(fault)
    mark = len(live.log_path.read_text())
    with websockets.sync.client.connect(live.url.replace("http", "ws", 1) + "/ws", open_timeout=10) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"task_id": CASE}}))
        assert json.loads(ws.recv(timeout=60))["type"] == "observation"
        ws.send(json.dumps({"type": "step", "data": {"operation": "shell", "command": "sleep 2"}}))
        time.sleep(0.3)
        ws.socket.close()  # gone: no close frame, no reply read
    vanished = time.monotonic()
    while not _session_starts(live):  # refused while the server holds the vanished session
        assert time.monotonic() - vanished <= 2 + 3.0, "the vanished client's session was not freed"
        time.sleep(0.1)
    lines = _log_since(live, mark, 1)
    text = "\n".join(_log_since(live, mark, 40, within_s=1.0))
    if fault is None:
        assert len(lines) == 1 and "WebSocket /ws: the client went away before its reply" in lines[0], text
    else:
        assert "Traceback" in text


def test_the_per_peer_limit_is_read_from_the_environment():
    assert serve.peer_connections({}) == serve.PEER_CONNECTIONS == 64
    assert serve.peer_connections({serve.PEER_CONNECTIONS_VARIABLE: "512"}) == 512
    for wrong in ("0", "-1", "many"):
        with pytest.raises(ValueError, match=serve.PEER_CONNECTIONS_VARIABLE):
            serve.peer_connections({serve.PEER_CONNECTIONS_VARIABLE: wrong})


def test_the_image_command_refuses_a_wrong_per_peer_limit_before_serving(monkeypatch, capsys):
    monkeypatch.setenv(serve.PEER_CONNECTIONS_VARIABLE, "zero")
    assert serve.main(["--port", "1"]) == 2
    assert f"{serve.PEER_CONNECTIONS_VARIABLE}='zero'" in capsys.readouterr().err
