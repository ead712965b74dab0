"""The suite against an image or running servers: the API `verify` and `checks` call.

`verify_image` pulls an image anonymously (every blob checked), starts containers of
the pulled digest, runs the suite and verifies the external tasks; `target_for` maps a
running server to a check target; `finish` writes and reports the results.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from pipeline import config as config_mod
from pipeline.checks import external, repair, report
from pipeline.checks.results import SuiteResult, write
from pipeline.checks.shards import Shard
from pipeline.checks.suite import run_suite
from pipeline.checks.target import Target
from pipeline.errors import CheckFailure, ConfigError
from pipeline.image.imageconfig import TASKS_FILE_VARIABLE
from pipeline.progress import say
from pipeline.sources.references import ReferenceScript

DEFAULT_OUT = config_mod.REPO_ROOT / "dist" / "checks.json"


def finish(result: SuiteResult, out: Path) -> int:
    write(out, result)
    return verdict(result, out)


def verdict(result: SuiteResult, out: Path) -> int:
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
                 references: Mapping[str, repair.ReferenceRepair | str] | None = None) -> SuiteResult:
    """Anonymous pull, `parallel` containers of the pulled digest, the suite, the externals.

    The files the base leaves under the app dir (read from the pulled layers) are
    handed to the suite for `protected-inherited`. With `start_external`, each reachable
    external image is pulled, started and given the repair checks (`references`: each
    task's reference repair or why it has none, `references_of`); their results
    join the suite's checks as `<task_id>/<check>`. With `shard`, only that shard's jobs
    run, and the external tasks are verified by shard 1 alone (once per sharded run).
    Returns the results (failures included); callers decide what a failure stops.
    """
    from pipeline.image.inherited import inherited_files
    from pipeline.image.oci.image import parse_config
    from pipeline.image.oci.layout import Layout
    from pipeline.registry.pull import pull
    from pipeline.verify.limits import ContainerLimits, ExternalLimits
    from pipeline.verify.runtime import ContainerRuntime

    if parallel < 1:
        raise ConfigError("--parallel must be at least 1", actual=parallel)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="verify-pull-") as tmp:
        pulled = pull(image, Path(tmp) / "oci")
        layout = Layout(Path(tmp) / "oci")
        image_config = parse_config(layout.read_blob(pulled.config_digest))
        layers = [(d.digest, layout.blob_path(d.digest)) for d in pulled.layers]
        inherited = inherited_files(image_config, layers, cfg.app_dir)
    env = image_config.config.env_map()
    runtime = ContainerRuntime(cfg.runtime)
    plan = external.StartPlan(runtime=runtime, budget=cfg.budgets["external"].values,
                              limits=ExternalLimits.from_budgets(cfg.budgets["external"]),
                              references=references or {}) if start_external else None
    # Not started, the external tasks are registry facts only (a network wait, retried while
    # a registry is unreachable): they are read while the suite runs. Started, they follow
    # the suite, whose containers are gone by then.
    externals = _Background(external.verify_all, cfg.external.tasks, start=None) \
        if verifies_externals(shard) and plan is None else None
    runtime.pull(image)
    # The containers run under the procedural budget, and the suite checks it is in force.
    limits = ContainerLimits.from_budgets(cfg.budgets["procedural"])
    containers = []
    try:
        with ThreadPoolExecutor(parallel) as pool:
            containers = list(pool.map(lambda _: runtime.start(image, port=cfg.port, limits=limits),
                                       range(parallel)))
        targets = [replace(target_for(cfg, c.url, env), host_root=runtime.host_root(c),
                           limits=tuple(sorted(limits.expected().items())), inherited=inherited)
                   for c in containers]
        say(f"checks: {len(targets)} container(s) of {image}")
        result = run_suite(targets, cases=cfg.curriculum.cases, image=image, shard=shard)
    finally:
        for c in containers:
            runtime.remove(c)
    if externals is not None:
        verified = externals.result()
    else:
        verified = external.verify_all(cfg.external.tasks, start=plan) if verifies_externals(shard) else []
    return replace(result, checks=result.checks + tuple(c for e in verified for c in e.checks),
                   external=tuple(e.to_json() for e in verified),
                   layers=tuple((d.digest, d.size) for d in pulled.layers),
                   config=(pulled.config_digest, pulled.config_size),
                   seconds=time.monotonic() - started)


class _Background:
    """`function(*args, **kwargs)` in a daemon thread (an interrupted run does not wait for
    it); `result()` waits and returns its value or raises its exception."""

    def __init__(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self._outcome: tuple[bool, Any] | None = None
        self._thread = threading.Thread(target=self._run, args=(function, args, kwargs), daemon=True,
                                        name=getattr(function, "__name__", "background"))
        self._thread.start()

    def _run(self, function: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        try:
            self._outcome = (True, function(*args, **kwargs))
        except BaseException as exc:  # handed to result()
            self._outcome = (False, exc)

    def result(self) -> Any:
        self._thread.join()
        assert self._outcome is not None
        ok, value = self._outcome
        if not ok:
            raise value
        return value


def verifies_externals(shard: Shard | None) -> bool:
    return shard is None or shard.index == 1


def references_of(scripts: Mapping[str, tuple[ReferenceScript | None, str]],
                  ) -> dict[str, repair.ReferenceRepair | str]:
    """Each external task's reference repair for the repair checks, or why it has none.

    The references are the vendored scripts of `references.reference_scripts` (source
    name, vendored path, bytes, each re-verified against its pins); the repair checks send
    a script as one shell action.
    """
    return {task_id: (repair.ReferenceRepair(script.script,
                                             f"{script.source} ({script.path.name}, sha256 {script.sha256})")
                      if script is not None else why)
            for task_id, (script, why) in scripts.items()}


