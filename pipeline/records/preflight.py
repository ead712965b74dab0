"""The platform's admission checks, run locally on a request (`python -m pipeline preflight`).

Each check has the platform's name (docs/spec/mimo.md, "The Arena request and admission"):

    image_resolved            per image: its manifest, fetched anonymously by digest, hashes to it
    image_sizes               every image has both sizes, read from its registry manifest
    sandbox_disk              the disk rule the platform enforced with HTTP 422
                              ENVIRONMENT_TOO_LARGE_FOR_SANDBOX: for every task, the compressed
                              image + `workspace_gib` + the headroom fit the sandbox disk
                              (release.toml [admission])
    typed_contract            the request validates against request.schema.json
    unique_tasks              no task id twice
    training_tasks            every task in a training split ("train")
    openenv_schema            one action/observation schema: the request's is the release
                              schema, and every image served exactly it
    pinned_openenv_endpoint   per task: its image passed `openenv validate --url`
    native_schema             per task: its image served the request's schema
    native_episode            per task: its episodes passed their checks

The checks about images and tasks read the evidence a release recorded (its check results,
its per-task verification and sizes: attestations/checks.json and provenance.json beside
the request). Each check passes, fails, or is "not checked" with the reason: an image
whose registry cannot be reached (ghcr.io from an offline machine), an external image that
was not started. Not checked is never a pass: the report says so, and a strict run (the
arena profile's release) fails on it. The local profile's release carries on past what it
cannot check offline, as it does for the external tasks, and says so loudly.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.checks import schema as release_schema
from pipeline.checks.external import ExternalResult
from pipeline.checks.results import SuiteResult
from pipeline.config import Admission
from pipeline.errors import CheckFailure, ConfigError, ReleaseError, VerificationError
from pipeline.imageref import ImageRef
from pipeline.records import submission
from pipeline.records.sizes import ImageSize, Sizes
from pipeline.records.verification import EXTERNAL, TaskRecord
from pipeline.registry.client import RegistryClient, RegistryUnavailable

PASS, FAIL, NOT_CHECKED = "pass", "fail", "not checked"
GIB = 1 << 30
TRAINING_SPLITS = ("train",)
REQUEST_CHECKS = (
    "image_resolved",
    "image_sizes",
    "sandbox_disk",
    "typed_contract",
    "unique_tasks",
    "training_tasks",
    "openenv_schema",
)
TASK_CHECKS = ("pinned_openenv_endpoint", "native_schema", "native_episode")
# The checks of the suite that stand for the platform's per-task ones.
PROCEDURAL_ENDPOINT_CHECK = "image/openenv-validate"
PROCEDURAL_SCHEMA_CHECK = "image/schema"
EXTERNAL_ENDPOINT_CHECK = "openenv_endpoint_validation"


@dataclass(frozen=True)
class Outcome:
    """One admission check: its name, what it is about (an image, a task, or the request),
    pass / fail / not checked, and why."""

    name: str
    subject: str
    status: str
    detail: str = ""

    def line(self) -> str:
        about = f" {self.subject}" if self.subject else ""
        return f"{self.status.upper():11}  {self.name}{about}" + (f": {self.detail}" if self.detail else "")


@dataclass(frozen=True)
class Evidence:
    """What a release recorded about the request's images and tasks (None: not available)."""

    checks: SuiteResult | None = None
    tasks: tuple[TaskRecord, ...] = ()
    sizes: Sizes | None = None


@dataclass(frozen=True)
class Report:
    outcomes: tuple[Outcome, ...]

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == FAIL]

    @property
    def not_checked(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == NOT_CHECKED]

    def ok(self, *, strict: bool) -> bool:
        return not self.failures and not (strict and self.not_checked)

    def summary(self) -> str:
        passed = sum(o.status == PASS for o in self.outcomes)
        return (
            f"PREFLIGHT {'PASSED' if not self.failures else 'FAILED'}: {passed} passed, "
            f"{len(self.failures)} failed, {len(self.not_checked)} not checked"
        )

    def render(self) -> str:
        """The summary, then every check that did not pass, then one line per passed check name."""
        lines = [self.summary()]
        lines += [o.line() for o in self.outcomes if o.status != PASS]
        names: dict[str, int] = {}
        for o in self.outcomes:
            if o.status == PASS:
                names[o.name] = names.get(o.name, 0) + 1
        lines += [f"{'PASS':11}  {name}" + (f" ({count}x)" if count > 1 else "") for name, count in names.items()]
        return "\n".join(lines)

    def enforce(self, *, strict: bool) -> None:
        """CheckFailure naming the first failing check (or, when strict, the first not checked)."""
        bad = self.failures or (self.not_checked if strict else [])
        if bad:
            first = bad[0]
            raise CheckFailure(
                f"admission preflight: {first.name}{' ' + first.subject if first.subject else ''} "
                f"{'failed' if first.status == FAIL else 'could not be checked'}: {first.detail}",
                expected="every admission check passes",
                actual=f"{len(self.failures)} failed, {len(self.not_checked)} not checked",
                hint="submission.json is not written; `python -m pipeline preflight` lists every check",
            )


