"""The suite against an image or running servers: the API `verify` and `checks` call.

`verify_image` pulls an image anonymously (every blob checked), starts containers of
the pulled digest, runs the suite and verifies the external tasks; `target_for` maps a
running server to a check target; `finish` writes and reports the results.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
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
        raise CheckFailure(
            f"{result.counts()['failed']} check(s) failed against {result.image}",
            expected="every check passes",
            actual=", ".join(c.id for c in result.failures[:10]),
            hint=f"observed vs expected for each is in {out}",
        )
    return 0


def target_for(cfg: config_mod.ReleaseConfig, url: str, env: dict[str, str]) -> Target:
    """The layout of the image from its config: a vendored task file is named in its env."""
    vendored = env.get(TASKS_FILE_VARIABLE) or None
    app = cfg.app_dir.rstrip("/") + "/"
    if vendored and not vendored.startswith(app):
        raise ConfigError(f"{TASKS_FILE_VARIABLE} lies outside the app dir", expected=app, actual=vendored)
    relative = vendored[len(app) :] if vendored else None
    if relative:
        return Target(url=url, app_dir=cfg.app_dir, task_module=relative, vendored_file=relative)
    return Target(url=url, app_dir=cfg.app_dir)


def verify_image(
    image: str,
    *,
    cfg: config_mod.ReleaseConfig,
    parallel: int = 2,
    start_external: bool = False,
    shard: Shard | None = None,
    references: Mapping[str, repair.ReferenceRepair | str] | None = None,
    engines: Sequence[str] | None = None,
) -> SuiteResult:
    """Anonymous pull, then under each engine (`engines`, default `[runtime] verify`: podman and
    the private Docker engine) `parallel` containers of the pulled digest and the whole suite;
    then the externals.

    The files the base leaves under the app dir (read from the pulled layers) are
    handed to the suite for `protected-inherited`. The first engine's check ids are the
    suite's own; another engine's carry the suffix `@<engine>` (`image/health@docker`), and
    `runtimes` records each engine (`runtime_record`). What does not depend on the engine is
    done once: the pull and its blob checks, the inherited files, the external tasks. With
    `start_external`, each reachable external image is pulled, started (by the first engine)
    and given the repair checks (`references`: each task's reference repair or why it has
    none, `references_of`); their results join the suite's checks as `<task_id>/<check>`.
    With `shard`, only that shard's jobs run (under every engine), and the external tasks are
    verified by shard 1 alone (once per sharded run). Returns the results (failures
    included); callers decide what a failure stops.
    """
    from pipeline.image.inherited import inherited_files
    from pipeline.image.oci.image import parse_config
    from pipeline.image.oci.layout import Layout
    from pipeline.registry.pull import pull
    from pipeline.runtime import dockerd
    from pipeline.runtime.limits import ExternalLimits
    from pipeline.runtime.runtime import ContainerRuntime

    if parallel < 1:
        raise ConfigError("--parallel must be at least 1", actual=parallel)
    engines = tuple(engines or cfg.runtime.verify_engines())
    started = time.monotonic()
    results: list[SuiteResult] = []
    first_runtime = None
    with tempfile.TemporaryDirectory(prefix="verify-pull-") as tmp, contextlib.ExitStack() as stack:
        pulled = pull(image, Path(tmp) / "oci")
        layout = Layout(Path(tmp) / "oci")
        image_config = parse_config(layout.read_blob(pulled.config_digest))
        layers = [(d.digest, layout.blob_path(d.digest)) for d in pulled.layers]
        inherited = inherited_files(image_config, layers, cfg.app_dir)
        env = image_config.config.env_map()
        # Not started, the external tasks are registry facts only (a network wait, retried while
        # a registry is unreachable): they are read while the suite runs. Started, they follow
        # the suite, whose containers are gone by then.
        externals = (
            _Background(external.verify_all, cfg.external.tasks, start=None)
            if verifies_externals(shard) and not start_external
            else None
        )
        for engine in engines:
            docker = stack.enter_context(dockerd.running()) if engine == "docker" else None
            runtime = ContainerRuntime(cfg.runtime, engine=engine, docker=docker)
            first_runtime = first_runtime or runtime
            suffix = "" if not results else f"@{engine}"
            results.append(
                _suite_under(
                    runtime,
                    image,
                    cfg=cfg,
                    env=env,
                    inherited=inherited,
                    parallel=parallel,
                    shard=shard,
                    suffix=suffix,
                    local=_loader(runtime, layout, pulled, Path(tmp)),
                )
            )
        plan = (
            external.StartPlan(
                runtime=first_runtime,
                budget=cfg.budgets["external"].values,
                limits=ExternalLimits.from_budgets(cfg.budgets["external"]),
                references=references or {},
            )
            if start_external
            else None
        )
        if externals is not None:
            verified = externals.result()
        else:
            verified = external.verify_all(cfg.external.tasks, start=plan) if verifies_externals(shard) else []
    result = results[0]
    return replace(
        result,
        checks=tuple(c for r in results for c in r.checks) + tuple(c for e in verified for c in e.checks),
        targets=tuple(t for r in results for t in r.targets),
        runtimes=tuple(r for part in results for r in part.runtimes),
        external=tuple(e.to_json() for e in verified),
        layers=tuple((d.digest, d.size) for d in pulled.layers),
        config=(pulled.config_digest, pulled.config_size),
        seconds=time.monotonic() - started,
    )


# The isolation modes each engine's server may report (image/isolation-mode): podman's default
# seccomp profile allows user namespaces, so its server must run episodes in them; Docker's
# default profile refuses them, and its server may say either (a later profile may allow them).
ENGINE_ISOLATION = {"podman": ("namespaces",), "docker": ("namespaces", "unprivileged")}


def _loader(runtime: Any, layout: Any, pulled: Any, scratch: Path) -> Callable[[], str] | None:
    """How the image reaches `runtime`'s store when not by its own pull: the private Docker
    engine loads the layout the verification pull wrote (every blob checked against its digest
    there, and the engine's id of the loaded image checked again), since docker pulls nothing
    anonymously from a registry whose API root asks for credentials. None: the engine pulls."""
    if runtime.engine != "docker":
        return None

    def load() -> str:
        from pipeline.image.oci.digest import hex_of

        name = f"localhost/verify/image:sha256-{hex_of(pulled.manifest_digest)}"
        archive = scratch / "image.tar"
        layout.write_archive(pulled.manifest_digest, archive, name=name, docker=True)
        try:
            return runtime.load(archive, name, digests=(pulled.manifest_digest, pulled.config_digest))
        finally:
            archive.unlink(missing_ok=True)

    return load


def _suite_under(
    runtime: Any,
    image: str,
    *,
    cfg: config_mod.ReleaseConfig,
    env: dict[str, str],
    inherited: tuple[str, ...],
    parallel: int,
    shard: Shard | None,
    suffix: str,
    local: Callable[[], str] | None = None,
) -> SuiteResult:
    """The suite against `parallel` containers of `image` under `runtime` (pulled by the engine,
    or brought in by `local`, which returns the engine's name of it), its check ids suffixed
    with `suffix`, its runtime recorded."""
    from pipeline.runtime.limits import ContainerLimits

    name = local() if local is not None else runtime.pull(image)
    # The containers run under the procedural budget, and the suite checks it is in force.
    limits = ContainerLimits.from_budgets(cfg.budgets["procedural"])
    containers = []
    try:
        with ThreadPoolExecutor(parallel) as pool:
            futures = [pool.submit(runtime.start, name, port=cfg.port, limits=limits) for _ in range(parallel)]
        containers = [f.result() for f in futures if f.exception() is None]
        for f in futures:
            f.result()  # the first that failed, once the others are in `containers` (removed below)
        targets = [
            replace(
                target_for(cfg, c.url, env),
                host_root=runtime.host_root(c),
                limits=tuple(sorted(limits.expected().items())),
                inherited=inherited,
                isolation=ENGINE_ISOLATION.get(runtime.engine, ENGINE_ISOLATION["docker"]),
            )
            for c in containers
        ]
        say(f"checks: {len(targets)} container(s) of {image} under {runtime.engine}")
        security = runtime.security(containers[0])
        result = run_suite(targets, cases=cfg.curriculum.cases, image=image, shard=shard)
    finally:
        for c in containers:
            runtime.remove(c)
        if local is not None:
            # What the run loaded goes with it: the engine's data root would grow by an image
            # (its layers unpacked) with every release.
            runtime.remove_image(name)
    checks = tuple(replace(c, id=c.id + suffix) for c in result.checks)
    record = runtime_record(runtime.engine_info(), security, result, suffix=suffix, containers=len(targets))
    return replace(result, checks=checks, runtimes=(record,))


def runtime_record(
    engine: Mapping[str, Any], security: Mapping[str, Any], result: SuiteResult, *, suffix: str, containers: int
) -> dict[str, Any]:
    """What checks.json says of one runtime: the engine (`ContainerRuntime.engine_info`), the
    security its containers ran with (`ContainerRuntime.security`), the isolation mode its
    server reported (image/isolation-mode's detail; null if it named none) and its checks' counts."""
    mode = next(
        (
            c.detail.partition(": ")[2]
            for c in result.checks
            if c.id == "image/isolation-mode" and c.detail.startswith("isolation: ")
        ),
        None,
    )
    return {
        "name": str(engine.get("engine")),
        "suffix": suffix,
        "engine": dict(engine),
        "container_security": dict(security),
        "isolation": mode,
        "containers": containers,
        "summary": result.counts(),
    }


class _Background:
    """`function(*args, **kwargs)` in a daemon thread (an interrupted run does not wait for
    it); `result()` waits and returns its value or raises its exception."""

    def __init__(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self._outcome: tuple[bool, Any] | None = None
        self._thread = threading.Thread(
            target=self._run,
            args=(function, args, kwargs),
            daemon=True,
            name=getattr(function, "__name__", "background"),
        )
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


def references_of(
    scripts: Mapping[str, tuple[ReferenceScript | None, str]],
) -> dict[str, repair.ReferenceRepair | str]:
    """Each external task's reference repair for the repair checks, or why it has none.

    The references are the vendored scripts of `references.reference_scripts` (source
    name, vendored path, bytes, each re-verified against its pins); the repair checks send
    a script as one shell action.
    """
    return {
        task_id: (
            repair.ReferenceRepair(script.script, f"{script.source} ({script.path.name}, sha256 {script.sha256})")
            if script is not None
            else why
        )
        for task_id, (script, why) in scripts.items()
    }
