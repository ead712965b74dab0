"""The release as a Hugging Face dataset: the folder `dist/dataset/`.

    README.md        the dataset card (pipeline.records.card)
    tasks.jsonl      one line per task, in request order (the card's `default` config, split `train`)
    openenv.yaml     the environment's OpenEnv manifest: the checkout's env/openenv.yaml, the file
                     the image ships at <app_dir>/env/openenv.yaml
    vendor/          the vendored upstream files with their licences (<source>/<file>)
    provenance.json, submission.json, attestations/   the release records, byte for byte

Every file is a function of the records, release.toml, the vendored files and the checkout's
env/openenv.yaml, so the same inputs give the same bytes. Every file but the release statement
itself (and the publishing aids the statement never binds) is a subject of the signed release statement,
named `dist/dataset/<path>` (pipeline.records.statement); the audit regenerates the card and
tasks.jsonl from the committed records and holds openenv.yaml to the checkout's env/openenv.yaml
and the SBOM's, so a fresh clone without dist/ still checks them.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline._io import write_atomic
from pipeline.config import ReleaseConfig
from pipeline.curriculum import Case
from pipeline.errors import SourceError, VerificationError
from pipeline.records.provenance import Provenance
from pipeline.sources.dataset import ExternalRecord
from pipeline.sources.vendor import VendoredFile

if TYPE_CHECKING:  # read through request_order only
    from pipeline.records.submission import Request

FOLDER = "dist/dataset"  # relative to the checkout; the statement's names for its files start with it
CARD = "README.md"
TASKS = "tasks.jsonl"
VENDOR = "vendor"
MANIFEST = "openenv.yaml"  # the OpenEnv manifest, a copy of the checkout's MANIFEST_SOURCE
MANIFEST_SOURCE = "env/openenv.yaml"
RECORDS = ("provenance.json", "submission.json", "attestations")
SPLIT = "train"  # the card's one split; tasks.jsonl is its one data file


@dataclass(frozen=True)
class TaskLine:
    """One line of tasks.jsonl. Procedural cases carry family, difficulty and seed; external
    tasks the pinned record (dataset, revision, dataset split, row, record sha256) and the
    [[sources]] entry of their reference repair."""

    task_id: str
    image: str
    family: str | None = None
    difficulty: int | None = None
    seed: int | None = None
    dataset: str | None = None
    revision: str | None = None
    split: str | None = None
    row: int | None = None
    record_sha256: str | None = None
    reference: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The task id and image, then only the fields of its kind (in this order)."""
        kind = (
            ("family", "difficulty", "seed")
            if self.family is not None
            else ("dataset", "revision", "split", "row", "record_sha256", "reference")
        )
        return {"task_id": self.task_id, "image": self.image, **{k: getattr(self, k) for k in kind}}


# The column types a consumer's loader gets (the card's dataset_info), in tasks.jsonl's key order.
FEATURES = (
    ("task_id", "string"),
    ("image", "string"),
    ("family", "string"),
    ("difficulty", "int64"),
    ("seed", "int64"),
    ("dataset", "string"),
    ("revision", "string"),
    ("split", "string"),
    ("row", "int64"),
    ("record_sha256", "string"),
    ("reference", "string"),
)


def request_order(sub: Request) -> tuple[tuple[str, str], ...]:
    """(task id, image) of every task of the request, in request order.

    The one place the dataset reads submission.json's tasks.
    """
    return tuple((t.task_id, t.image) for t in sub.tasks)


