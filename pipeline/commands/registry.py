"""`registry start|stop|status`: the local loopback registry."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline.registry import local


def registry_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Manage the local loopback registry."
    p.add_argument("action", choices=("start", "stop", "status"))
    p.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="registry directory (default: $RELEASE_REGISTRY_DIR or .release/registry)",
    )


def registry(args: argparse.Namespace) -> int:
    root = args.dir
    if args.action == "start":
        started = local.start(root)
        print(f"registry running at {started.address} (storage {started.storage})")
        print(f"push user {started.user!r}, password in {started.password_file}")
        return 0
    if args.action == "stop":
        print("registry stopped" if local.stop(root) else "registry was not running")
        return 0
    state = local.status(root)
    if state is None:
        print("registry is not running")
        return 3
    print(
        f"registry running at {state.address} (storage {state.storage}, "
        f"pids registry={state.registry_pid} nginx={state.nginx_pid})"
    )
    return 0
