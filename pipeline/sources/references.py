"""The reference repair of each external task: a pinned upstream script, vendored.

Each `[[external.tasks]]` entry names (`reference`) the `[[sources]]` entry of its
reference repair, a Python script of the seed release's repository pinned by
revision, path, size and sha256. The vendor stage fetches and verifies it like every
source; it is an input of the repair checks, never of the image. `reference_scripts`
reads each one back from the vendor directory alone (re-verified against its pins)
and hands the checks its bytes, its vendored path and its source name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline import config as config_mod
from pipeline.errors import SourceError
from pipeline.sources.vendor import check_vendored


@dataclass(frozen=True)
class ReferenceScript:
    """One task's reference repair, verified in the vendor directory."""

    task_id: str
    source: str  # the [[sources]] entry it was vendored from
    path: Path  # the vendored file
    sha256: str
    script: bytes


def reference_scripts(
    cfg: config_mod.ReleaseConfig, vendored: Sequence[config_mod.Source], vendor_dir: Path
) -> dict[str, tuple[ReferenceScript | None, str]]:
    """task id -> (its reference script, or None and why not), in release.toml order.

    `vendored` is what the profile vendors (`ReleasePlan.sources`): a task whose
    reference source is not among them has none in this run (the local profile,
    offline, vendors no upstream file). A vendored file that no longer matches its pins
    is tampering and raises; one that is absent is reported with the command to run.
    """
    in_profile = {s.name for s in vendored}
    out: dict[str, tuple[ReferenceScript | None, str]] = {}
    for task in cfg.external.tasks:
        source = cfg.source(task.reference)
        if source.name not in in_profile:
            out[task.task_id] = (None, f"reference source {source.name} is not vendored by this profile")
            continue
        try:
            record = check_vendored(source, vendor_dir)
        except SourceError as exc:  # absent (a DigestMismatch, tampering, is not caught)
            out[task.task_id] = (None, exc.one_line())
            continue
        path = vendor_dir / record.vendor_path
        out[task.task_id] = (ReferenceScript(task.task_id, source.name, path, record.sha256, path.read_bytes()), "")
    return out
