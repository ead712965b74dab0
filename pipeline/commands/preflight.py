"""`preflight [FILE]`: the platform's admission checks on a request (default submission.json)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipeline import config as config_mod
from pipeline.imageref import ImageRef
from pipeline.records import preflight as preflight_mod
from pipeline.registry import local as localregistry


def preflight_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "The platform's admission checks on a request (default submission.json), by their "
        "names; the image and task checks read the release records beside it."
    )
    p.add_argument(
        "file",
        nargs="?",
        type=Path,
        default=config_mod.REPO_ROOT / "submission.json",
        help="the request (default: submission.json)",
    )
    p.add_argument(
        "--records",
        type=Path,
        default=None,
        help="where provenance.json and attestations/checks.json are (default: FILE's directory)",
    )
    p.add_argument(
        "--config",
        type=Path,
        default=config_mod.DEFAULT_CONFIG,
        help="release.toml giving the disk rule's headroom ([admission])",
    )
    p.add_argument(
        "--strict", action="store_true", help="a check that could not run (offline, image not started) fails too"
    )
    p.add_argument(
        "--registry",
        default=None,
        help="host:port serving images named without a registry (default: the local registry, when it runs)",
    )


def preflight(args: argparse.Namespace) -> int:
    cfg = config_mod.load(args.config)
    data = preflight_mod.read_request(args.file)
    records = (args.records or args.file.resolve().parent).resolve()
    evidence = preflight_mod.evidence_from(records)
    registry = args.registry if args.registry is not None else localregistry.running_address()
    image = data.get("image") if isinstance(data, dict) else None
    name = ImageRef.parse(image).name if isinstance(image, str) and ImageRef.is_pinned(image) else ""
    report = preflight_mod.run(
        data,
        evidence=evidence,
        admission=cfg.admission,
        resolve=preflight_mod.resolver({name: registry} if registry and name else None),
    )
    print(report.render())
    if not report.ok(strict=args.strict):
        bad = report.failures or report.not_checked
        print(f"preflight: FAILED ({', '.join(dict.fromkeys(o.name for o in bad))})", file=sys.stderr)
        return 1
    if report.not_checked:
        print(
            f"preflight: passed, but {len(report.not_checked)} check(s) could not run here (not a pass; "
            "--strict fails on them)",
            file=sys.stderr,
        )
    return 0
