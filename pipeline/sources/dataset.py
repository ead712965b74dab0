"""External task records (the unchanged MiMo repair tasks), pinned like git sources.

A record is one row of a Hugging Face dataset, pinned in release.toml by dataset,
revision, subset, split, row index and the sha256 of the record's text. In the MiMo
dataset a row holds the task id at `extra_info.instance_id` and the record itself as
a JSON string at `extra_info.instance_json` (`[external] id_field`, `record_field`).
The pin is over that string exactly as stored, UTF-8 encoded: one line of JSON with
no trailing newline (docs/spec/mimo.md: 6,635 and 8,149 bytes; the seed's own copy
of the 001926 record, `tasks/format-code-task-001926.json` at the pinned reference
revision, is exactly that line, 8,149 bytes, Python's default `json.dumps` form). It is
never re-serialised: a re-serialisation could differ in separators, key order or
escaping and would pin bytes nobody stored. A verified record is written, never
edited, as `<vendor>/external/<task_id>.json` holding exactly those bytes (the bytes
of the image's /opt/arena/instance.json), so the file's sha256 is the pin.

Where a record comes from, in order:

1. The vendor directory, when it already holds bytes matching a pinned sha256
   (offline; a mismatch there is tampering and an error).
2. A mirror directory (`--mirror DIR`), one file per task holding one item of the
   rows API's `rows` list, i.e. `{"row_idx": N, "row": {...}}`:

       DIR/huggingface.co/datasets/<owner>/<name>/<revision>/<split>/<task_id>.json

3. HTTPS: the Hub API (`{hub_url}/api/datasets/<dataset>`) says which revision the
   dataset's head is at; the datasets-server's rows API
   (`{rows_url}/rows?dataset=..&config=..&split=..&offset=<row>&length=1`) serves the
   row. The datasets-server only serves the head, so a record without a pinned sha256
   is accepted only while the head is the pinned revision; a pinned one is decided by
   its sha256 whatever the head. Rows with truncated cells are refused.

The pinned parquet file of the split (`code.parquet`, its sha256 in release.toml's
comments) is the fallback when the rows API no longer serves the pinned revision: its
row, extracted into the mirror layout above by any parquet reader, verifies against
the same pins. The pipeline does not read parquet itself: that takes pyarrow (tens of
MB of compiled code) for two rows the rows API serves as JSON.

Every row is checked against its pins before anything is stored: the row index, the
task id at `id_field`, the record's own `instance_id`, and the sha256 of the record
text; any mismatch stops with the expected and the actual value. A record whose sha256
is not pinned yet is fetched and reported as "unpinned" with the value to pin. The
local profile reports records it cannot reach as "not fetched: <reason>"; a profile
with `external_tasks_required` (arena) refuses to continue without every record
verified against its pins.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib import error as urlerror
from urllib import parse, request

from pipeline import config as config_mod
from pipeline._io import sha256_bytes, write_atomic
from pipeline.errors import DigestMismatch, SourceError

VERIFIED = "verified"
UNPINNED = "unpinned"
NOT_FETCHED = "not fetched"
HTTP_TIMEOUT_S = 20
READ_ONLY = 0o444


@dataclass(frozen=True)
class ExternalRecord:
    """One external task record and what is known about it."""

    task_id: str
    dataset: str
    revision: str
    subset: str
    split: str
    row: int
    sha256: str
    image: str
    digest: str
    compressed_bytes: int
    budget_split: str
    budgets: dict[str, int]
    license: str
    status: str
    reason: str
    record_path: str
    # The [[sources]] entry of the task's reference repair; records written before the
    # reference repairs were pinned name none.
    reference: str = ""


class _Unavailable(Exception):
    """The record could not be obtained (network, missing mirror file): not a mismatch."""


def record_sha256(text: bytes) -> str:
    """The sha256 that pins a record: over its text exactly as the dataset stores it."""
    return sha256_bytes(text)


def record_relpath(task: config_mod.ExternalTask) -> str:
    """Where a verified record lands, relative to the vendor directory."""
    return f"external/{task.task_id}.json"


def mirror_path(mirror: Path, ext: config_mod.External, task: config_mod.ExternalTask) -> Path:
    """The mirror file for one task (layout in the module docstring)."""
    return mirror / "huggingface.co" / "datasets" / ext.dataset / ext.revision / task.split / f"{task.task_id}.json"


def _at(row: dict[str, Any], dotted: str) -> Any:
    """The value at a dotted path in a row (`extra_info.instance_id`), or None."""
    value: Any = row
    for key in dotted.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def record_text(ext: config_mod.External, task: config_mod.ExternalTask, item: Any, where: str) -> tuple[int, bytes]:
    """(row index, record text) of one rows-API item, after every check a row can fail
    before its hash: its shape, truncation, its row index, the task id at `id_field`,
    and the record's own `instance_id`."""
    if not isinstance(item, dict) or not isinstance(item.get("row"), dict) or not isinstance(item.get("row_idx"), int):
        raise SourceError(
            f"record for {task.task_id} from {where} is malformed",
            expected='{"row_idx": <int>, "row": {...}}',
            actual=type(item).__name__ if not isinstance(item, dict) else sorted(item),
        )
    if item.get("truncated_cells"):
        raise SourceError(
            f"record for {task.task_id} from {where} has truncated cells",
            expected="no truncated cells",
            actual=item["truncated_cells"],
            hint="extract the row from the pinned parquet file into a mirror directory and use --mirror",
        )
    row_idx, row = item["row_idx"], item["row"]
    if row_idx != task.row:
        raise SourceError(
            f"record for {task.task_id} from {where} is at another row",
            expected=f"row {task.row} of split {task.split}",
            actual=f"row {row_idx}",
        )
    found = _at(row, ext.id_field)
    if found != task.task_id:
        raise SourceError(
            f"row {row_idx} of split {task.split} from {where} is another task",
            expected=f"{ext.id_field} = {task.task_id}",
            actual=f"{ext.id_field} = {found!r}",
            hint="check the row pin in release.toml",
        )
    text = _at(row, ext.record_field)
    if not isinstance(text, str):
        raise SourceError(
            f"row {row_idx} from {where} holds no record text",
            expected=f"a JSON string at {ext.record_field}",
            actual=type(text).__name__,
        )
    try:
        record = json.loads(text)
    except ValueError as exc:
        raise SourceError(f"the record of {task.task_id} at {ext.record_field} is not JSON", actual=str(exc)) from None
    own = record.get("instance_id") if isinstance(record, dict) else None
    if own != task.task_id:
        raise SourceError(
            f"the record at row {row_idx} from {where} names another task",
            expected=f"instance_id = {task.task_id}",
            actual=f"instance_id = {own!r}",
        )
    return row_idx, text.encode("utf-8")


