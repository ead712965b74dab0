"""CLI commands of the verify and submission stages.

`python -m pipeline verify <name@digest>`: anonymous pull (every blob checked), start
containers of the pulled digest, run the whole suite, verify the external tasks, write
dist/checks.json and print the per-family table.
`python -m pipeline checks --url URL`: the suite against servers already running.
Both take `--shard I/N` (run shard I of the plan; a CI matrix runs the N shards) and
`python -m pipeline checks merge SHARD.json...` joins the shards into one checks.json
and can sign its test-result statement.
`python -m pipeline submission`: submission.json from passing check results.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from pipeline import config as config_mod
from pipeline.sources import dataset as records_mod
from pipeline.errors import CheckFailure, ConfigError
from pipeline._io import sha256_file, write_atomic
from pipeline.progress import say
from pipeline.checks import external, repair, report
from pipeline.checks.merge import merge
from pipeline.checks.results import SuiteResult, load, write
from pipeline.checks.shards import Shard
from pipeline.checks.suite import run_suite
from pipeline.checks.target import Target

DEFAULT_OUT = config_mod.REPO_ROOT / "dist" / "checks.json"
TASKS_FILE_VARIABLE = "ARENA_TASKS_FILE"


def _finish(result: SuiteResult, out: Path) -> int:
    write(out, result)
    return _verdict(result, out)


def _verdict(result: SuiteResult, out: Path) -> int:
    """Print the summary of results written to `out`; raise if any check failed."""
    print(report.summary(result))
    print(f"results: {out}")
    if not result.ok:
        raise CheckFailure(f"{result.counts()['failed']} check(s) failed against {result.image}",
                           expected="every check passes", actual=", ".join(c.id for c in result.failures[:10]),
                           hint=f"observed vs expected for each is in {out}")
    return 0


def target_for(cfg: config_mod.ReleaseConfig, url: str, env: dict[str, str]) -> Target:
    """The layout of the image from its config: a vendored task file is named in its env."""
    vendored = env.get(TASKS_FILE_VARIABLE) or None
    app = cfg.app_dir.rstrip("/") + "/"
    if vendored and not vendored.startswith(app):
        raise ConfigError(f"{TASKS_FILE_VARIABLE} lies outside the app dir", expected=app, actual=vendored)
    relative = vendored[len(app):] if vendored else None
    if relative:
        return Target(url=url, app_dir=cfg.app_dir, task_module=relative, vendored_file=relative)
    return Target(url=url, app_dir=cfg.app_dir)


def verify_image(image: str, *, cfg: config_mod.ReleaseConfig, parallel: int = 2,
                 start_external: bool = False, shard: Shard | None = None,
                 references: Mapping[str, repair.ReferenceSolution] | None = None) -> SuiteResult:
    """Anonymous pull, `parallel` containers of the pulled digest, the suite, the externals.

    With `start_external`, each reachable external image is pulled, started and given
    the repair checks (`references`: each task's reference solution); their results
    join the suite's checks as `<task_id>/<check>`. With `shard`, only that shard's jobs
    run, and the external tasks are verified by shard 1 alone (once per sharded run).
    Returns the results (failures included); callers decide what a failure stops.
    """
    from pipeline.image.oci.image import parse_config
    from pipeline.image.oci.layout import Layout
    from pipeline.registry.pull import pull
    from pipeline.verify.limits import ContainerLimits
    from pipeline.verify.runtime import ContainerRuntime

    if parallel < 1:
        raise ConfigError("--parallel must be at least 1", actual=parallel)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="verify-pull-") as tmp:
        pulled = pull(image, Path(tmp) / "oci")
        image_config = parse_config(Layout(Path(tmp) / "oci").read_blob(pulled.config_digest))
    env = image_config.config.env_map()
    runtime = ContainerRuntime(cfg.runtime)
    runtime.pull(image)
    # The containers run under the procedural budget, and the suite checks it is in force.
    limits = ContainerLimits.from_budgets(cfg.budgets["procedural"])
    containers = []
    try:
        with ThreadPoolExecutor(parallel) as pool:
            containers = list(pool.map(lambda _: runtime.start(image, port=cfg.port, limits=limits),
                                       range(parallel)))
        targets = [replace(target_for(cfg, c.url, env), host_root=runtime.host_root(c),
                           limits=tuple(sorted(limits.expected().items()))) for c in containers]
        say(f"checks: {len(targets)} container(s) of {image}")
        result = run_suite(targets, image=image, shard=shard)
    finally:
        for c in containers:
            runtime.remove(c)
    plan = external.StartPlan(runtime=runtime, port=cfg.port, budget=cfg.budgets["external"].values,
                              conventions=cfg.external.repair,
                              references=references or {}) if start_external else None
    externals = external.verify_all(cfg.external.tasks, start=plan) if _verifies_externals(shard) else []
    return replace(result, checks=result.checks + tuple(c for e in externals for c in e.checks),
                   external=tuple(e.to_json() for e in externals),
                   layers=tuple((d.digest, d.size) for d in pulled.layers),
                   seconds=time.monotonic() - started)


def _verifies_externals(shard: Shard | None) -> bool:
    return shard is None or shard.index == 1


def _shard_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shard", type=Shard.parse, default=None, metavar="I/N",
                   help="run only shard I of N of the suite (then `checks merge` the N results)")


def references_of(cfg: config_mod.ReleaseConfig,
                  rows: Mapping[str, tuple[dict[str, Any] | None, str]]) -> dict[str, repair.ReferenceSolution]:
    """Each external task's reference solution from `rows`: task id -> (row, why none)."""
    return {task_id: repair.ReferenceSolution.from_record(row, cfg.external.repair, why)
            for task_id, (row, why) in rows.items()}


def verify_main(argv: list[str]) -> int:
    """`verify <name@digest>`: pull anonymously, start, run every check, verify externals."""
    p = argparse.ArgumentParser(prog="python -m pipeline verify", description=verify_main.__doc__)
    p.add_argument("image", help="the image to verify, name@sha256:<digest>")
    p.add_argument("--parallel", type=int, default=2, help="containers to run the suite on (default 2)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="check results (default dist/checks.json)")
    p.add_argument("--profile", default="local", help="release profile (decides if external tasks must verify)")
    p.add_argument("--config", type=Path, default=config_mod.DEFAULT_CONFIG)
    p.add_argument("--start-external", action="store_true",
                   help="also pull and start the external task images and run their repair checks")
    p.add_argument("--vendor-dir", type=Path, default=config_mod.REPO_ROOT / "vendor",
                   help="where the pinned external records are (for the reference solutions)")
    _shard_arg(p)
    args = p.parse_args(argv)
    cfg = config_mod.load(args.config)
    profile = cfg.profile(args.profile)
    references = (references_of(cfg, records_mod.stored_rows(cfg, args.vendor_dir))
                  if args.start_external else None)
    result = verify_image(args.image, cfg=cfg, parallel=args.parallel, start_external=args.start_external,
                          shard=args.shard, references=references)
    code = _finish(result, args.out)
    if _verifies_externals(args.shard):
        external.enforce([external.ExternalResult.from_json(e) for e in result.external], profile)
    return code


def checks_main(argv: list[str]) -> int:
    """`checks --url URL [--url URL ...]`: the suite against already running servers."""
    if argv[:1] == ["merge"]:
        return merge_main(argv[1:])
    p = argparse.ArgumentParser(prog="python -m pipeline checks", description=checks_main.__doc__,
                                epilog="`python -m pipeline checks merge --help`: join the results of N shards")
    p.add_argument("--url", action="append", required=True,
                   help="base URL of a running server (repeat for several servers of one image)")
    p.add_argument("--image", default=None,
                   help="the image the servers run, as recorded (default: the first URL; "
                        "shards to be merged must name the same image)")
    _shard_arg(p)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--app-dir", default=None, help="where the server's code lives (default: release.toml)")
    p.add_argument("--tasks-file", default=None,
                   help="the vendored task file the server uses, if any (absolute, inside --app-dir)")
    p.add_argument("--server-pid", type=int, default=1, help="the server's PID as its shell sees it")
    p.add_argument("--config", type=Path, default=config_mod.DEFAULT_CONFIG)
    args = p.parse_args(argv)
    cfg = config_mod.load(args.config)
    if args.app_dir:
        cfg = replace(cfg, app_dir=args.app_dir)
    env = {TASKS_FILE_VARIABLE: args.tasks_file} if args.tasks_file else {}
    targets = [replace(target_for(cfg, url, env), server_pid=args.server_pid) for url in args.url]
    return _finish(run_suite(targets, image=args.image or args.url[0], shard=args.shard), args.out)


def sign_checks(result: SuiteResult, checks_file: Path, *, kind: str, out_dir: Path) -> Path:
    """Sign the in-toto test-result statement of `checks_file` into `out_dir`.

    The same statement the release signs (subject: the image digest; predicate: the
    verdicts and the sha256 of checks.json), signed by the key or sigstore signer; the
    signer's public key or identity is published next to it.
    """
    from pipeline.records import attest, signing

    signer = signing.signer_for(kind)
    stmt = attest.statement(attest.Subject.from_image_ref(result.image), attest.TEST_RESULT,
                            attest.checks_predicate(result, checks_sha256=sha256_file(checks_file)))
    path = attest.attestation_path(out_dir, "checks", signer.suffix)
    write_atomic(path, signer.sign(stmt))
    signer.publish(out_dir)
    return path


def merge_main(argv: list[str]) -> int:
    """`checks merge SHARD.json...`: one checks.json from the N shard records of one run."""
    p = argparse.ArgumentParser(prog="python -m pipeline checks merge", description=merge_main.__doc__)
    p.add_argument("shards", nargs="+", type=Path, help="the checks.json of every shard (any order)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--profile", default="local", help="release profile (decides if external tasks must verify)")
    p.add_argument("--config", type=Path, default=config_mod.DEFAULT_CONFIG)
    p.add_argument("--sign", choices=("key", "sigstore"), default=None,
                   help="also sign the test-result statement of the merged results")
    p.add_argument("--attestations", type=Path, default=None,
                   help="where the signed statement goes (default: next to --out)")
    args = p.parse_args(argv)
    profile = config_mod.load(args.config).profile(args.profile)
    result = merge([load(path, shard=True) for path in args.shards])
    write(args.out, result)
    if args.sign:
        signed = sign_checks(result, args.out, kind=args.sign, out_dir=args.attestations or args.out.parent)
        say(f"signed test-result statement: {signed}")
    code = _verdict(result, args.out)
    external.enforce([external.ExternalResult.from_json(e) for e in result.external], profile)
    return code


def submission_main(argv: list[str]) -> int:
    """`submission`: write submission.json from dist/checks.json (refused on any failure)."""
    from pipeline.records import submission
    from pipeline.sources.git import head_commit

    p = argparse.ArgumentParser(prog="python -m pipeline submission", description=submission_main.__doc__)
    p.add_argument("--checks", type=Path, default=DEFAULT_OUT)
    p.add_argument("--profile", default="local")
    p.add_argument("--out", type=Path, default=config_mod.REPO_ROOT / "submission.json")
    p.add_argument("--config", type=Path, default=config_mod.DEFAULT_CONFIG)
    args = p.parse_args(argv)
    cfg = config_mod.load(args.config)
    checks = load(args.checks)
    sub = submission.build(cfg, cfg.profile(args.profile), checks, image=checks.image,
                           source_revision=head_commit(config_mod.REPO_ROOT))
    submission.write_submission(args.out, sub)
    say(f"wrote {args.out}: {len(sub.tasks)} tasks, release total {sub.total_compressed_bytes:,} compressed bytes")
    return 0
