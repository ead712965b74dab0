"""The audit's rows and shared state: one `Check` per check ID, failures collected, not raised."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pipeline.errors import ReleaseError, VerificationError
from pipeline.records import attest, trust

T = TypeVar("T")
PASS, FAIL, INFO, SKIPPED = "pass", "fail", "info", "skipped"


@dataclass(frozen=True)
class Check:
    """One row of the audit: a stable check ID, the record it is about, the outcome."""

    id: str
    record: str
    status: str
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status != FAIL

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "record": self.record, "status": self.status, "detail": self.detail}


class Rows:
    """Collects rows; `run` turns a ReleaseError into a failed row instead of stopping."""

    def __init__(self, skip: frozenset[str] = frozenset()) -> None:
        self.rows: list[Check] = []
        self.skip = skip

    def run(self, cid: str, record: str, fn: Callable[[], T], *, info: bool = False) -> T | None:
        if cid in self.skip:
            self.rows.append(Check(cid, record, SKIPPED, "skipped by the auditor (--skip)"))
            return None
        try:
            value = fn()
        except ReleaseError as exc:
            self.rows.append(Check(cid, record, FAIL, exc.one_line()))
            return None
        except OSError as exc:
            self.rows.append(Check(cid, record, FAIL, f"{type(exc).__name__}: {exc}"))
            return None
        except (ValueError, LookupError, TypeError, AttributeError) as exc:
            # The loaders expect the shape a release writes; a record of another shape (a JSON list
            # where an object belongs) fails here with what the parser met.
            self.rows.append(Check(cid, record, FAIL, f"{record} is malformed: {type(exc).__name__}: {exc}"))
            return None
        except RecursionError:
            # json's decoder recurses once per nesting level: a forged record of "[[[[..." must
            # fail its check, not stop the audit.
            self.rows.append(
                Check(
                    cid,
                    record,
                    FAIL,
                    f"{record} is nested too deeply to parse (RecursionError); "
                    "expected a record as a release writes it",
                )
            )
            return None
        detail = value if info and isinstance(value, str) else ""
        self.rows.append(Check(cid, record, INFO if info else PASS, detail))
        return value

    def not_checked(self, cid: str, record: str, why: str) -> None:
        if cid in self.skip:
            self.rows.append(Check(cid, record, SKIPPED, f"skipped by the auditor (--skip); {why}"))
        else:
            self.rows.append(Check(cid, record, FAIL, f"not checked: {why}"))


def equal(what: str, expected: Any, actual: Any, *, hint: str | None = None) -> None:
    if expected != actual:
        raise VerificationError(what, expected=expected, actual=actual, hint=hint)


def first_difference(expected: list[dict], actual: list[dict]) -> str | None:
    """The first resource descriptor (by name) that differs, with both sides."""
    e, a = ({d.get("name"): d for d in deps} for deps in (expected, actual))
    for name in sorted(set(e) | set(a), key=str):
        if e.get(name) != a.get(name):
            want, got = (json.dumps(x.get(name), sort_keys=True) for x in (e, a))
            return f"{name}: expected {want}, got {got}"
    return "same entries in a different order" if expected != actual else None


_ABSENT = "(absent)"


def first_path_difference(expected: Any, actual: Any, path: str) -> tuple[str, Any, Any] | None:
    """The first (path, expected, actual) where two JSON values differ, keys in sorted order."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in sorted(set(expected) | set(actual)):
            found = first_path_difference(expected.get(key, _ABSENT), actual.get(key, _ABSENT), f"{path}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        for i, (e, a) in enumerate(zip(expected, actual)):
            found = first_path_difference(e, a, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    return None if expected == actual else (path, expected, actual)


def subject_digest(stmt: dict[str, Any]) -> str:
    subjects = stmt.get("subject") or []
    if len(subjects) != 1:
        raise VerificationError("statement must have exactly one subject", expected=1, actual=len(subjects))
    return "sha256:" + str(subjects[0].get("digest", {}).get("sha256"))


@dataclass
class State:
    """What the checks have established so far (None: not established)."""

    root: Path
    att_dir: Path
    cfg: Any = None
    plan: Any = None  # the ReleasePlan of the profile the verified release statement names
    trust_root: trust.TrustRoot | None = None
    suffix: str | None = None
    signer: trust.Verified | None = None
    release: dict[str, Any] | None = None
    image: attest.Subject | None = None
    sub: Any = None
    prov: Any = None
    statements: dict[str, dict[str, Any]] | None = None
    registry: Any = None  # --registry: where the image is read (a pipeline.imageref.ImageRef)
