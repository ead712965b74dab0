"""`verify`, `checks` (and `checks merge`): the check suite against an image or running servers.

`verify <name@digest>`: anonymous pull (every blob checked), start containers of the
pulled digest and run the whole suite under each engine of `[runtime] verify` (podman, and
the private Docker engine with Docker's defaults; RELEASE_RUNTIME_VERIFY overrides it),
verify the external tasks, write dist/checks.json and print the per-family table.
`checks --url URL`: the suite against servers already running. Both take `--shard I/N`
(run shard I of the plan; a CI matrix runs the N shards) and `checks merge SHARD.json...`
joins the shards into one checks.json and can sign its test-result statement.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from pipeline import config as config_mod
from pipeline import plan
from pipeline.checks import external, run
from pipeline.checks.merge import merge as merge_shards
from pipeline.checks.results import load, write
from pipeline.checks.shards import Shard
from pipeline.checks.suite import run_suite
from pipeline.progress import say
from pipeline.records import attest, signing
from pipeline.sources.references import reference_scripts


def _shard_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--shard",
        type=Shard.parse,
        default=None,
        metavar="I/N",
        help="run only shard I of N of the suite (then `checks merge` the N results)",
    )


def verify_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Pull anonymously, start, run every check, verify externals."
    p.add_argument("image", help="the image to verify, name@sha256:<digest>")
    p.add_argument("--parallel", type=int, default=2, help="containers to run the suite on (default 2)")
    p.add_argument("--out", type=Path, default=run.DEFAULT_OUT, help="check results (default dist/checks.json)")
    p.add_argument("--profile", default="local", help="release profile (decides if external tasks must verify)")
    p.add_argument("--config", type=Path, default=config_mod.DEFAULT_CONFIG)
    p.add_argument(
        "--start-external",
        action="store_true",
        help="also pull and start the external task images and run their repair checks",
    )
    p.add_argument(
        "--vendor-dir",
        type=Path,
        default=config_mod.REPO_ROOT / "vendor",
        help="where the profile's sources are vendored (for the reference repair scripts)",
    )
    _shard_argument(p)


def verify(args: argparse.Namespace) -> int:
    cfg = config_mod.load(args.config)
    rp = plan.resolve(cfg, args.profile, trust=False)  # signs nothing
    policy = rp.external
    references = run.references_of(reference_scripts(cfg, rp.sources, args.vendor_dir)) if args.start_external else None
    result = run.verify_image(
        args.image,
        cfg=cfg,
        parallel=args.parallel,
        start_external=args.start_external,
        shard=args.shard,
        references=references,
    )
    code = run.finish(result, args.out)
    if run.verifies_externals(args.shard):
        external.enforce([external.ExternalResult.from_json(e) for e in result.external], policy)
    return code


def checks_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "The suite against already running servers (`checks --url URL [--url URL ...]`)."
    p.epilog = "`python -m pipeline checks merge --help`: join the results of N shards"
    p.add_argument(
        "--url",
        action="append",
        default=None,
        help="base URL of a running server (repeat for several servers of one image)",
    )
    p.add_argument(
        "--image",
        default=None,
        help="the image the servers run, as recorded (default: the first URL; "
        "shards to be merged must name the same image)",
    )
    _shard_argument(p)
    p.add_argument("--out", type=Path, default=run.DEFAULT_OUT)
    p.add_argument("--app-dir", default=None, help="where the server's code lives (default: release.toml)")
    p.add_argument(
        "--tasks-file", default=None, help="the vendored task file the server uses, if any (absolute, inside --app-dir)"
    )
    p.add_argument("--server-pid", type=int, default=1, help="the server's PID as its shell sees it")
    p.add_argument("--config", type=Path, default=config_mod.DEFAULT_CONFIG)
    merge_p = p.add_subparsers(dest="checks_command", metavar="{merge}").add_parser(
        "merge",
        help="one checks.json from the N shard records of one run",
        description="`checks merge SHARD.json...`: one checks.json from the N shard records of one run.",
    )
    merge_arguments(merge_p)
    merge_p.set_defaults(run=merge)
    p.set_defaults(parser=p)


def checks(args: argparse.Namespace) -> int:
    if not args.url:
        args.parser.error("the following arguments are required: --url")
    cfg = config_mod.load(args.config)
    if args.app_dir:
        cfg = cfg.with_app_dir(args.app_dir)
    env = {run.TASKS_FILE_VARIABLE: args.tasks_file} if args.tasks_file else {}
    targets = [replace(run.target_for(cfg, url, env), server_pid=args.server_pid) for url in args.url]
    return run.finish(
        run_suite(targets, cases=cfg.curriculum.cases, image=args.image or args.url[0], shard=args.shard), args.out
    )


def merge_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("shards", nargs="+", type=Path, help="the checks.json of every shard (any order)")
    p.add_argument("--out", type=Path, default=run.DEFAULT_OUT)
    p.add_argument("--profile", default="local", help="release profile (decides if external tasks must verify)")
    p.add_argument("--config", type=Path, default=config_mod.DEFAULT_CONFIG)
    p.add_argument(
        "--sign",
        choices=("key", "sigstore"),
        default=None,
        help="also sign the test-result statement of the merged results",
    )
    p.add_argument(
        "--attestations", type=Path, default=None, help="where the signed statement goes (default: next to --out)"
    )


def merge(args: argparse.Namespace) -> int:
    cfg = config_mod.load(args.config)
    policy = plan.resolve(cfg, args.profile, trust=False).external
    result = merge_shards([load(path, shard=True) for path in args.shards], cfg.curriculum.cases)
    write(args.out, result)
    if args.sign:
        signed = attest.sign_checks(
            result, args.out, signer=signing.signer_for(args.sign), out_dir=args.attestations or args.out.parent
        )
        say(f"signed test-result statement: {signed}")
    code = run.verdict(result, args.out)
    external.enforce([external.ExternalResult.from_json(e) for e in result.external], policy)
    return code
