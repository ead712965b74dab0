"""Command line: ``python -m env serve [--host H] [--port P] [--tasks FILE]``.

Serving needs root: every shell command drops to UID/GID 2000.
"""

from __future__ import annotations

import argparse
import os
import sys

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m env", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the OpenEnv environment with uvicorn (as root)")
    serve.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST})")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    serve.add_argument(
        "--tasks",
        metavar="FILE",
        help="a vendored task module file with the families API "
        "(default: $ARENA_TASKS_FILE, else the first-party env.families)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the command; return the process exit code."""
    args = _parser().parse_args(argv)
    if os.geteuid() != 0:
        print(
            "python -m env serve: must run as root (uid 0), got uid "
            f"{os.geteuid()}; the shell drops every command to UID/GID 2000, which needs root. "
            "Run it with sudo or inside the image.",
            file=sys.stderr,
        )
        return 2
    import uvicorn

    from env.loader import TaskModuleError
    from env.server.app import TASKS_FILE_VARIABLE, create_server_app

    try:
        app = create_server_app(args.tasks or os.environ.get(TASKS_FILE_VARIABLE) or None)
    except TaskModuleError as exc:
        print(f"python -m env serve: {exc}", file=sys.stderr)
        return 2
    uvicorn.run(app, host=args.host, port=args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
