"""`diff`: what changed between two releases (records directories or git revisions)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pipeline import config as config_mod
from pipeline import diff as diff_mod


def diff_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "what changed between two releases: cases and tasks, budgets, digests, layers and their "
        "files, packages, sizes, source pins and the toolchain; exit 1 on any difference"
    )
    p.add_argument(
        "old",
        help="a records directory (provenance.json, submission.json, attestations/) "
        "or a git revision of the repository",
    )
    p.add_argument("new", help="the same, for the release compared with OLD")
    p.add_argument("--json", action="store_true", help="print the diff as JSON instead of the table")
    p.add_argument("--allow", action="store_true", help="exit 0 even when the releases differ")
    p.add_argument(
        "--repo",
        type=Path,
        default=config_mod.REPO_ROOT,
        help="the git repository revisions are read from (default: this checkout)",
    )


def diff(args: argparse.Namespace) -> int:
    result = diff_mod.diff(diff_mod.load(args.old, repo=args.repo), diff_mod.load(args.new, repo=args.repo))
    if args.json:
        print(json.dumps(result.to_json(), indent=2, sort_keys=True))
    else:
        print(diff_mod.render_table(result))
    if result.changed and not args.allow:
        print(f"diff: the releases differ ({diff_mod.summary(result)}); --allow accepts that", file=sys.stderr)
        return 1
    return 0
