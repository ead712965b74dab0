"""`serve`: the built (or a pulled) image in a container, or with `--host-mode` on this host."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline import config as config_mod
from pipeline.runtime import serve as serve_mod


def serve_arguments(p: argparse.ArgumentParser) -> None:
    p.description = serve_mod.__doc__.splitlines()[0]
    p.add_argument(
        "--image",
        help="name@sha256:... to pull from its registry and serve "
        "(default: the image of dist/build.json, from its OCI layout)",
    )
    p.add_argument("--record", type=Path, default=config_mod.REPO_ROOT / "dist" / "build.json")
    p.add_argument(
        "--host-mode",
        action="store_true",
        help="serve on this host from a root-only copy of env/ (changes the host; it says how)",
    )
    p.add_argument("--tasks", help="host mode: a vendored task file to serve instead of env.families")
    p.add_argument(
        "--port",
        type=int,
        default=None,
        help=f"the port on 127.0.0.1 (default: ${serve_mod.PORT_VARIABLE}, else release.toml's)",
    )
    p.add_argument(
        "--engine",
        choices=("podman", "docker"),
        default=None,
        help="the container engine: podman, or docker (the pipeline's private Docker engine, "
        "started for this and stopped with it; Docker's defaults). Default: [runtime] engine "
        "(auto: podman)",
    )
    p.add_argument("--config", type=Path, default=config_mod.DEFAULT_CONFIG)


def serve(args: argparse.Namespace) -> int:
    cfg = config_mod.load(args.config)
    port = serve_mod.serve_port(cfg, args.port)
    if args.host_mode:
        if args.engine:
            raise config_mod.ConfigError(
                "--engine serves the image in a container; --host-mode serves on this host",
                expected="one of them",
                actual="both",
            )
        return serve_mod.serve_host(port, args.tasks, cfg.curriculum)
    if args.image:
        return serve_mod.serve_pulled(args.image, cfg, host_port=port, engine=args.engine)
    return serve_mod.serve_built(args.record, cfg, host_port=port, engine=args.engine)
