"""`setup`, `serve`, `verify`, `checks` (and `checks merge`) and `submission`.

`verify <name@digest>`: anonymous pull (every blob checked), start containers of the
pulled digest and run the whole suite under each engine of `[runtime] verify` (podman, and
the private Docker engine with Docker's defaults; RELEASE_RUNTIME_VERIFY overrides it),
verify the external tasks, write dist/checks.json and print the per-family table.
`checks --url URL`: the suite against servers already running. Both take `--shard I/N`
(run shard I of the plan; a CI matrix runs the N shards) and `checks merge SHARD.json...`
joins the shards into one checks.json and can sign its test-result statement.
`submission`: submission.json from passing results, after the admission preflight passed
on it. `preflight [FILE]`: the platform's admission checks on a request.
"""

from __future__ import annotations

import argparse
import sys
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
from pipeline.records import preflight as preflight_mod
from pipeline.records import submission as submission_mod
from pipeline.registry import local as localregistry
from pipeline.runtime import hosttools
from pipeline.runtime import serve as serve_mod
from pipeline.sources.git import head_commit
from pipeline.sources.references import reference_scripts


def setup_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Install the host tools the release needs."
    p.add_argument("--check", action="store_true", help="only report what is missing")


def setup(args: argparse.Namespace) -> int:
    if args.check:
        missing = hosttools.missing_packages()
        print("missing: " + (" ".join(missing) if missing else "nothing"))
        return 1 if missing else 0
    installed = hosttools.ensure_tools()
    print("setup: " + ("installed " + " ".join(installed) if installed else "all tools present"))
    for step in hosttools.prepare_engine():
        print(f"setup: {step}")
    return 0


def serve_arguments(p: argparse.ArgumentParser) -> None:
    p.description = serve_mod.__doc__.splitlines()[0]
    p.add_argument("--image", help="name@sha256:... to pull from its registry and serve "
                                   "(default: the image of dist/build.json, from its OCI layout)")
    p.add_argument("--record", type=Path, default=config_mod.REPO_ROOT / "dist" / "build.json")
    p.add_argument("--host-mode", action="store_true",
                   help="serve on this host from a root-only copy of env/ (changes the host; it says how)")
    p.add_argument("--tasks", help="host mode: a vendored task file to serve instead of env.families")
    p.add_argument("--port", type=int, default=None,
                   help=f"the port on 127.0.0.1 (default: ${serve_mod.PORT_VARIABLE}, else release.toml's)")
    p.add_argument("--engine", choices=("podman", "docker"), default=None,
                   help="the container engine: podman, or docker (the pipeline's private Docker engine, "
                        "started for this and stopped with it; Docker's defaults). Default: [runtime] engine "
                        "(auto: podman)")
    p.add_argument("--config", type=Path, default=config_mod.DEFAULT_CONFIG)


def serve(args: argparse.Namespace) -> int:
    cfg = config_mod.load(args.config)
    port = serve_mod.serve_port(cfg, args.port)
    if args.host_mode:
        if args.engine:
            raise config_mod.ConfigError("--engine serves the image in a container; --host-mode serves on this host",
                                         expected="one of them", actual="both")
        return serve_mod.serve_host(port, args.tasks, cfg.curriculum)
    if args.image:
        return serve_mod.serve_pulled(args.image, cfg, host_port=port, engine=args.engine)
    return serve_mod.serve_built(args.record, cfg, host_port=port, engine=args.engine)


def _shard_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shard", type=Shard.parse, default=None, metavar="I/N",
                   help="run only shard I of N of the suite (then `checks merge` the N results)")


def verify_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Pull anonymously, start, run every check, verify externals."
    p.add_argument("image", help="the image to verify, name@sha256:<digest>")
    p.add_argument("--parallel", type=int, default=2, help="containers to run the suite on (default 2)")
    p.add_argument("--out", type=Path, default=run.DEFAULT_OUT, help="check results (default dist/checks.json)")
    p.add_argument("--profile", default="local", help="release profile (decides if external tasks must verify)")
    p.add_argument("--config", type=Path, default=config_mod.DEFAULT_CONFIG)
    p.add_argument("--start-external", action="store_true",
                   help="also pull and start the external task images and run their repair checks")
    p.add_argument("--vendor-dir", type=Path, default=config_mod.REPO_ROOT / "vendor",
                   help="where the profile's sources are vendored (for the reference repair scripts)")
    _shard_argument(p)


def verify(args: argparse.Namespace) -> int:
    cfg = config_mod.load(args.config)
    rp = plan.resolve(cfg, args.profile, trust=False)  # signs nothing
    policy = rp.external
    references = (run.references_of(reference_scripts(cfg, rp.sources, args.vendor_dir))
                  if args.start_external else None)
    result = run.verify_image(args.image, cfg=cfg, parallel=args.parallel,
                              start_external=args.start_external, shard=args.shard,
                              references=references)
    code = run.finish(result, args.out)
    if run.verifies_externals(args.shard):
        external.enforce([external.ExternalResult.from_json(e) for e in result.external], policy)
    return code


