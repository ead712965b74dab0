"""`lock`, `lock-toolchain` and `vendor`: the wheel lock, the pipeline's own lock and the pinned
upstream files."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline import config as config_mod
from pipeline import plan
from pipeline.config import REPO_ROOT
from pipeline.progress import say
from pipeline.sources import dataset, toolchain
from pipeline.sources import lock as runtime_lock
from pipeline.sources import vendor as vendor_mod


def lock_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Regenerate the hash-pinned runtime locks (CPython 3.11 and 3.12)."
    p.add_argument("--in", dest="pins", type=Path, default=runtime_lock.LOCK_IN)
    p.add_argument("--out", type=Path, default=runtime_lock.LOCK)
    p.add_argument(
        "--out-cp312",
        type=Path,
        default=runtime_lock.CP312.lock,
        help="the same runtime for CPython 3.12, the arena base's interpreter",
    )
    p.add_argument("--cache", type=Path, default=runtime_lock.WHEEL_CACHE)


def lock(args: argparse.Namespace) -> int:
    result, size = runtime_lock.generate(args.pins, args.out, args.cache, python=runtime_lock.CP311)
    print(f"{result.path}: {len(result.wheels)} wheels, sha256 {result.sha256}")
    if size is not None:
        print(f"installed size: {size.human()} ({size.bytes} bytes)")
    cp312, _ = runtime_lock.generate(args.pins, args.out_cp312, args.cache, python=runtime_lock.CP312)
    print(f"{cp312.path}: {len(cp312.wheels)} wheels for CPython 3.12, sha256 {cp312.sha256}")
    return 0


def lock_toolchain_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Re-lock the pipeline's toolchain: uv.lock from pyproject.toml's dependency groups "
        "(from the package index), then each group's hash-pinned export locks/<group>.txt."
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="change nothing; fail if uv.lock or an export does not follow from pyproject.toml",
    )


def lock_toolchain(args: argparse.Namespace) -> int:
    if args.check:
        toolchain.check(REPO_ROOT)
        print(f"{toolchain.LOCK_FILE} and {len(toolchain.groups(REPO_ROOT))} group export(s) are current")
    else:
        toolchain.regenerate(REPO_ROOT)
    return 0


def vendor_arguments(p: argparse.ArgumentParser) -> None:
    p.description = vendor_mod.__doc__
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = (
        "External task records in the mirror (see pipeline/sources/dataset.py):\n"
        "    DIR/huggingface.co/datasets/<owner>/<name>/<revision>/<split>/<task_id>.json"
    )
    p.add_argument("--profile", default="local")
    p.add_argument("--config", type=Path, default=config_mod.DEFAULT_CONFIG)
    p.add_argument(
        "--mirror", type=Path, default=None, help="directory of local upstream copies (layout above); no network"
    )
    p.add_argument("--out", type=Path, default=vendor_mod.DEFAULT_OUT)
    p.add_argument("--cache", type=Path, default=vendor_mod.DEFAULT_CACHE, help=argparse.SUPPRESS)


def vendor(args: argparse.Namespace) -> int:
    """Vendor the profile's sources and external task records."""
    cfg = config_mod.load(args.config)
    rp = plan.resolve(cfg, args.profile, trust=False)  # signs nothing
    files = vendor_mod.vendor(rp.sources, args.out, mirror=args.mirror, cache_root=args.cache)
    if not files:
        say(f"profile {rp.profile} vendors no sources")
    records = dataset.fetch_records(cfg, rp.external, args.out, mirror=args.mirror)
    for record in records:
        say(f"external {record.task_id}: {record.status}" + (f" ({record.reason})" if record.reason else ""))
    return 0
