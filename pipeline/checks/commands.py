"""CLI commands of the verify and submission stages.

`python -m pipeline verify <name@digest>`: anonymous pull (every blob checked), start
containers of the pulled digest, run the whole suite, verify the external tasks, write
dist/checks.json and print the per-family table.
`python -m pipeline checks --url URL`: the suite against servers already running.
`python -m pipeline submission`: submission.json from passing check results.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from .. import config as config_mod
from ..errors import CheckFailure, ConfigError
from ..progress import say
from . import external, report
from .results import SuiteResult, load, write
from .suite import run_suite
from .target import Target

DEFAULT_OUT = config_mod.REPO_ROOT / "dist" / "checks.json"
TASKS_FILE_VARIABLE = "ARENA_TASKS_FILE"


def _finish(result: SuiteResult, out: Path) -> int:
    write(out, result)
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
                 start_external: bool = False) -> SuiteResult:
    """Anonymous pull, `parallel` containers of the pulled digest, the suite, the externals.

    Returns the results (failures included); callers decide what a failure stops.
    """
    from ..oci.image import parse_config
    from ..oci.layout import Layout
    from ..pull import pull
    from ..limits import ContainerLimits
    from ..runtime import ContainerRuntime

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
        result = run_suite(targets, image=image)
    finally:
        for c in containers:
            runtime.remove(c)
    externals = external.verify_all(cfg.external.tasks, runtime=runtime if start_external else None)
    return replace(result, external=tuple(e.to_json() for e in externals),
                   layers=tuple((d.digest, d.size) for d in pulled.layers),
                   seconds=time.monotonic() - started)


def verify_main(argv: list[str]) -> int:
    """`verify <name@digest>`: pull anonymously, start, run every check, verify externals."""
    p = argparse.ArgumentParser(prog="python -m pipeline verify", description=verify_main.__doc__)
    p.add_argument("image", help="the image to verify, name@sha256:<digest>")
    p.add_argument("--parallel", type=int, default=2, help="containers to run the suite on (default 2)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="check results (default dist/checks.json)")
    p.add_argument("--profile", default="local", help="release profile (decides if external tasks must verify)")
    p.add_argument("--config", type=Path, default=config_mod.DEFAULT_CONFIG)
    p.add_argument("--start-external", action="store_true",
                   help="also pull and start the external task images to compare their schema")
    args = p.parse_args(argv)
    cfg = config_mod.load(args.config)
    profile = cfg.profile(args.profile)
    result = verify_image(args.image, cfg=cfg, parallel=args.parallel, start_external=args.start_external)
    code = _finish(result, args.out)
    external.enforce([external.ExternalResult.from_json(e) for e in result.external], profile)
    return code


def checks_main(argv: list[str]) -> int:
    """`checks --url URL [--url URL ...]`: the suite against already running servers."""
    p = argparse.ArgumentParser(prog="python -m pipeline checks", description=checks_main.__doc__)
    p.add_argument("--url", action="append", required=True,
                   help="base URL of a running server (repeat for several servers of one image)")
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
    return _finish(run_suite(targets, image=args.url[0]), args.out)


def submission_main(argv: list[str]) -> int:
    """`submission`: write submission.json from dist/checks.json (refused on any failure)."""
    from .. import submission
    from ..git import head_commit

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
