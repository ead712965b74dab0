"""Command line: ``python -m env serve [--host H] [--port P] [--tasks FILE] [--host-mode [--workspace DIR]]``.

Serving needs root: every shell command drops to UID/GID 2000. It is meant to run in
the image (a container: `nox -s serve`). Serving on a machine's own system is host
mode, for development, and must be asked for with ``--host-mode``: the server then
changes the host (see HOST_CHANGES), works in its own directory instead of
/workspace, and refuses to start while UID 2000 could read its code or task module.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from pathlib import Path

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
HOST_WORKSPACE = Path("/var/lib/openenv-arena/workspace")
CONTAINER_MARKERS = (Path("/run/.containerenv"), Path("/.dockerenv"))
HOST_CHANGES = (
    "adds the group and user 'arena' (UID/GID 2000) to /etc/group and /etc/passwd if missing",
    "makes the directory {workspace} if missing (each episode mounts a tmpfs of its own there, "
    "in a mount namespace of the episode: the host's directory stays empty)",
)

# Only with ARENA_ISOLATION=unprivileged (docs/isolation.md).
UNPRIVILEGED_HOST_CHANGES = (
    "replaces the empty /tmp and /var/tmp with links to {workspace}/tmp, and takes the write bit for "
    "others off /dev/shm, /run/lock and /dev/mqueue (the unprivileged mode)",
    "kills every process of UID 2000 at each reset (the unprivileged mode)",
)


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
    serve.add_argument(
        "--host-mode", action="store_true", help="serve outside a container, changing this host (it says how first)"
    )
    serve.add_argument(
        "--workspace", type=Path, default=None, help=f"host mode's workspace directory (default {HOST_WORKSPACE})"
    )
    return parser


def in_container() -> bool:
    """Whether this process runs in a podman or docker container."""
    return any(marker.exists() for marker in CONTAINER_MARKERS)


def readable_by(path: Path, uid: int, gid: int) -> bool:
    """Whether ``uid``/``gid`` (no supplementary groups) can read ``path``: every parent
    directory searchable and the file itself readable, by the permission bits."""
    path = path.resolve()
    for directory in reversed(path.parents):
        if not _allows(directory.stat(), uid, gid, stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH):
            return False
    return _allows(path.stat(), uid, gid, stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH)


def _allows(info: os.stat_result, uid: int, gid: int, user: int, group: int, other: int) -> bool:
    if info.st_uid == uid:
        return bool(info.st_mode & user)
    if info.st_gid == gid:
        return bool(info.st_mode & group)
    return bool(info.st_mode & other)


def exposed_code(tasks_file: str | None, uid: int, gid: int) -> list[Path]:
    """The server code and task module files UID ``uid`` could read."""
    import env.server.app

    package = Path(env.__file__).resolve().parent
    candidates = [Path(env.server.app.__file__), package / "loader.py"]
    if tasks_file:
        candidates.append(Path(tasks_file))
    else:
        candidates.append(package / "families" / "__init__.py")
    return [path for path in candidates if readable_by(path, uid, gid)]


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the command; return the process exit code."""
    args = _parser().parse_args(argv)
    if os.geteuid() != 0:
        print(
            "python -m env serve: must run as root (uid 0), got uid "
            f"{os.geteuid()}; the shell drops every command to UID/GID 2000, which needs root. "
            "Run it in the image (nox -s serve) or, for development, with --host-mode as root.",
            file=sys.stderr,
        )
        return 2
    from env.server.environment import ServerConfig
    from env.server.shell import SANDBOX_GID, SANDBOX_UID

    tasks_file = args.tasks or os.environ.get("ARENA_TASKS_FILE") or None
    config = ServerConfig()
    if args.host_mode:
        workspace = (args.workspace or HOST_WORKSPACE).resolve()
        exposed = exposed_code(tasks_file, SANDBOX_UID, SANDBOX_GID)
        if exposed:
            print(
                "python -m env serve --host-mode: UID 2000 could read the server code or task module: "
                f"{', '.join(map(str, exposed))}; the sandbox could import the task module and compute "
                "the answers. Serve from a root-only copy (directories 0700; nox -s serve -- --host-mode "
                "makes one) or in the image (nox -s serve).",
                file=sys.stderr,
            )
            return 2
        # The unprivileged mode locks the system's scratch directories and kills UID 2000's
        # processes: a host gets it only when asked by name (a contained test server does).
        isolation = os.environ.setdefault("ARENA_ISOLATION", "namespaces")
        print("python -m env serve --host-mode changes this host:", file=sys.stderr)
        for change in HOST_CHANGES + (UNPRIVILEGED_HOST_CHANGES if isolation == "unprivileged" else ()):
            print(f"  - {change.format(workspace=workspace)}", file=sys.stderr)
        config = ServerConfig(workspace_root=workspace)
    elif not in_container():
        print(
            "python -m env serve: not in a container. The server kills UID 2000's processes and "
            "deletes its files on every reset, so on a host it changes the host: serve the image "
            "(nox -s serve), or pass --host-mode to accept that (it lists the changes first).",
            file=sys.stderr,
        )
        return 2
    elif args.workspace is not None:
        print("python -m env serve: --workspace is for --host-mode; in the image it is /workspace", file=sys.stderr)
        return 2
    from env.loader import TaskModuleError
    from env.server.app import create_server_app
    from env.server.serve import run

    try:
        app = create_server_app(tasks_file, config)
    except TaskModuleError as exc:
        print(f"python -m env serve: {exc}", file=sys.stderr)
        return 2
    run(app, host=args.host, port=args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
