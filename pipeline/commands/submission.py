"""`submission`: submission.json from passing results, after the admission preflight passed on it."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline import config as config_mod
from pipeline import plan
from pipeline.checks import run
from pipeline.checks.results import load
from pipeline.progress import say
from pipeline.records import submission as submission_mod
from pipeline.registry import local as localregistry
from pipeline.sources.git import head_commit


def submission_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Write submission.json from dist/checks.json (refused on any failure)."
    p.add_argument("--checks", type=Path, default=run.DEFAULT_OUT)
    p.add_argument("--profile", default="local")
    p.add_argument("--out", type=Path, default=config_mod.REPO_ROOT / "submission.json")
    p.add_argument("--config", type=Path, default=config_mod.DEFAULT_CONFIG)


def submission(args: argparse.Namespace) -> int:
    from pipeline import release as release_mod  # the signing libraries load only for this command

    cfg = config_mod.load(args.config)
    checks_result = load(args.checks)
    rp = plan.resolve(cfg, args.profile, trust=False)  # signs nothing
    admitted = release_mod.admitted_request(
        cfg,
        rp,
        checks_result,
        image=checks_result.image,
        source_revision=head_commit(config_mod.REPO_ROOT),
        registry=localregistry.running_address(),
    )
    submission_mod.write_submission(args.out, admitted.request)
    say(
        f"wrote {args.out}: {len(admitted.request.tasks)} tasks; release total {admitted.sizes.seed_bytes:,} "
        f"compressed bytes (seed measure), "
        f"{admitted.sizes.platform_bytes if admitted.sizes.platform_bytes is not None else 'unknown'} "
        "(platform measure)"
    )
    return 0
