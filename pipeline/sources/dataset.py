"""External task records (the unchanged MiMo repair tasks), pinned like git sources.

A record is one row of a Hugging Face dataset, pinned in release.toml by dataset,
revision, subset, split, row index and the sha256 of the row's canonical JSON
(`pipeline._io.canonical_json`); the task also carries its image digest, the
external budgets and the dataset's licence. A verified record is written, never
edited, as `<vendor>/external/<task_id>.json` holding exactly those canonical bytes,
so the file's sha256 is the record's.

Where a record comes from, in order:

1. The vendor directory, when it already holds bytes matching a pinned sha256
   (offline; a mismatch there is tampering and an error).
2. A mirror directory (`--mirror DIR`), one file per task holding one item of the
   rows API's `rows` list, i.e. `{"row_idx": N, "row": {...}}`:

       DIR/huggingface.co/datasets/<owner>/<name>/<revision>/<split>/<task_id>.json

3. HTTPS: the Hub API (`{hub_url}/api/datasets/<dataset>`) says which revision the
   dataset's head is at; the datasets-server (`{rows_url}/rows?...&offset=<row>` or,
   for a row not pinned yet, `{rows_url}/filter?...&where="<id_field>"='<task_id>'`)
   serves the row. The datasets-server only serves the head, so an unpinned record
   is accepted only while the head is the pinned revision; a pinned one is decided
   by its sha256 whatever the head. Rows with truncated cells are refused.

A record whose sha256 or row is not pinned yet is fetched and reported as
"unpinned" with the values to pin. The local profile reports records it cannot
reach as "not fetched: <reason>"; a profile with `external_tasks_required` (arena)
refuses to continue without every record verified against its pins.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib import error as urlerror
from urllib import parse, request

from pipeline import config as config_mod
from pipeline._io import canonical_json, sha256_bytes, write_atomic
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
    row: int | None
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


class _Unavailable(Exception):
    """The record could not be obtained (network, missing mirror file): not a mismatch."""


def record_sha256(row: dict[str, Any]) -> str:
    """The sha256 that pins a record: over the canonical JSON of the row."""
    return sha256_bytes(canonical_json(row))


def record_relpath(task: config_mod.ExternalTask) -> str:
    """Where a verified record lands, relative to the vendor directory."""
    return f"external/{task.task_id}.json"


def mirror_path(mirror: Path, ext: config_mod.External, task: config_mod.ExternalTask) -> Path:
    """The mirror file for one task (layout in the module docstring)."""
    return (mirror / "huggingface.co" / "datasets" / ext.dataset / ext.revision / task.split
            / f"{task.task_id}.json")


def _check_item(ext: config_mod.External, task: config_mod.ExternalTask, item: Any,
                where: str) -> tuple[int, dict[str, Any]]:
    if not isinstance(item, dict) or not isinstance(item.get("row"), dict) \
            or not isinstance(item.get("row_idx"), int):
        raise SourceError(f"record for {task.task_id} from {where} is malformed",
                          expected='{"row_idx": <int>, "row": {...}}',
                          actual=type(item).__name__ if not isinstance(item, dict) else sorted(item))
    if item.get("truncated_cells"):
        raise SourceError(f"record for {task.task_id} from {where} has truncated cells",
                          expected="no truncated cells", actual=item["truncated_cells"],
                          hint="fetch the full record into a mirror directory and use --mirror")
    row_idx, row = item["row_idx"], item["row"]
    if row.get(ext.id_field) != task.task_id:
        raise SourceError(f"record at row {row_idx} from {where} is another task",
                          expected=f"{ext.id_field} = {task.task_id}",
                          actual=f"{ext.id_field} = {row.get(ext.id_field)!r}")
    if task.row is not None and row_idx != task.row:
        raise SourceError(f"record for {task.task_id} from {where} is at another row",
                          expected=f"row {task.row}", actual=f"row {row_idx}")
    return row_idx, row


def _from_mirror(mirror: Path, ext: config_mod.External, task: config_mod.ExternalTask):
    path = mirror_path(mirror, ext, task)
    if not path.is_file():
        raise _Unavailable(f"no mirror file {path}")
    try:
        item = json.loads(path.read_bytes())
    except ValueError as exc:
        raise SourceError(f"mirror file {path} is not JSON", actual=str(exc)) from None
    return _check_item(ext, task, item, str(path))


def _get_json(url: str) -> Any:
    req = request.Request(url, headers={"Accept": "application/json"})
    try:
        with request.urlopen(req, timeout=HTTP_TIMEOUT_S) as resp:
            return json.loads(resp.read())
    except urlerror.HTTPError as exc:
        if exc.code >= 500:
            raise _Unavailable(f"{url} answered HTTP {exc.code}") from None
        raise SourceError(f"{url} refused the request", expected="HTTP 200",
                          actual=f"HTTP {exc.code}",
                          hint="check the dataset, revision, split and row pins") from None
    except (urlerror.URLError, socket.timeout, ConnectionError) as exc:
        reason = getattr(exc, "reason", exc)
        raise _Unavailable(f"{parse.urlsplit(url).netloc} unreachable: {reason}") from None
    except ValueError as exc:
        raise SourceError(f"{url} did not answer JSON", actual=str(exc)) from None


def _from_https(ext: config_mod.External, task: config_mod.ExternalTask):
    info = _get_json(f"{ext.hub_url}/api/datasets/{ext.dataset}")
    head = info.get("sha") if isinstance(info, dict) else None
    pinned = bool(task.record_sha256) and task.row is not None
    if head != ext.revision and not pinned:
        raise _Unavailable(
            f"the datasets-server serves the head {head} of {ext.dataset}, not the pinned "
            f"revision {ext.revision}, so an unpinned record cannot be confirmed; "
            "provide it with --mirror")
    query = {"dataset": ext.dataset, "config": ext.subset, "split": task.split}
    if task.row is not None:
        url = f"{ext.rows_url}/rows?" + parse.urlencode({**query, "offset": task.row, "length": 1})
    else:
        where = f"\"{ext.id_field}\"='{task.task_id}'"
        url = f"{ext.rows_url}/filter?" + parse.urlencode(
            {**query, "where": where, "offset": 0, "length": 2})
    answer = _get_json(url)
    rows = answer.get("rows") if isinstance(answer, dict) else None
    if not isinstance(rows, list) or len(rows) != 1:
        raise SourceError(f"{url} did not return exactly one record for {task.task_id}",
                          expected="1 row", actual=f"{len(rows) if isinstance(rows, list) else 'no'} rows")
    return _check_item(ext, task, rows[0], url)


def _record(cfg: config_mod.ReleaseConfig, task: config_mod.ExternalTask, *, row: int | None,
            sha256: str, status: str, reason: str, path: str) -> ExternalRecord:
    ext, budgets = cfg.external, cfg.budgets["external"]
    return ExternalRecord(
        task_id=task.task_id, dataset=ext.dataset, revision=ext.revision, subset=ext.subset,
        split=task.split, row=row, sha256=sha256, image=task.image, digest=task.digest,
        compressed_bytes=task.compressed_bytes, budget_split=budgets.split,
        budgets=dict(budgets.values), license=ext.license, status=status, reason=reason,
        record_path=path,
    )


def _verify(task: config_mod.ExternalTask, digest: str, where: str) -> None:
    if task.record_sha256 and digest != task.record_sha256:
        raise DigestMismatch(
            f"hash mismatch for external record {task.task_id} {where}",
            expected=f"sha256 {task.record_sha256}", actual=f"sha256 {digest}",
            hint="the record differs from its pin in release.toml; review it before re-pinning",
        )


def fetch_record(cfg: config_mod.ReleaseConfig, task: config_mod.ExternalTask, out_dir: Path, *,
                 mirror: Path | None = None) -> ExternalRecord:
    """Obtain, verify and store one record; raises _Unavailable when it cannot be reached."""
    rel = record_relpath(task)
    target = out_dir / rel
    if target.exists() and task.record_sha256 and task.row is not None:
        _verify(task, sha256_bytes(target.read_bytes()), f"in {target} (modified after fetching?)")
        return _record(cfg, task, row=task.row, sha256=task.record_sha256, status=VERIFIED,
                       reason="", path=rel)
    if mirror is not None:
        row_idx, row = _from_mirror(mirror, cfg.external, task)
    else:
        row_idx, row = _from_https(cfg.external, task)
    data = canonical_json(row)
    digest = sha256_bytes(data)
    _verify(task, digest, f"at {cfg.external.dataset}@{cfg.external.revision} row {row_idx}")
    if target.exists() and target.read_bytes() != data:
        raise DigestMismatch(
            f"stored external record {target} differs from the fetched one",
            expected=f"sha256 {digest}", actual=f"sha256 {sha256_bytes(target.read_bytes())}",
            hint=f"records are never overwritten: delete {target} and fetch again",
        )
    if not target.exists():
        write_atomic(target, data, mode=READ_ONLY)
    if task.record_sha256 and task.row is not None:
        return _record(cfg, task, row=row_idx, sha256=digest, status=VERIFIED, reason="", path=rel)
    return _record(cfg, task, row=row_idx, sha256=digest, status=UNPINNED, path=rel,
                   reason=f"first fetch: pin row = {row_idx} and record_sha256 = \"{digest}\" "
                          f"for {task.task_id} in release.toml")


def check_stored(record: ExternalRecord, out_dir: Path) -> None:
    """Recompute a stored record's sha256 from the vendor directory alone (for the audit).

    Records that were never fetched have nothing stored and nothing to check.
    """
    if record.status == NOT_FETCHED:
        return
    path = out_dir / record.record_path
    if not path.is_file():
        raise SourceError(f"stored external record {record.task_id} is missing",
                          expected=str(path), actual="absent",
                          hint="run `python -m pipeline vendor` to fetch it")
    digest = sha256_bytes(path.read_bytes())
    if digest != record.sha256:
        raise DigestMismatch(f"stored external record {path} was modified",
                             expected=f"sha256 {record.sha256}", actual=f"sha256 {digest}",
                             hint=f"delete {path} and run `python -m pipeline vendor` again")


def stored_rows(cfg: config_mod.ReleaseConfig, out_dir: Path,
                records: tuple[ExternalRecord, ...] | None = None,
                ) -> dict[str, tuple[dict[str, Any] | None, str]]:
    """Each external task's stored row, read back from `out_dir`: task id -> (row, why none).

    With `records` (this run's fetch) a record that was not fetched says why; without,
    whatever `out_dir` holds is used, checked against its pin where there is one.
    """
    status = {r.task_id: r for r in records or ()}
    rows: dict[str, tuple[dict[str, Any] | None, str]] = {}
    for task in cfg.external.tasks:
        record = status.get(task.task_id)
        if record is not None and record.status == NOT_FETCHED:
            rows[task.task_id] = (None, f"dataset record not fetched: {record.reason}")
            continue
        path = out_dir / record_relpath(task)
        if not path.is_file():
            rows[task.task_id] = (None, f"no dataset record at {path}")
            continue
        data = path.read_bytes()
        _verify(task, sha256_bytes(data), f"in {path} (modified after fetching?)")
        rows[task.task_id] = (json.loads(data), "")
    return rows


def fetch_records(cfg: config_mod.ReleaseConfig, policy: config_mod.ExternalPolicy, out_dir: Path, *,
                  mirror: Path | None = None) -> tuple[ExternalRecord, ...]:
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
                    f"external record {task.task_id} could not be fetched "
                    f"(profile {policy.profile} requires it)",
                    expected="a verified record", actual=str(exc),
                    hint="run with network access to huggingface.co or pass --mirror DIR",
                ) from None
            record = _record(cfg, task, row=task.row, sha256=task.record_sha256,
                             status=NOT_FETCHED, reason=str(exc), path="")
        if record.status == UNPINNED and policy.required:
            raise SourceError(
                f"external record {task.task_id} is not pinned in release.toml "
                f"(profile {policy.profile} requires verified records)",
                expected="row and record_sha256 pinned", actual=f"row {record.row}, sha256 {record.sha256}",
                hint=record.reason,
            )
        records.append(record)
    return tuple(records)