# A resolver fetches an image's manifest anonymously by digest: None when it resolved, or
# raises (RegistryUnavailable: not checked; any other ReleaseError: failed).
Resolver = Callable[[str], None]


def resolver(registries: dict[str, str] | None = None) -> Resolver:
    """Anonymous resolution by digest; `registries` maps an image name without a registry host
    (the local profile's) to the host:port that serves it (a name with its host is resolved there)."""

    def resolve(image: str) -> None:
        ref = ImageRef.parse(image, pinned=True)
        if not ref.registry and (registries or {}).get(ref.repository):
            ref = ref.in_registry((registries or {})[ref.repository])
        ref = ImageRef.parse(str(ref), registry=True)  # a name no registry serves stops here
        RegistryClient(ref.registry, attempts=1).get_manifest(ref.repository, str(ref.digest))

    return resolve


def _hostless(image: str) -> bool:
    """Whether `image` is a well-formed reference that names no registry host."""
    try:
        return not ImageRef.parse(image).registry
    except ConfigError:
        return False


def _digest_of(image: str) -> str | None:
    """The digest `image` is pinned by; None when it is not a pinned reference."""
    return ImageRef.parse(image).digest if ImageRef.is_pinned(image) else None


def _resolved(image: str, resolve: Resolver) -> Outcome:
    try:
        resolve(image)
    except RegistryUnavailable as exc:
        return Outcome("image_resolved", image, NOT_CHECKED, f"registry not reachable: {exc.one_line()}")
    except ReleaseError as exc:
        if isinstance(exc, ConfigError) and _hostless(image):
            # The local profile names its image without the loopback registry's address.
            return Outcome(
                "image_resolved",
                image,
                NOT_CHECKED,
                "the name has no registry host (a local-profile image: its registry is not running)",
            )
        return Outcome("image_resolved", image, FAIL, exc.one_line())
    return Outcome("image_resolved", image, PASS)


def _size_of(image: str | None, sizes: Sizes | None) -> ImageSize | None:
    return next((s for s in sizes.images if s.image == image), None) if sizes else None


def _image_sizes(images: Sequence[str], sizes: Sizes | None) -> Outcome:
    if sizes is None:
        return Outcome("image_sizes", "", NOT_CHECKED, "no sizes recorded (provenance.json)")
    found = [(i, _size_of(i, sizes)) for i in images]
    missing = [i for i, size in found if size is None]
    if missing:
        return Outcome("image_sizes", "", FAIL, f"no size recorded for {', '.join(missing)}")
    unmeasured = [i for i, size in found if size is not None and not size.measured]
    if unmeasured:
        return Outcome(
            "image_sizes",
            "",
            NOT_CHECKED,
            f"manifest not read for {', '.join(unmeasured)} (only the size release.toml declares)",
        )
    return Outcome("image_sizes", "", PASS)


def _disk(tasks: Sequence[dict[str, Any]], sizes: Sizes | None, admission: Admission) -> Outcome:
    over, unknown = [], []
    for task in tasks:
        size = _size_of(task.get("image"), sizes)
        workspace = task.get("workspace_gib")
        if size is None or not isinstance(workspace, (int, float)):
            unknown.append(str(task.get("task_id")))
            continue
        image_gib = (size.platform_bytes if size.platform_bytes is not None else size.seed_bytes) / GIB
        needed = image_gib + workspace + admission.headroom_gib
        if needed > admission.sandbox_disk_gib:
            over.append(
                f"{task.get('task_id')} (image {image_gib:.2f} + workspace {workspace:g} + headroom "
                f"{admission.headroom_gib:g} = {needed:.2f} GiB)"
            )
    if over:
        return Outcome(
            "sandbox_disk",
            "",
            FAIL,
            f"ENVIRONMENT_TOO_LARGE_FOR_SANDBOX: compressed image + workspace + headroom exceeds the "
            f"{admission.sandbox_disk_gib:g} GiB sandbox disk for {len(over)} task(s): "
            + "; ".join(over[:3])
            + ("; ..." if len(over) > 3 else ""),
        )
    if unknown:
        return Outcome("sandbox_disk", "", NOT_CHECKED, f"no image size or workspace for {', '.join(unknown[:5])}")
    return Outcome("sandbox_disk", "", PASS)


