"""Serve the app with uvicorn, guarded against connection floods: ``python -m env.server.serve``.

The image's command. uvicorn alone keeps a connection that never sends a request open
for ever, so enough idle connections use up the server's file descriptors (1,024 in a
container run with the budget's limits): /health times out and no session can start
until they are closed. Here

- a connection must send its request within the keep-alive timeout, as it must between
  requests (`GuardedH11Protocol`);
- connections past ``max_connections`` (the descriptor limit less a reserve for the
  server's own files, pipes and sandboxes) are closed as soon as they are accepted, so
  accept never fails for want of a descriptor;
- uvicorn's concurrency limit answers 503 past the same number.

The agent cannot connect at all (its commands run in a network namespace of their own:
env/server/sandbox.py); this is for anyone else who can reach the port.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
# Seconds a connection may stay silent: before its first request, and between requests.
KEEP_ALIVE_S = 5
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


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol that times out a silent new connection and refuses past a cap."""

    refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= max_connections():
            self.refused = True
            transport.abort()
            return
        super().connection_made(transport)
        # uvicorn arms the keep-alive timer only after a response; arm it from the start.
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive,
                                                            self.timeout_keep_alive_handler)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.refused:
            super().connection_lost(exc)


def config(app: Any = APP, *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, **options: Any) -> uvicorn.Config:
    """The uvicorn configuration of the server (``options`` add uvicorn's own)."""
    return uvicorn.Config(app, host=host, port=port, http=GuardedH11Protocol, backlog=BACKLOG,
                          timeout_keep_alive=KEEP_ALIVE_S, limit_concurrency=max_connections(),
                          **options)


def run(app: Any = APP, **kwargs: Any) -> None:
    """Serve ``app`` (an ASGI app or its import string) until stopped."""
    uvicorn.Server(config(app, **kwargs)).run()


def main(argv: list[str] | None = None) -> int:
    """``python -m env.server.serve [--host H] [--port P]``: serve env.server.app:app."""
    parser = argparse.ArgumentParser(prog="python -m env.server.serve", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST})")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    args = parser.parse_args(argv)
    from env.server.mcp import skip_openenv_mcp_tools

    skip_openenv_mcp_tools()  # before uvicorn imports the app, and openenv with it
    run(host=args.host, port=args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
