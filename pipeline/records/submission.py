"""submission.json: the Arena request, exactly as the platform accepted it.

Its fields are those of the accepted request (docs/spec/mimo.md, "The Arena request and
admission"), no more: `submission_id`, `name`, `image`, `schema` {`action`,
`observation`}, `tasks`, `example_actions`, `finish_action`, `dataset`, `source`; each
task `task_id`, `image`, `split` and the eleven budgets. `request.schema.json` (beside
this module) is that contract as a JSON Schema: the release validates the request
against it before writing it, and the audit validates it again.

`submission_id` and `dataset` come from the profile in release.toml; `source` is the
project repository at the recorded commit, `<source_url>/tree/<commit>` (the form the
platform recorded as the claimed source). Each task's `split` is its budgets table's
split (`[budgets.<kind>] split`), the split the request trains on, never the dataset
split an external record comes from. What the records need beyond the request (check
results per task, image sizes and totals, the environment's own limits, the source
revision) is in provenance.json (pipeline.records.provenance) and the report.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline._io import pretty_json, write_atomic
from pipeline.checks import schema as release_schema
from pipeline.config import REQUEST_BUDGET_FIELDS, ReleaseConfig, RequestIdentity
from pipeline.errors import VerificationError
from pipeline.records.verification import TaskRecord

if TYPE_CHECKING:
    import jsonschema

SCHEMA_FILE = Path(__file__).with_name("request.schema.json")
FIELDS = ("submission_id", "name", "image", "schema", "tasks", "example_actions", "finish_action", "dataset", "source")
TASK_FIELDS = ("task_id", "image", "split", *REQUEST_BUDGET_FIELDS)


@dataclass(frozen=True)
class RequestTask:
    task_id: str
    image: str
    split: str
    budgets: dict[str, int]


@dataclass(frozen=True)
class Request:
    submission_id: str
    name: str
    image: str
    schema: dict[str, Any]
    tasks: tuple[RequestTask, ...]
    example_actions: list[dict[str, Any]]
    finish_action: dict[str, Any]
    dataset: str
    source: str


def source_at(repository_url: str, commit: str) -> str:
    """The request's `source`: the repository at one commit."""
    return f"{repository_url.rstrip('/')}/tree/{commit}"


def build(
    cfg: ReleaseConfig, identity: RequestIdentity, tasks: Sequence[TaskRecord], *, image: str, source_revision: str
) -> Request:
    """The request for `tasks` (in request order, verification.build's), on `image`."""
    entries = []
    for task in tasks:
        budgets = cfg.budgets[task.kind]
        entries.append(
            RequestTask(task.task_id, task.image, budgets.split, {k: budgets.values[k] for k in REQUEST_BUDGET_FIELDS})
        )
    return Request(
        submission_id=identity.submission_id,
        name=cfg.name,
        image=image,
        schema=release_schema.declared(),
        tasks=tuple(entries),
        example_actions=release_schema.example_actions(),
        finish_action=release_schema.finish_action(),
        dataset=identity.dataset,
        source=source_at(cfg.source_url, source_revision),
    )


def to_json(req: Request) -> dict[str, Any]:
    out = {k: getattr(req, k) for k in FIELDS if k != "tasks"}
    out["tasks"] = [{"task_id": t.task_id, "image": t.image, "split": t.split, **t.budgets} for t in req.tasks]
    return out


@lru_cache(maxsize=1)
def _validator() -> jsonschema.protocols.Validator:
    from pipeline.records._iri import defer_iri_grammar

    defer_iri_grammar()
    import jsonschema  # only where a request is checked

    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def contract_errors(data: Any) -> list[str]:
    """Every way `data` breaks request.schema.json, each as "<path>: <message>" (path order)."""
    errors = sorted(_validator().iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path])
    return [f"/{'/'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in errors]


def validate(data: Any) -> None:
    """VerificationError naming the first break of the request contract, if any."""
    errors = contract_errors(data)
    if errors:
        raise VerificationError(
            f"submission.json is not the request the platform accepts ({SCHEMA_FILE.name})",
            expected="no contract error",
            actual="; ".join(errors[:3]) + (f" and {len(errors) - 3} more" if len(errors) > 3 else ""),
        )


def write_submission(path: Path | str, req: Request) -> None:
    """Write submission.json atomically; refuses a request that breaks the contract."""
    data = to_json(req)
    validate(data)
    write_atomic(Path(path), pretty_json(data))


def from_json(data: Any) -> Request:
    """The typed request from its JSON (validated against the contract first)."""
    validate(data)
    return Request(
        **{k: data[k] for k in FIELDS if k != "tasks"},
        tasks=tuple(
            RequestTask(t["task_id"], t["image"], t["split"], {k: t[k] for k in REQUEST_BUDGET_FIELDS})
            for t in data["tasks"]
        ),
    )


def load(path: Path | str) -> Request:
    """Read submission.json back into the typed request."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise VerificationError(f"{path} not found") from None
    return from_json(data)