def _from_mirror(mirror: Path, ext: config_mod.External, task: config_mod.ExternalTask):
    path = mirror_path(mirror, ext, task)
    if not path.is_file():
        raise _Unavailable(f"no mirror file {path}")
    try:
        item = json.loads(path.read_bytes())
    except ValueError as exc:
        raise SourceError(f"mirror file {path} is not JSON", actual=str(exc)) from None
    return record_text(ext, task, item, str(path))


def _get_json(url: str) -> Any:
    req = request.Request(url, headers={"Accept": "application/json"})
    try:
        with request.urlopen(req, timeout=HTTP_TIMEOUT_S) as resp:
            return json.loads(resp.read())
    except urlerror.HTTPError as exc:
        if exc.code >= 500:
            raise _Unavailable(f"{url} answered HTTP {exc.code}") from None
        raise SourceError(
            f"{url} refused the request",
            expected="HTTP 200",
            actual=f"HTTP {exc.code}",
            hint="check the dataset, revision, split and row pins",
        ) from None
    except (TimeoutError, urlerror.URLError, ConnectionError) as exc:
        reason = getattr(exc, "reason", exc)
        raise _Unavailable(f"{parse.urlsplit(url).netloc} unreachable: {reason}") from None
    except ValueError as exc:
        raise SourceError(f"{url} did not answer JSON", actual=str(exc)) from None


def _from_https(ext: config_mod.External, task: config_mod.ExternalTask):
    info = _get_json(f"{ext.hub_url}/api/datasets/{ext.dataset}")
    head = info.get("sha") if isinstance(info, dict) else None
    if head != ext.revision and not task.record_sha256:
        raise _Unavailable(
            f"the datasets-server serves the head {head} of {ext.dataset}, not the pinned "
            f"revision {ext.revision}, so a record without a pinned sha256 cannot be "
            "confirmed; provide it with --mirror"
        )
    url = f"{ext.rows_url}/rows?" + parse.urlencode(
        {"dataset": ext.dataset, "config": ext.subset, "split": task.split, "offset": task.row, "length": 1}
    )
    answer = _get_json(url)
    rows = answer.get("rows") if isinstance(answer, dict) else None
    if not isinstance(rows, list) or len(rows) != 1:
        raise SourceError(
            f"{url} did not return exactly one row for {task.task_id}",
            expected="1 row",
            actual=f"{len(rows) if isinstance(rows, list) else 'no'} rows",
        )
    return record_text(ext, task, rows[0], url)