def _contract(data: Any) -> Outcome:
    errors = submission.contract_errors(data)
    if errors:
        return Outcome(
            "typed_contract",
            "",
            FAIL,
            "; ".join(errors[:3]) + (f" and {len(errors) - 3} more" if len(errors) > 3 else ""),
        )
    return Outcome("typed_contract", "", PASS)


def _unique(tasks: Sequence[dict[str, Any]]) -> Outcome:
    ids = [t.get("task_id") for t in tasks]
    twice = sorted({str(i) for i in ids if ids.count(i) > 1})
    if twice:
        return Outcome("unique_tasks", "", FAIL, f"listed more than once: {', '.join(twice)}")
    return Outcome("unique_tasks", "", PASS)


def _training(tasks: Sequence[dict[str, Any]]) -> Outcome:
    other = [f"{t.get('task_id')} ({t.get('split')!r})" for t in tasks if t.get("split") not in TRAINING_SPLITS]
    if other:
        return Outcome(
            "training_tasks",
            "",
            FAIL,
            f"not in a training split ({', '.join(TRAINING_SPLITS)}): {', '.join(other[:5])}",
        )
    return Outcome("training_tasks", "", PASS)


def _externals(evidence: Evidence) -> dict[str, ExternalResult]:
    if evidence.checks is None:
        return {}
    return {e["task_id"]: ExternalResult.from_json(e) for e in evidence.checks.external}


def _openenv_schema(data: dict[str, Any], evidence: Evidence) -> Outcome:
    requested = data.get("schema")
    difference = release_schema.first_difference(requested, release_schema.declared())
    if difference:
        return Outcome("openenv_schema", "", FAIL, f"the request's schema is not the release schema: {difference}")
    if evidence.checks is None:
        return Outcome("openenv_schema", "", NOT_CHECKED, "no check results: what the images served is not known")
    served = (
        release_schema.first_difference(release_schema.served_parts(evidence.checks.schema), requested)
        if evidence.checks.schema
        else "the image's schema was not recorded"
    )
    if served:
        return Outcome("openenv_schema", "", FAIL, f"{evidence.checks.image} served another schema: {served}")
    externals = _externals(evidence)
    differing = [t for t, r in externals.items() if r.schema_equal is False]
    if differing:
        return Outcome("openenv_schema", "", FAIL, f"the image of {', '.join(differing)} served another schema")
    unknown = [
        t.task_id
        for t in evidence.tasks
        if t.kind == EXTERNAL and (t.task_id not in externals or externals[t.task_id].schema_equal is None)
    ]
    if unknown:
        return Outcome("openenv_schema", "", NOT_CHECKED, f"not started, schema not seen: {', '.join(unknown)}")
    return Outcome("openenv_schema", "", PASS)


