"""Serve the app with uvicorn, guarded against floods and slow clients: ``python -m env.server.serve``.

The image's command. uvicorn alone keeps a connection that never sends a request open
for ever, so enough idle connections use up the server's file descriptors (1,024 in a
container run with the budget's limits): /health times out and no session can start
until they are closed. Its keep-alive timeout does not help against a client that
trickles its request a byte at a time: every byte received cancels the timer. Here
(`GuardedH11Protocol`)

- a connection must send its request within the keep-alive timeout, as it must between
  requests;
- a request's headers must be complete within HEADERS_WITHIN_S of the connection's accept,
  or of the end of the previous response: a deadline that bytes arriving do not move; its
  body must then be complete within BODY_WITHIN_S;
- one peer address holds at most ``peer_connections()`` connections: past that, its own
  connection that has waited longest for a request is closed to make room (a session and
  a request in progress are never closed so), or, if it has none, the new one is refused;
- connections past ``max_connections`` (the descriptor limit less a reserve for the
  server's own files, pipes and sandboxes) are closed as soon as they are accepted, so
  accept never fails for want of a descriptor;
- uvicorn's concurrency limit answers 503 past the same number;
- a request the client abandons, or that misses its deadline, is logged as one line.

The agent cannot connect at all (its commands run in a network namespace of their own:
env/server/sandbox.py); this is for anyone else who can reach the port.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import resource
import sys
from collections.abc import Mapping
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
# Seconds a connection may stay silent: before its first request, and between requests.
KEEP_ALIVE_S = 5
# Seconds from a connection's accept (or the end of its previous response) to the end of
# its request's headers, however the bytes arrive; and from there to the end of the body.
HEADERS_WITHIN_S = 5
BODY_WITHIN_S = 10
# Connections one peer address may hold at once (docs/isolation.md says why this many);
# PEER_CONNECTIONS_VARIABLE sets another number.
PEER_CONNECTIONS = 64
PEER_CONNECTIONS_VARIABLE = "ARENA_PEER_CONNECTIONS"
# Descriptors kept for the server itself: logs, pipes of a running command, the sandbox's
# control sockets and pidfds, the task module, the next sandbox, and the connections
# accepted in one burst before any is refused (at most BACKLOG).
RESERVED_FDS = 256
# Connections waiting to be accepted, and so the most accepted in one go (asyncio accepts
# up to the backlog at a time; uvicorn's default, 2,048, is more than the descriptors).
BACKLOG = 64
APP = "env.server.app:app"


def max_connections() -> int:
    """The connections the server holds at once: its descriptor limit less the reserve."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(soft - RESERVED_FDS, 16)


def peer_connections(environ: Mapping[str, str] = os.environ) -> int:
    """The connections one peer address may hold: PEER_CONNECTIONS, or the environment's number."""
    given = environ.get(PEER_CONNECTIONS_VARIABLE, "").strip()
    if not given:
        return PEER_CONNECTIONS
    if not given.isdigit() or int(given) < 1:
        raise ValueError(f"{PEER_CONNECTIONS_VARIABLE}={given!r}: a whole number of connections, at least 1")
    return int(given)


