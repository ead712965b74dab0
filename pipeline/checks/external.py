"""Verify the external repair tasks' images: reachable anonymously, complete, right size,
and — started — passing the repair checks.

For each `[[external.tasks]]` entry: the manifest by digest and the config blob are
fetched without credentials, every layer descriptor is checked present (HEAD), the
compressed size is recorded and compared with release.toml. With a `StartPlan` the
image is then pulled anonymously by digest (every blob's digest and size checked),
pulled into the container runtime, started and given the repair checks of
`checks.repair` under the external budget. A registry that cannot be reached makes
the task "not verified: <reason>": the local profile carries on and says so loudly, a
profile that requires external tasks (arena) refuses to publish, as it does for a
task whose repair checks did not run or did not all pass.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pipeline.config import ExternalPolicy, ExternalTask, RepairConventions
from pipeline.errors import CheckFailure, ReleaseError
from pipeline.image.oci.image import Index, parse, parse_config
from pipeline.registry.client import Reference, RegistryClient
from pipeline.progress import say
from pipeline.registry.pull import pull
from pipeline.checks import repair
from pipeline.checks.results import CheckResult


@dataclass(frozen=True)
class ExternalResult:
    """What was verified about one external task's image."""

    task_id: str
    image: str
    reason: str = ""
    media_type: str = ""
    config_digest: str = ""
    layers: tuple[tuple[str, int], ...] = ()
    schema_equal: bool | None = None
    notes: tuple[str, ...] = field(default=())
    # The repair checks run on the started image (empty: it was not started).
    checks: tuple[CheckResult, ...] = ()

    @property
    def verified(self) -> bool:
        return not self.reason

    def outcomes(self) -> dict[str, Any]:
        """Check names by outcome: {"passed": [...], "failed": [...], "not_applicable": {name: reason}}."""
        return {"passed": [repair.check_name(c) for c in self.checks if c.passed],
                "failed": [repair.check_name(c) for c in self.checks if c.failed],
                "not_applicable": {repair.check_name(c): c.not_applicable
                                   for c in self.checks if c.not_applicable}}

    @property
    def status(self) -> str:
        return "verified" if self.verified else f"not verified: {self.reason}"

    @property
    def compressed_bytes(self) -> int:
        return sum(size for _, size in self.layers)

    def to_json(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "image": self.image, "status": self.status,
                "media_type": self.media_type, "config_digest": self.config_digest,
                "layers": [{"digest": d, "size": s} for d, s in self.layers],
                "compressed_bytes": self.compressed_bytes, "layer_count": len(self.layers),
                "schema_equal": self.schema_equal, "notes": list(self.notes),
                "checks": [c.to_json() for c in self.checks]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ExternalResult":
        status = d["status"]
        return cls(task_id=d["task_id"], image=d["image"],
                   reason="" if status == "verified" else status.removeprefix("not verified: "),
                   media_type=d.get("media_type", ""), config_digest=d.get("config_digest", ""),
                   layers=tuple((x["digest"], int(x["size"])) for x in d.get("layers", [])),
                   schema_equal=d.get("schema_equal"), notes=tuple(d.get("notes", ())),
                   checks=tuple(CheckResult.from_json(c) for c in d.get("checks", ())))


def _registry_facts(task: ExternalTask, client: RegistryClient | None) -> ExternalResult:
    ref = Reference.parse(task.image)
    client = client or RegistryClient(ref.registry)
    if client.credentials is not None:
        raise ReleaseError("external tasks are verified without credentials",
                           hint="pass a RegistryClient without credentials")
    fetched = client.get_manifest(ref.repository, task.digest)
    manifest = parse(fetched.raw, fetched.media_type)
    if isinstance(manifest, Index):
        fetched = client.get_manifest(ref.repository, manifest.select().digest)
        manifest = parse(fetched.raw, fetched.media_type)
    config = parse_config(client.get_blob_bytes(ref.repository, manifest.config.digest))
    missing = [d.digest for d in manifest.layers if not client.has_blob(ref.repository, d.digest)]
    layers = tuple((d.digest, d.size) for d in manifest.layers)
    result = ExternalResult(task_id=task.task_id, image=task.image, media_type=manifest.media_type,
                            config_digest=manifest.config.digest, layers=layers)
    if len(config.diff_ids) != len(layers):
        return _fail(result, f"config lists {len(config.diff_ids)} layers, manifest {len(layers)}")
    if missing:
        return _fail(result, f"layer blob(s) missing from the registry: {', '.join(missing)}")
    if result.compressed_bytes != task.compressed_bytes:
        return _fail(result, f"compressed size {result.compressed_bytes:,} bytes, "
                             f"release.toml declares {task.compressed_bytes:,}")
    return result


def _fail(result: ExternalResult, reason: str) -> ExternalResult:
    return replace(result, reason=reason)


@dataclass(frozen=True)
class StartPlan:
    """How the external images are started and checked (the release's verify stage).

    `budget` is `[budgets.external]`: reset_wall_s bounds the start, each call is
    bounded by the longest of the reset, tool and verifier wall times, an episode by
    tool_calls_total calls.
    `references` holds each task's reference solution (from its pinned record).
    """

    runtime: Any
    port: int
    budget: Mapping[str, int]
    conventions: RepairConventions = RepairConventions()
    references: Mapping[str, repair.ReferenceSolution] = field(default_factory=dict)

    @property
    def call_timeout_s(self) -> float:
        return float(max(self.budget[k] for k in ("reset_wall_s", "tool_wall_s", "verifier_wall_s")))

    def reference(self, task_id: str) -> repair.ReferenceSolution:
        return self.references.get(task_id) or repair.ReferenceSolution(None, "no pinned dataset record")


def _checks_of_started(task: ExternalTask, plan: StartPlan,
                       client: RegistryClient | None) -> list[CheckResult]:
    with tempfile.TemporaryDirectory(prefix="external-pull-") as tmp:
        pull(task.image, Path(tmp) / "oci", client=client)
    plan.runtime.pull(task.image)
    container = plan.runtime.run(task.image, port=plan.port)
    try:
        plan.runtime.wait_healthy(container, timeout=plan.budget["reset_wall_s"])
        return repair.run_repair_checks(container.url, task.task_id, plan.reference(task.task_id),
                                        conventions=plan.conventions, timeout_s=plan.call_timeout_s,
                                        max_calls=plan.budget["tool_calls_total"])
    finally:
        plan.runtime.remove(container)


def verify_task(task: ExternalTask, *, client: RegistryClient | None = None,
                start: StartPlan | None = None) -> ExternalResult:
    """Verify one external task's image; unreachable registries give a "not verified" result."""
    try:
        result = _registry_facts(task, client)
    except ReleaseError as exc:
        return ExternalResult(task_id=task.task_id, image=task.image, reason=exc.one_line())
    if not result.verified:
        return result
    if start is None:
        return replace(result, notes=("image not started: repair checks not run",))
    try:
        checks = tuple(_checks_of_started(task, start, client))
    except ReleaseError as exc:
        return _fail(result, f"image could not be pulled and started: {exc.one_line()}")
    schema = [c for c in checks if repair.check_name(c) == "schema"]
    result = replace(result, checks=checks, schema_equal=bool(schema) and schema[0].passed)
    failed = [repair.check_name(c) for c in checks if c.failed]
    return _fail(result, f"repair check(s) failed: {', '.join(failed)}") if failed else result


def verify_all(tasks: Sequence[ExternalTask], *, client_for: Any = None,
               start: StartPlan | None = None) -> list[ExternalResult]:
    """Verify every external task; `client_for(registry)` may supply registry clients."""
    results = []
    for task in tasks:
        client = client_for(Reference.parse(task.image).registry) if client_for else None
        result = verify_task(task, client=client, start=start)
        size = f"{result.compressed_bytes:,} bytes in {len(result.layers)} layers" if result.layers else ""
        ran = result.outcomes()
        counts = (f"; repair checks {len(ran['passed'])} passed, {len(ran['failed'])} failed, "
                  f"{len(ran['not_applicable'])} not applicable") if result.checks else ""
        say(f"  external {task.task_id}: {result.status}{'; ' + size if size else ''}{counts}")
        results.append(result)
    return results


def enforce(results: Sequence[ExternalResult], policy: ExternalPolicy) -> None:
    """Arena refuses to publish unless every external task is verified with its repair
    checks run and passed; local warns loudly. Checks that did not apply are said either way."""
    for r in results:
        for name, reason in r.outcomes()["not_applicable"].items():
            say(f"WARNING: external {r.task_id}: {name} not applicable: {reason}")
    unverified = [r for r in results if not r.verified or not r.checks]
    if not unverified:
        return
    lines = [f"{r.task_id}: {r.status if not r.verified else 'repair checks not run (image not started)'}"
             for r in unverified]
    if policy.required:
        raise CheckFailure(f"profile {policy.profile} requires every external task verified",
                           expected="verified", actual="; ".join(lines),
                           hint="run where the registry is reachable; nothing was published")
    bar = "!" * 72
    say(bar)
    say(f"WARNING: {len(unverified)} external task(s) NOT VERIFIED by repair checks "
        f"(profile {policy.profile} carries on):")
    for line in lines:
        say(f"WARNING:   {line}")
    say(bar)