def _record(
    cfg: config_mod.ReleaseConfig,
    task: config_mod.ExternalTask,
    *,
    row: int,
    sha256: str,
    status: str,
    reason: str,
    path: str,
) -> ExternalRecord:
    ext, budgets = cfg.external, cfg.budgets["external"]
    return ExternalRecord(
        task_id=task.task_id,
        dataset=ext.dataset,
        revision=ext.revision,
        subset=ext.subset,
        split=task.split,
        row=row,
        sha256=sha256,
        image=task.image,
        digest=task.digest,
        compressed_bytes=task.compressed_bytes,
        budget_split=budgets.split,
        budgets=dict(budgets.values),
        license=ext.license,
        status=status,
        reason=reason,
        record_path=path,
        reference=task.reference,
    )


def _verify(task: config_mod.ExternalTask, digest: str, where: str) -> None:
    if task.record_sha256 and digest != task.record_sha256:
        raise DigestMismatch(
            f"hash mismatch for external record {task.task_id} {where}",
            expected=f"sha256 {task.record_sha256}",
            actual=f"sha256 {digest}",
            hint="the record differs from its pin in release.toml; review it before re-pinning",
        )


def fetch_record(
    cfg: config_mod.ReleaseConfig, task: config_mod.ExternalTask, out_dir: Path, *, mirror: Path | None = None
) -> ExternalRecord:
    """Obtain, verify and store one record; raises _Unavailable when it cannot be reached."""
    rel = record_relpath(task)
    target = out_dir / rel
    if target.exists() and task.record_sha256:
        _verify(task, sha256_bytes(target.read_bytes()), f"in {target} (modified after fetching?)")
        return _record(cfg, task, row=task.row, sha256=task.record_sha256, status=VERIFIED, reason="", path=rel)
    if mirror is not None:
        row_idx, data = _from_mirror(mirror, cfg.external, task)
    else:
        row_idx, data = _from_https(cfg.external, task)
    digest = record_sha256(data)
    _verify(task, digest, f"at {cfg.external.dataset}@{cfg.external.revision} split {task.split} row {row_idx}")
    if target.exists() and target.read_bytes() != data:
        raise DigestMismatch(
            f"stored external record {target} differs from the fetched one",
            expected=f"sha256 {digest}",
            actual=f"sha256 {sha256_bytes(target.read_bytes())}",
            hint=f"records are never overwritten: delete {target} and fetch again",
        )
    if not target.exists():
        write_atomic(target, data, mode=READ_ONLY)
    if task.record_sha256:
        return _record(cfg, task, row=row_idx, sha256=digest, status=VERIFIED, reason="", path=rel)
    return _record(
        cfg,
        task,
        row=row_idx,
        sha256=digest,
        status=UNPINNED,
        path=rel,
        reason=f'first fetch: pin record_sha256 = "{digest}" for {task.task_id} in release.toml ({len(data)} bytes)',
    )


def check_stored(record: ExternalRecord, out_dir: Path) -> None:
    """Recompute a stored record's sha256 from the vendor directory alone (for the audit).

    Records that were never fetched have nothing stored and nothing to check.
    """
    if record.status == NOT_FETCHED:
        return
    path = out_dir / record.record_path
    if not path.is_file():
        raise SourceError(
            f"stored external record {record.task_id} is missing",
            expected=str(path),
            actual="absent",
            hint="run `python -m pipeline vendor` to fetch it",
        )
    digest = sha256_bytes(path.read_bytes())
    if digest != record.sha256:
        raise DigestMismatch(
            f"stored external record {path} was modified",
            expected=f"sha256 {record.sha256}",
            actual=f"sha256 {digest}",
            hint=f"delete {path} and run `python -m pipeline vendor` again",
        )


def fetch_records(
    cfg: config_mod.ReleaseConfig, policy: config_mod.ExternalPolicy, out_dir: Path, *, mirror: Path | None = None
) -> tuple[ExternalRecord, ...]:
    """Every external record of the release, in release.toml order.

    Mismatches always raise. Unreachable or unpinned records are reported in the
    records' status, unless the `policy` requires external tasks, which then raises.
    """
    records = []
    for task in cfg.external.tasks:
        try:
            record = fetch_record(cfg, task, out_dir, mirror=mirror)
        except _Unavailable as exc:
            if policy.required:
                raise SourceError(
                    f"external record {task.task_id} could not be fetched (profile {policy.profile} requires it)",
                    expected="a verified record",
                    actual=str(exc),
                    hint="run with network access to huggingface.co or pass --mirror DIR",
                ) from None
            record = _record(
                cfg, task, row=task.row, sha256=task.record_sha256, status=NOT_FETCHED, reason=str(exc), path=""
            )
        if record.status == UNPINNED and policy.required:
            raise SourceError(
                f"external record {task.task_id} is not pinned in release.toml "
                f"(profile {policy.profile} requires verified records)",
                expected="record_sha256 pinned",
                actual=f"sha256 {record.sha256}",
                hint=record.reason,
            )
        records.append(record)
    return tuple(records)