def checks_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "The suite against already running servers (`checks --url URL [--url URL ...]`)."
    p.epilog = "`python -m pipeline checks merge --help`: join the results of N shards"
    p.add_argument("--url", action="append", default=None,
                   help="base URL of a running server (repeat for several servers of one image)")
    p.add_argument("--image", default=None,
                   help="the image the servers run, as recorded (default: the first URL; "
                        "shards to be merged must name the same image)")
    _shard_argument(p)
    p.add_argument("--out", type=Path, default=run.DEFAULT_OUT)
    p.add_argument("--app-dir", default=None, help="where the server's code lives (default: release.toml)")
    p.add_argument("--tasks-file", default=None,
                   help="the vendored task file the server uses, if any (absolute, inside --app-dir)")
    p.add_argument("--server-pid", type=int, default=1, help="the server's PID as its shell sees it")
    p.add_argument("--config", type=Path, default=config_mod.DEFAULT_CONFIG)
    merge_p = p.add_subparsers(dest="checks_command", metavar="{merge}").add_parser(
        "merge", help="one checks.json from the N shard records of one run",
        description="`checks merge SHARD.json...`: one checks.json from the N shard records of one run.")
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
    return run.finish(run_suite(targets, cases=cfg.curriculum.cases, image=args.image or args.url[0],
                               shard=args.shard), args.out)


def merge_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("shards", nargs="+", type=Path, help="the checks.json of every shard (any order)")
    p.add_argument("--out", type=Path, default=run.DEFAULT_OUT)
    p.add_argument("--profile", default="local", help="release profile (decides if external tasks must verify)")
    p.add_argument("--config", type=Path, default=config_mod.DEFAULT_CONFIG)
    p.add_argument("--sign", choices=("key", "sigstore"), default=None,
                   help="also sign the test-result statement of the merged results")
    p.add_argument("--attestations", type=Path, default=None,
                   help="where the signed statement goes (default: next to --out)")


def merge(args: argparse.Namespace) -> int:
    cfg = config_mod.load(args.config)
    policy = plan.resolve(cfg, args.profile, trust=False).external
    result = merge_shards([load(path, shard=True) for path in args.shards], cfg.curriculum.cases)
    write(args.out, result)
    if args.sign:
        signed = attest.sign_checks(result, args.out, signer=signing.signer_for(args.sign),
                                    out_dir=args.attestations or args.out.parent)
        say(f"signed test-result statement: {signed}")
    code = run.verdict(result, args.out)
    external.enforce([external.ExternalResult.from_json(e) for e in result.external], policy)
    return code


def submission_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Write submission.json from dist/checks.json (refused on any failure)."
    p.add_argument("--checks", type=Path, default=run.DEFAULT_OUT)
    p.add_argument("--profile", default="local")
    p.add_argument("--out", type=Path, default=config_mod.REPO_ROOT / "submission.json")
    p.add_argument("--config", type=Path, default=config_mod.DEFAULT_CONFIG)


def _local_registry() -> str:
    """The running local registry's address ("" when it is not running)."""
    state = localregistry.status()
    return state.address if state is not None else ""


def submission(args: argparse.Namespace) -> int:
    from pipeline import release as release_mod  # the signing libraries load only for this command

    cfg = config_mod.load(args.config)
    checks_result = load(args.checks)
    rp = plan.resolve(cfg, args.profile, trust=False)  # signs nothing
    admitted = release_mod.admitted_request(cfg, rp, checks_result, image=checks_result.image,
                                            source_revision=head_commit(config_mod.REPO_ROOT),
                                            registry=_local_registry())
    submission_mod.write_submission(args.out, admitted.request)
    say(f"wrote {args.out}: {len(admitted.request.tasks)} tasks; release total {admitted.sizes.seed_bytes:,} "
        f"compressed bytes (seed measure), "
        f"{admitted.sizes.platform_bytes if admitted.sizes.platform_bytes is not None else 'unknown'} "
        "(platform measure)")
    return 0


def preflight_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("The platform's admission checks on a request (default submission.json), by their "
                     "names; the image and task checks read the release records beside it.")
    p.add_argument("file", nargs="?", type=Path, default=config_mod.REPO_ROOT / "submission.json",
                   help="the request (default: submission.json)")
    p.add_argument("--records", type=Path, default=None,
                   help="where provenance.json and attestations/checks.json are (default: FILE's directory)")
    p.add_argument("--config", type=Path, default=config_mod.DEFAULT_CONFIG,
                   help="release.toml giving the disk rule's headroom ([admission])")
    p.add_argument("--strict", action="store_true",
                   help="a check that could not run (offline, image not started) fails too")
    p.add_argument("--registry", default=None,
                   help="host:port serving images named without a registry (default: the local "
                        "registry, when it runs)")


def preflight(args: argparse.Namespace) -> int:
    cfg = config_mod.load(args.config)
    data = preflight_mod.read_request(args.file)
    records = (args.records or args.file.resolve().parent).resolve()
    evidence = preflight_mod.evidence_from(records)
    registry = args.registry if args.registry is not None else _local_registry()
    name = data.get("image", "").partition("@")[0] if isinstance(data, dict) and isinstance(data.get("image"), str) \
        else ""
    report = preflight_mod.run(data, evidence=evidence, admission=cfg.admission,
                               resolve=preflight_mod.resolver({name: registry} if registry and name else None))
    print(report.render())
    if not report.ok(strict=args.strict):
        bad = report.failures or report.not_checked
        print(f"preflight: FAILED ({', '.join(dict.fromkeys(o.name for o in bad))})", file=sys.stderr)
        return 1
    if report.not_checked:
        print(f"preflight: passed, but {len(report.not_checked)} check(s) could not run here (not a pass; "
              "--strict fails on them)", file=sys.stderr)
    return 0
