"""Verify the external repair tasks' images: reachable anonymously, complete, right size.

For each `[[external.tasks]]` entry: the manifest by digest and the config blob are
fetched without credentials, every layer descriptor is checked present (HEAD), the
compressed size is recorded and compared with release.toml, and — when a container
runtime is given — the image is started and its `/schema` compared with the release
schema. A registry that cannot be reached makes the task "not verified: <reason>":
the local profile carries on and says so loudly, a profile that requires external
tasks (arena) refuses to publish.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..config import ExternalTask, Profile
from ..errors import CheckFailure, ReleaseError
from ..oci.image import Index, parse, parse_config
from ..oci.registry import Reference, RegistryClient
from ..progress import say
from . import schema as release_schema
from .client import http_get


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

    @property
    def verified(self) -> bool:
        return not self.reason

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
                "schema_equal": self.schema_equal, "notes": list(self.notes)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ExternalResult":
        status = d["status"]
        return cls(task_id=d["task_id"], image=d["image"],
                   reason="" if status == "verified" else status.removeprefix("not verified: "),
                   media_type=d.get("media_type", ""), config_digest=d.get("config_digest", ""),
                   layers=tuple((x["digest"], int(x["size"])) for x in d.get("layers", [])),
                   schema_equal=d.get("schema_equal"), notes=tuple(d.get("notes", ())))


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


def _schema_of_started(task: ExternalTask, runtime: Any) -> bool:
    runtime.pull(task.image)
    container = runtime.start(task.image)
    try:
        status, body = http_get(container.url, "/schema")
    finally:
        runtime.remove(container)
    served = release_schema.normalized(body) if status == 200 and isinstance(body, dict) else None
    return served == release_schema.normalized(release_schema.declared())


def verify_task(task: ExternalTask, *, client: RegistryClient | None = None,
                runtime: Any = None) -> ExternalResult:
    """Verify one external task's image; unreachable registries give a "not verified" result."""
    try:
        result = _registry_facts(task, client)
    except ReleaseError as exc:
        return ExternalResult(task_id=task.task_id, image=task.image, reason=exc.one_line())
    if not result.verified:
        return result
    if runtime is None:
        return replace(result, notes=("image not started: schema equality not checked",))
    try:
        equal = _schema_of_started(task, runtime)
    except ReleaseError as exc:
        return _fail(result, f"image could not be started: {exc.one_line()}")
    result = replace(result, schema_equal=equal)
    return result if equal else _fail(result, "its /schema differs from the release schema")


def verify_all(tasks: Sequence[ExternalTask], *, client_for: Any = None,
               runtime: Any = None) -> list[ExternalResult]:
    """Verify every external task; `client_for(registry)` may supply registry clients."""
    results = []
    for task in tasks:
        client = client_for(Reference.parse(task.image).registry) if client_for else None
        result = verify_task(task, client=client, runtime=runtime)
        size = f"{result.compressed_bytes:,} bytes in {len(result.layers)} layers" if result.layers else ""
        say(f"  external {task.task_id}: {result.status}{'; ' + size if size else ''}")
        results.append(result)
    return results


def enforce(results: Sequence[ExternalResult], profile: Profile) -> None:
    """Arena refuses to publish with an unverified external task; local warns loudly."""
    unverified = [r for r in results if not r.verified]
    if not unverified:
        return
    lines = [f"{r.task_id}: {r.status}" for r in unverified]
    if profile.external_tasks_required:
        raise CheckFailure(f"profile {profile.name} requires every external task verified",
                           expected="verified", actual="; ".join(lines),
                           hint="run where the registry is reachable; nothing was published")
    bar = "!" * 72
    say(bar)
    say(f"WARNING: {len(unverified)} external task(s) NOT VERIFIED (profile {profile.name} carries on):")
    for line in lines:
        say(f"WARNING:   {line}")
    say(bar)