def _peer(protocol: Any) -> str | None:
    client = getattr(protocol, "client", None)
    return client[0] if client else None


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the guards of this module's docstring."""

    refused = False
    upgraded = False
    # The server closed the connection (and said why, if it was worth a line), or the client
    # did (its end of the stream, or a reset): only the client's leaving is logged on loss.
    closed_by_server = False
    client_left = False
    # The deadline of the request stage the connection is in ("headers" or "body"), if any.
    deadline: asyncio.TimerHandle | None = None
    # loop.time() at which the connection began waiting for a request.
    waiting_since = 0.0

    def __init__(self, *args: Any, per_peer: int = PEER_CONNECTIONS, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.per_peer = per_peer

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= max_connections() or not self._make_room(transport):
            self.refused = True
            transport.abort()
            return
        super().connection_made(transport)
        # uvicorn arms the keep-alive timer only after a response; arm it from the start.
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)
        self._await_request()

    def _make_room(self, transport: asyncio.Transport) -> bool:
        """Whether the new connection's peer may have it: under its limit, or once the peer's
        connection that has waited longest for a request is closed."""
        client = transport.get_extra_info("peername")
        peer = client[0] if isinstance(client, (tuple, list)) and client else None
        if peer is None:
            return True
        held = [c for c in self.connections if _peer(c) == peer and not c.transport.is_closing()]
        if len(held) < self.per_peer:
            return True
        waiting = [c for c in held if isinstance(c, GuardedH11Protocol) and c._waiting()]
        if not waiting:
            return False
        min(waiting, key=lambda c: c.waiting_since)._close_quietly()
        return True

    def _waiting(self) -> bool:
        """Whether the connection waits for a request (none begun, or the last one answered)."""
        return not self.upgraded and (self.cycle is None or self.cycle.response_complete)

    def _arm(self, seconds: float, stage: str) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
        self.deadline = self.loop.call_later(seconds, self._deadline_passed, stage, self.cycle)

    def _await_request(self) -> None:
        self.waiting_since = self.loop.time()
        self._arm(HEADERS_WITHIN_S, "headers")

    def _deadline_passed(self, stage: str, cycle: Any) -> None:
        self.deadline = None
        if self.transport.is_closing() or self.upgraded:
            return
        if stage == "headers" and self._waiting():
            # (A body may still be arriving after the app answered without reading it.)
            what = "request body" if self.conn.their_state is h11.SEND_BODY else "request headers"
            self._close(f"{what} not complete within {HEADERS_WITHIN_S} s")
        elif stage == "body" and self.cycle is cycle and self.cycle.more_body:
            self._close(f"{self._request()}: request body not complete within {BODY_WITHIN_S} s")

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle and self.cycle is not None and self.cycle.more_body:
            self._await_body()

    def _await_body(self) -> None:
        """A request's headers are in, and its body is still to come."""
        self._arm(BODY_WITHIN_S, "body")

    def on_response_complete(self) -> None:
        if not self.transport.is_closing():
            self._await_request()  # before a pipelined request is handled, which arms its own
        super().on_response_complete()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        self.upgraded = True
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None
        super().handle_websocket_upgrade(event)

    def _request(self) -> str:
        return f"{self.scope['method']} {self.scope['path']}" if self.scope else "request"

    def _prefix(self) -> str:
        return f"{self.client[0]}:{self.client[1]} - " if self.client else ""

    def _close(self, why: str) -> None:
        self.logger.warning("%s%s; connection closed", self._prefix(), why)
        self._close_quietly()

    def _close_quietly(self) -> None:
        self.closed_by_server = True
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        self.closed_by_server = True  # uvicorn logged the invalid request
        super().send_400_response(msg)

    def eof_received(self) -> None:
        self.client_left = True
        super().eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.refused:
            return
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None
        if (self.client_left or exc is not None) and not self.closed_by_server and not self.upgraded:
            self._log_abandoned()
        super().connection_lost(exc)

    def _log_abandoned(self) -> None:
        """One line for a request the client left unfinished (nothing for an idle connection)."""
        if self.cycle is not None and not self.cycle.response_complete:
            if self.cycle.more_body:
                self.logger.warning(
                    "%s%s: the client went away before its request body was complete", self._prefix(), self._request()
                )
            else:
                self.logger.warning("%s%s: the client went away before its response", self._prefix(), self._request())
        elif self.conn.trailing_data[0]:
            self.logger.warning("%sthe client went away before its request headers were complete", self._prefix())


def config(app: Any = APP, *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, **options: Any) -> uvicorn.Config:
    """The uvicorn configuration of the server (``options`` add uvicorn's own)."""
    protocol = functools.partial(GuardedH11Protocol, per_peer=peer_connections())
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=protocol,  # type: ignore[arg-type]
        backlog=BACKLOG,
        timeout_keep_alive=KEEP_ALIVE_S,
        limit_concurrency=max_connections(),
        **options,
    )


def run(app: Any = APP, **kwargs: Any) -> None:
    """Serve ``app`` (an ASGI app or its import string) until stopped."""
    uvicorn.Server(config(app, **kwargs)).run()


def main(argv: list[str] | None = None) -> int:
    """``python -m env.server.serve [--host H] [--port P]``: serve env.server.app:app."""
    parser = argparse.ArgumentParser(prog="python -m env.server.serve", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST})")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    args = parser.parse_args(argv)
    try:
        peer_connections()
    except ValueError as exc:
        print(f"python -m env.server.serve: {exc}", file=sys.stderr)
        return 2
    from env.server.mcp import skip_openenv_mcp_tools

    skip_openenv_mcp_tools()  # before uvicorn imports the app, and openenv with it
    run(host=args.host, port=args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