def task_lines(cfg: ReleaseConfig, prov: Provenance, sub: Request) -> tuple[TaskLine, ...]:
    """tasks.jsonl's lines: the request's tasks in order, each described by the records."""
    records: dict[str, ExternalRecord] = {r.task_id: r for r in prov.external}
    pinned = {t.task_id: t for t in cfg.external.tasks}
    lines = []
    for task_id, image in request_order(sub):
        if task_id in pinned:
            rec = records.get(task_id)
            if rec is None:
                raise VerificationError(
                    f"external task {task_id} has no record in provenance.json",
                    expected="one record per [[external.tasks]] entry",
                    actual="none",
                )
            lines.append(
                TaskLine(
                    task_id,
                    image,
                    dataset=rec.dataset,
                    revision=rec.revision,
                    split=rec.split,
                    row=rec.row,
                    record_sha256=rec.sha256 or None,
                    reference=pinned[task_id].reference or None,
                )
            )
            continue
        try:
            case = Case.parse(task_id)
        except ValueError:
            raise VerificationError(
                f"task {task_id} of submission.json is neither a curriculum case nor an external task of release.toml"
            ) from None
        lines.append(TaskLine(task_id, image, family=case.family, difficulty=case.difficulty, seed=case.seed))
    return tuple(lines)


def tasks_jsonl(lines: Iterable[TaskLine]) -> bytes:
    """One compact JSON object per line, "\\n"-terminated, keys in TaskLine order."""
    return b"".join(
        json.dumps(line.to_json(), ensure_ascii=False, separators=(",", ":")).encode() + b"\n" for line in lines
    )


def manifest_file(repo: Path) -> dict[str, Path]:
    """The folder's openenv.yaml -> the checkout's env/openenv.yaml, the file the image's env layer packs."""
    src = Path(repo) / MANIFEST_SOURCE
    if not src.is_file():
        raise SourceError(
            f"{MANIFEST_SOURCE} is missing: the dataset folder ships the environment's OpenEnv manifest",
            expected=f"a regular file {MANIFEST_SOURCE}",
            actual="absent",
            hint="restore env/openenv.yaml (tests/env/test_openenv_manifest.py checks it)",
        )
    return {MANIFEST: src}


def vendor_files(sources: Iterable[VendoredFile], vendor_dir: Path) -> dict[str, Path]:
    """The folder's vendor/ files ("vendor/<source>/<file>", licences included) -> where they are."""
    out = {}
    for s in sources:
        for rel in (s.vendor_path, s.license_path):
            out[f"{VENDOR}/{rel}"] = Path(vendor_dir) / rel
    return dict(sorted(out.items()))


def vendor_digests(sources: Iterable[VendoredFile]) -> dict[str, str]:
    """The sha256 each vendor/ file of the folder must have (the provenance pins)."""
    out = {}
    for s in sources:
        out[f"{VENDOR}/{s.vendor_path}"] = s.sha256
        out[f"{VENDOR}/{s.license_path}"] = s.license_sha256
    return dict(sorted(out.items()))


def write_content(out: Path, generated: Mapping[str, bytes], copied: Mapping[str, Path]) -> list[str]:
    """A new folder `out` holding the generated files and a copy of each of `copied` (the manifest,
    the vendored files); its paths."""
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    for rel, data in generated.items():
        write_atomic(out / rel, data)
    for rel, src in copied.items():
        write_atomic(out / rel, Path(src).read_bytes())
    return files(out)


def add_records(out: Path, records_root: Path) -> list[str]:
    """Copy the release records (provenance.json, submission.json, every file of attestations/)
    from `records_root` into the folder; its paths."""
    root = Path(records_root)
    for name in RECORDS:
        src = root / name
        paths = sorted(p for p in src.rglob("*") if p.is_file()) if src.is_dir() else [src]
        for p in paths:
            write_atomic(Path(out) / p.relative_to(root), p.read_bytes())
    return files(out)


def is_record(path: str) -> bool:
    """A copy of a release record (provenance.json, submission.json, attestations/...)."""
    return any(path == r or path.startswith(r + "/") for r in RECORDS)


def content_files(paths: Iterable[str]) -> list[str]:
    """The task files among a folder's paths: the card, tasks.jsonl, openenv.yaml and vendor/."""
    return [p for p in paths if not is_record(p)]


def record_files(paths: Iterable[str]) -> list[str]:
    """The records among a folder's paths."""
    return [p for p in paths if is_record(p)]


def files(folder: Path) -> list[str]:
    """Every regular file under `folder`, as sorted POSIX paths relative to it."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