def _per_task(task: dict[str, Any], evidence: Evidence, requested_schema: Any) -> list[Outcome]:
    task_id, image = str(task.get("task_id")), task.get("image")
    if evidence.checks is None:
        return [Outcome(n, task_id, NOT_CHECKED, "no check results") for n in TASK_CHECKS]
    record = next((t for t in evidence.tasks if t.task_id == task_id), None)
    if record is None:
        return [Outcome(n, task_id, FAIL, "the release recorded no verification of this task") for n in TASK_CHECKS]
    if record.image != image:
        return [
            Outcome(n, task_id, FAIL, f"the checks ran on {record.image}, the request names {image}")
            for n in TASK_CHECKS
        ]
    episode = (
        Outcome("native_episode", task_id, PASS)
        if record.verification.verified
        else Outcome(
            "native_episode",
            task_id,
            FAIL if record.verification.status == "failed" else NOT_CHECKED,
            record.verification.status,
        )
    )
    if record.kind != EXTERNAL:
        by_id = {c.id: c for c in evidence.checks.checks}

        def passed(name: str, check_id: str) -> Outcome:
            check = by_id.get(check_id)
            if check is None:
                return Outcome(name, task_id, FAIL, f"{check_id} did not run")
            return Outcome(name, task_id, PASS if check.passed else FAIL, "" if check.passed else f"{check_id} failed")

        # The suite records the reference it pulled (the registry's address included): the same
        # image is the same digest.
        digest = _digest_of(image) if isinstance(image, str) else None
        if digest is None or digest != _digest_of(evidence.checks.image):
            return [Outcome(n, task_id, FAIL, f"the check suite ran on {evidence.checks.image}") for n in TASK_CHECKS]
        schema = passed("native_schema", PROCEDURAL_SCHEMA_CHECK)
        served = release_schema.served_parts(evidence.checks.schema) if evidence.checks.schema else None
        if schema.status == PASS and served != requested_schema:
            schema = Outcome(
                "native_schema",
                task_id,
                FAIL,
                "its /schema is not the request's: " + str(release_schema.first_difference(served, requested_schema)),
            )
        return [passed("pinned_openenv_endpoint", PROCEDURAL_ENDPOINT_CHECK), schema, episode]
    result = _externals(evidence).get(task_id)
    if result is None or not result.checks:
        why = result.status if result is not None else "not checked in this run"
        return [Outcome(n, task_id, NOT_CHECKED, f"image not started ({why})") for n in TASK_CHECKS]
    ran = result.outcomes()
    if EXTERNAL_ENDPOINT_CHECK in ran["passed"]:
        endpoint = Outcome("pinned_openenv_endpoint", task_id, PASS)
    elif EXTERNAL_ENDPOINT_CHECK in ran["failed"]:
        endpoint = Outcome("pinned_openenv_endpoint", task_id, FAIL, f"{EXTERNAL_ENDPOINT_CHECK} failed")
    else:
        endpoint = Outcome(
            "pinned_openenv_endpoint",
            task_id,
            NOT_CHECKED,
            f"`openenv validate` did not run on this image (no {EXTERNAL_ENDPOINT_CHECK} repair check)",
        )
    # The external image's /schema was compared with the release schema when it was checked.
    same = bool(result.schema_equal) and requested_schema == release_schema.declared()
    schema = Outcome(
        "native_schema", task_id, PASS if same else FAIL, "" if same else "its /schema is not the request's"
    )
    return [endpoint, schema, episode]


def run(data: Any, *, evidence: Evidence, admission: Admission, resolve: Resolver) -> Report:
    """Every admission check on the request `data` (submission.json's JSON), in the platform's order."""
    request = data if isinstance(data, dict) else {}
    listed = request.get("tasks")
    tasks = [t for t in listed if isinstance(t, dict)] if isinstance(listed, list) else []
    images = list(
        dict.fromkeys(i for i in [request.get("image"), *(t.get("image") for t in tasks)] if isinstance(i, str))
    )
    outcomes = [_resolved(i, resolve) for i in images]
    outcomes += [
        _image_sizes(images, evidence.sizes),
        _disk(tasks, evidence.sizes, admission),
        _contract(data),
        _unique(tasks),
        _training(tasks),
        _openenv_schema(request, evidence),
    ]
    for task in tasks:
        outcomes += _per_task(task, evidence, request.get("schema"))
    return Report(tuple(outcomes))


def evidence_from(records: Path) -> Evidence:
    """The evidence recorded beside a request: provenance.json (tasks, sizes) and
    attestations/checks.json under `records`; what is missing is left out (not checked)."""
    from pipeline.checks import results as results_mod
    from pipeline.records import provenance

    checks = tasks = sizes = None
    if (records / "attestations" / "checks.json").is_file():
        checks = results_mod.load(records / "attestations" / "checks.json")
    if (records / "provenance.json").is_file():
        prov = provenance.load(records / "provenance.json")
        tasks, sizes = prov.tasks, prov.sizes
    return Evidence(checks=checks, tasks=tuple(tasks or ()), sizes=sizes)


def read_request(path: Path) -> Any:
    """The request's JSON as it is (the checks judge its shape)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise VerificationError(f"{path} not found", hint="run `nox -s release` to write submission.json") from None
    except ValueError as exc:
        raise VerificationError(f"{path} is not JSON: {exc}") from None
