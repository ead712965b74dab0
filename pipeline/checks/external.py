"""Verify the external repair tasks' images: reachable anonymously, complete, right size,
and — started — passing the repair checks.

For each `[[external.tasks]]` entry: the manifest by digest and the config blob are
fetched without credentials, every layer descriptor is checked present (HEAD), the
compressed size is recorded and compared with release.toml. With a `StartPlan` the
image is then pulled anonymously by digest (every blob's digest and size checked),
pulled into the container runtime, started under the external budget (`--cpus 2
--memory 16g`, as the seed ran them) and given the repair checks of `checks.repair`;
the container's writable layer is measured after every grading and its peak recorded.
`check_image` does the same for any image and task (the `repair-checks` command);
`verify_task` is it plus the size release.toml declares. A registry that cannot be
reached makes the task "not verified: <reason>": the local profile carries on and says
so loudly, a profile that requires external tasks (arena) refuses to publish, as it does
for a task whose repair checks did not run, did not all pass, or did not all apply.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pipeline.checks import repair
from pipeline.checks.results import CheckResult
from pipeline.config import ExternalPolicy, ExternalTask
from pipeline.errors import CheckFailure, ReleaseError
from pipeline.image.oci.image import Index, parse, parse_config
from pipeline.imageref import ImageRef
from pipeline.progress import say
from pipeline.registry.client import RegistryClient
from pipeline.registry.pull import pull
from pipeline.runtime.limits import ExternalLimits


@dataclass(frozen=True)
class ExternalResult:
    """What was verified about one external task's image."""

    task_id: str
    image: str
    reason: str = ""
    media_type: str = ""
    config_digest: str = ""
    # The config blob's size as the manifest declares it (0: the manifest was not read).
    config_size: int = 0
    layers: tuple[tuple[str, int], ...] = ()
    schema_equal: bool | None = None
    notes: tuple[str, ...] = field(default=())
    # The repair checks run on the started image (empty: it was not started).
    checks: tuple[CheckResult, ...] = ()
    # The most bytes the container's writable layer held, measured after each grading.
    writable_layer_peak_bytes: int | None = None

    @property
    def verified(self) -> bool:
        return not self.reason

    def outcomes(self) -> dict[str, Any]:
        """Check names by outcome: {"passed": [...], "failed": [...], "not_applicable": {name: reason}}."""
        return {
            "passed": [repair.check_name(c) for c in self.checks if c.passed],
            "failed": [repair.check_name(c) for c in self.checks if c.failed],
            "not_applicable": {repair.check_name(c): c.not_applicable for c in self.checks if c.not_applicable},
        }

    @property
    def fully_checked(self) -> bool:
        """Verified, with repair checks run and every one of them applied (and passed)."""
        return self.verified and bool(self.checks) and not self.outcomes()["not_applicable"]

    @property
    def status(self) -> str:
        return "verified" if self.verified else f"not verified: {self.reason}"

    @property
    def compressed_bytes(self) -> int:
        return sum(size for _, size in self.layers)

    def to_json(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "image": self.image,
            "status": self.status,
            "media_type": self.media_type,
            "config_digest": self.config_digest,
            "config_size": self.config_size,
            "layers": [{"digest": d, "size": s} for d, s in self.layers],
            "compressed_bytes": self.compressed_bytes,
            "layer_count": len(self.layers),
            "schema_equal": self.schema_equal,
            "notes": list(self.notes),
            "checks": [c.to_json() for c in self.checks],
            "writable_layer_peak_bytes": self.writable_layer_peak_bytes,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ExternalResult:
        status = d["status"]
        return cls(
            task_id=d["task_id"],
            image=d["image"],
            reason="" if status == "verified" else status.removeprefix("not verified: "),
            media_type=d.get("media_type", ""),
            config_digest=d.get("config_digest", ""),
            config_size=int(d.get("config_size", 0)),
            layers=tuple((x["digest"], int(x["size"])) for x in d.get("layers", [])),
            schema_equal=d.get("schema_equal"),
            notes=tuple(d.get("notes", ())),
            checks=tuple(CheckResult.from_json(c) for c in d.get("checks", ())),
            writable_layer_peak_bytes=d.get("writable_layer_peak_bytes"),
        )


def registry_facts(image: str, task_id: str, client: RegistryClient | None = None) -> ExternalResult:
    """Manifest and config of `image` fetched anonymously by digest, every layer present."""
    ref = ImageRef.parse(image, registry=True)
    if ref.digest is None:
        raise ReleaseError("external images are checked by digest", expected="name@sha256:<hex>", actual=image)
    client = client or RegistryClient(ref.registry)
    if client.credentials is not None:
        raise ReleaseError(
            "external tasks are verified without credentials", hint="pass a RegistryClient without credentials"
        )
    fetched = client.get_manifest(ref.repository, ref.digest)
    manifest = parse(fetched.raw, fetched.media_type)
    if isinstance(manifest, Index):
        fetched = client.get_manifest(ref.repository, manifest.select().digest)
        manifest = parse(fetched.raw, fetched.media_type)
        if isinstance(manifest, Index):
            raise ReleaseError(
                f"{image}: its index names another index, not an image manifest",
                expected="an image manifest (or an index of them)",
                actual=manifest.media_type,
            )
    config = parse_config(client.get_blob_bytes(ref.repository, manifest.config.digest))
    missing = [d.digest for d in manifest.layers if not client.has_blob(ref.repository, d.digest)]
    layers = tuple((d.digest, d.size) for d in manifest.layers)
    result = ExternalResult(
        task_id=task_id,
        image=image,
        media_type=manifest.media_type,
        config_digest=manifest.config.digest,
        config_size=manifest.config.size,
        layers=layers,
    )
    if len(config.diff_ids) != len(layers):
        return _fail(result, f"config lists {len(config.diff_ids)} layers, manifest {len(layers)}")
    if missing:
        return _fail(result, f"layer blob(s) missing from the registry: {', '.join(missing)}")
    return result


def _fail(result: ExternalResult, reason: str) -> ExternalResult:
    return replace(result, reason=reason)


@dataclass(frozen=True)
class StartPlan:
    """How the external images are started and checked.

    `budget` is `[budgets.external]`'s values: the server must answer within
    reset_wall_s of the start, each call is bounded by the longest of the reset, tool
    and verifier wall times. `limits` is that budget as container limits.
    `references` holds each task's reference repair, or why it has none, by task id.
    """

    runtime: Any
    budget: Mapping[str, int]
    limits: ExternalLimits
    references: Mapping[str, repair.ReferenceRepair | str] = field(default_factory=dict)
    port: int = repair.PORT

    @property
    def call_timeout_s(self) -> float:
        return float(max(self.budget[k] for k in ("reset_wall_s", "tool_wall_s", "verifier_wall_s")))


class _WritableLayer:
    """The peak of a container's writable-layer bytes over the samples taken."""

    def __init__(self, runtime: Any, container: Any) -> None:
        self.runtime, self.container = runtime, container
        self.peak: int | None = None

    def sample(self) -> None:
        size = self.runtime.writable_bytes(self.container)
        self.peak = size if self.peak is None else max(self.peak, size)


def _checks_of_started(
    image: str, task_id: str, plan: StartPlan, client: RegistryClient | None
) -> tuple[list[CheckResult], int | None]:
    with tempfile.TemporaryDirectory(prefix="external-pull-") as tmp:
        pull(image, Path(tmp) / "oci", client=client)
    plan.runtime.pull(image)
    started = time.monotonic()
    container = plan.runtime.run(image, port=plan.port, limits=plan.limits)
    try:
        layer = _WritableLayer(plan.runtime, container)
        checks = repair.run_repair_checks(
            container.url,
            task_id,
            plan.references.get(task_id, repair.NO_REFERENCE),
            started_at=started,
            start_timeout_s=float(max(plan.budget["reset_wall_s"], repair.HEALTH_WITHIN_S)),
            timeout_s=plan.call_timeout_s,
            after_grading=layer.sample,
        )
        return checks, layer.peak
    finally:
        plan.runtime.remove(container)


def _started(result: ExternalResult, start: StartPlan, client: RegistryClient | None) -> ExternalResult:
    """`result` (reachable, complete) with the repair checks of its started image."""
    try:
        checks, peak = _checks_of_started(result.image, result.task_id, start, client)
    except ReleaseError as exc:
        return _fail(result, f"image could not be pulled and started: {exc.one_line()}")
    schema = [c for c in checks if repair.check_name(c) == "schema"]
    result = replace(
        result, checks=tuple(checks), schema_equal=bool(schema) and schema[0].passed, writable_layer_peak_bytes=peak
    )
    failed = [repair.check_name(c) for c in checks if c.failed]
    return _fail(result, f"repair check(s) failed: {', '.join(failed)}") if failed else result


def check_image(image: str, task_id: str, *, start: StartPlan, client: RegistryClient | None = None) -> ExternalResult:
    """Any repair image (`name@sha256:...`) as task `task_id`: reachable anonymously,
    complete, started under `start` and repair-checked (`repair-checks`)."""
    try:
        result = registry_facts(image, task_id, client)
    except ReleaseError as exc:
        return ExternalResult(task_id=task_id, image=image, reason=exc.one_line())
    return _started(result, start, client) if result.verified else result


def verify_task(
    task: ExternalTask, *, client: RegistryClient | None = None, start: StartPlan | None = None
) -> ExternalResult:
    """Verify one external task's image; unreachable registries give a "not verified" result."""
    try:
        result = registry_facts(task.image, task.task_id, client)
    except ReleaseError as exc:
        return ExternalResult(task_id=task.task_id, image=task.image, reason=exc.one_line())
    if result.verified and result.compressed_bytes != task.compressed_bytes:
        result = _fail(
            result,
            f"compressed size {result.compressed_bytes:,} bytes, release.toml declares {task.compressed_bytes:,}",
        )
    if not result.verified:
        return result
    if start is None:
        return replace(result, notes=("image not started: repair checks not run",))
    return _started(result, start, client)


def verify_all(
    tasks: Sequence[ExternalTask], *, client_for: Any = None, start: StartPlan | None = None
) -> list[ExternalResult]:
    """Verify every external task; `client_for(registry)` may supply registry clients."""
    results = []
    for task in tasks:
        client = client_for(ImageRef.parse(task.image, registry=True).registry) if client_for else None
        result = verify_task(task, client=client, start=start)
        size = f"{result.compressed_bytes:,} bytes in {len(result.layers)} layers" if result.layers else ""
        ran = result.outcomes()
        counts = (
            (
                f"; repair checks {len(ran['passed'])} passed, {len(ran['failed'])} failed, "
                f"{len(ran['not_applicable'])} not applicable"
            )
            if result.checks
            else ""
        )
        if result.writable_layer_peak_bytes is not None:
            counts += f"; writable layer peak {result.writable_layer_peak_bytes:,} bytes"
        say(f"  external {task.task_id}: {result.status}{'; ' + size if size else ''}{counts}")
        results.append(result)
    return results


def _why_unverified(result: ExternalResult) -> str:
    if not result.verified:
        return result.status
    if not result.checks:
        return "repair checks not run (image not started)"
    return "repair check(s) not applicable: " + ", ".join(result.outcomes()["not_applicable"])


def enforce(results: Sequence[ExternalResult], policy: ExternalPolicy) -> None:
    """Arena refuses to publish unless every external task is verified with every repair
    check run and passed; local warns loudly. Checks that did not apply are said either way."""
    for r in results:
        for name, reason in r.outcomes()["not_applicable"].items():
            say(f"WARNING: external {r.task_id}: {name} not applicable: {reason}")
    unverified = [r for r in results if not r.fully_checked]
    if not unverified:
        return
    lines = [f"{r.task_id}: {_why_unverified(r)}" for r in unverified]
    if policy.required:
        raise CheckFailure(
            f"profile {policy.profile} requires every external task verified",
            expected="verified",
            actual="; ".join(lines),
            hint="run where the registry is reachable; nothing was published",
        )
    bar = "!" * 72
    say(bar)
    say(
        f"WARNING: {len(unverified)} external task(s) NOT VERIFIED by repair checks "
        f"(profile {policy.profile} carries on):"
    )
    for line in lines:
        say(f"WARNING:   {line}")
    say(bar)
