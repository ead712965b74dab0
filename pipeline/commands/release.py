"""`release`: the whole release, in order (reproduce and audit have modules of their own,
so that they do not load the release's check and request machinery)."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline import config as config_mod
from pipeline import plan
from pipeline import release as release_mod


def release_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "The whole release, from sources to signed records."
    p.add_argument("--profile", default="local", help="release.toml profile (default: local)")
    p.add_argument("--config", type=Path, default=config_mod.DEFAULT_CONFIG)
    p.add_argument("--repo", type=Path, default=config_mod.REPO_ROOT, help="the project checkout")
    p.add_argument(
        "--allow-dirty", action="store_true", help="release from a checkout with uncommitted changes (recorded)"
    )
    p.add_argument(
        "--mirror", type=Path, default=None, help="local mirror directory for git sources and external records"
    )
    p.add_argument("--parallel", type=int, default=2, help="containers for the check suite")
    p.add_argument("--signing", choices=("key", "sigstore"), default=None, help="override the profile's signer")


def release(args: argparse.Namespace) -> int:
    cfg = config_mod.load(args.config)
    rp = plan.resolve(cfg, args.profile, signing_kind=args.signing)
    # A failed release says itself whether its records were installed; the CLI prints the error.
    outcome = release_mod.release(
        cfg,
        rp,
        repo=args.repo,
        allow_dirty=args.allow_dirty,
        mirror=args.mirror,
        parallel=args.parallel,
        command=("python", "-m", "pipeline", "release", *args.argv),
    )
    print(f"released {outcome.image}")
    for path in outcome.records:
        print(f"  wrote {path.relative_to(args.repo.resolve())}")
    print(f"  dataset {outcome.dataset.relative_to(args.repo.resolve())}/")
    print(f"  report {outcome.report}")
    return 0
