"""`docker-engine start|stop|status`: the pipeline's private Docker engine (pipeline/runtime/dockerd.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline.runtime import dockerd


def docker_engine_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Manage the pipeline's private Docker engine (Debian's dockerd on a socket of its own; "
        "never a host's default daemon). The commands that use it start and stop it themselves; "
        "this is for one left running by a killed run, or to keep one up between runs."
    )
    p.add_argument("action", choices=("start", "stop", "status"))
    p.add_argument(
        "--dir",
        type=Path,
        default=None,
        help=f"engine directory (default: ${dockerd.ROOT_VARIABLE} or .release/docker)",
    )


def docker_engine(args: argparse.Namespace) -> int:
    if args.action == "start":
        started = dockerd.start(args.dir, keep=True)
        print(
            f"docker engine {started.version} running at {started.host} (pid {started.pid}, containerd pid "
            f"{started.containerd_pid}, containerd namespace {started.namespace}); it stays up until "
            "`docker-engine stop`"
        )
        return 0
    if args.action == "stop":
        print("docker engine stopped" if dockerd.stop(args.dir) else "docker engine was not running")
        return 0
    state = dockerd.status(args.dir)
    if state is None:
        print("docker engine is not running")
        return 3
    print(
        f"docker engine {state.version} running at {state.host} (pid {state.pid}, containerd pid "
        f"{state.containerd_pid}, data root {state.root / 'data'})"
    )
    return 0
