"""Check results: the typed record of a suite run and its one writer and loader."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline._io import pretty_json, write_atomic
from pipeline.checks.shards import Shard
from pipeline.errors import VerificationError

FORMAT = "openenv-arena-checks/v1"


def _plain(value: Any) -> Any:
    """Observed/expected values as JSON (anything else becomes its repr)."""
    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError):
        return repr(value)


@dataclass(frozen=True)
class CheckResult:
    """One check: stable id, verdict, time taken; observed vs expected on failure.

    A check that cannot apply (an external task whose record carries no reference
    solution) has `not_applicable` set to the reason: it is not a pass (`passed` is
    False) and not a failure.
    """

    id: str
    passed: bool
    seconds: float
    observed: Any = None
    expected: Any = None
    detail: str = ""
    not_applicable: str = ""

    @property
    def failed(self) -> bool:
        return not self.passed and not self.not_applicable

    @property
    def outcome(self) -> str:
        """ "passed", "failed" or "not applicable: <reason>"."""
        if self.not_applicable:
            return f"not applicable: {self.not_applicable}"
        return "passed" if self.passed else "failed"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "passed": self.passed, "seconds": round(self.seconds, 3)}
        if self.not_applicable:
            out["not_applicable"] = self.not_applicable
        elif not self.passed:
            out.update(observed=_plain(self.observed), expected=_plain(self.expected))
        if self.detail:
            out["detail"] = self.detail
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CheckResult:
        return cls(
            id=d["id"],
            passed=bool(d["passed"]),
            seconds=float(d["seconds"]),
            observed=d.get("observed"),
            expected=d.get("expected"),
            detail=d.get("detail", ""),
            not_applicable=d.get("not_applicable", ""),
        )


@dataclass(frozen=True)
class SuiteResult:
    """Every check of one image (or server), in a stable order."""

    image: str
    targets: tuple[str, ...]
    checks: tuple[CheckResult, ...]
    seconds: float
    schema: dict[str, Any] = field(default_factory=dict)
    external: tuple[dict[str, Any], ...] = ()
    # (digest, compressed size) of the verified image's layers, when it was pulled.
    layers: tuple[tuple[str, int], ...] = ()
    # (digest, size) of its config blob, as its manifest declares it, when it was pulled.
    config: tuple[str, int] | None = None
    # Set on the result of one shard of a sharded run (`--shard I/N`), until merged.
    shard: Shard | None = None
    # The container runtimes the suite ran under, in order (pipeline/checks/run.py `runtime_record`):
    # each its engine, versions, security options, the isolation mode its server reported, and
    # the suffix of its check ids ("" for the first, "@<name>" for the others). Empty: the suite
    # ran against servers the suite did not start (`checks --url`).
    runtimes: tuple[dict[str, Any], ...] = ()

    @property
    def failures(self) -> tuple[CheckResult, ...]:
        return tuple(c for c in self.checks if c.failed)

    @property
    def not_applicable(self) -> tuple[CheckResult, ...]:
        return tuple(c for c in self.checks if c.not_applicable)

    @property
    def ok(self) -> bool:
        return any(c.passed for c in self.checks) and not self.failures

    def counts(self) -> dict[str, int]:
        counts = {"total": len(self.checks), "passed": sum(c.passed for c in self.checks), "failed": len(self.failures)}
        if self.not_applicable:
            # Only when there are any: records of runs without them stay as they were.
            counts["not_applicable"] = len(self.not_applicable)
        return counts

    def for_runtime(self, suffix: str) -> tuple[CheckResult, ...]:
        """The suite's checks of the runtime whose ids end in `suffix` ("" : the first runtime's,
        which carry no `@`); the external tasks' repair checks are the first runtime's."""
        if suffix:
            return tuple(c for c in self.checks if c.id.endswith(suffix))
        return tuple(c for c in self.checks if "@" not in c.id)

    def for_prefix(self, prefix: str) -> tuple[CheckResult, ...]:
        """Checks whose id starts with `prefix` (e.g. a case id plus "/")."""
        return tuple(c for c in self.checks if c.id.startswith(prefix))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "format": FORMAT,
            "image": self.image,
            "targets": list(self.targets),
            "seconds": round(self.seconds, 3),
            "summary": self.counts(),
            "schema": self.schema,
            "external": list(self.external),
            "layers": [{"digest": d, "size": n} for d, n in self.layers],
            "config": {"digest": self.config[0], "size": self.config[1]} if self.config else None,
            "checks": [c.to_json() for c in self.checks],
        }
        if self.runtimes:
            out["runtimes"] = [dict(r) for r in self.runtimes]
        if self.shard is not None:
            out["shard"] = self.shard.to_json()
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SuiteResult:
        if d.get("format") != FORMAT:
            raise VerificationError("not a check-results record", expected=FORMAT, actual=d.get("format"))
        return cls(
            image=d["image"],
            targets=tuple(d["targets"]),
            checks=tuple(CheckResult.from_json(c) for c in d["checks"]),
            seconds=float(d["seconds"]),
            schema=d.get("schema") or {},
            external=tuple(d.get("external") or ()),
            layers=tuple((x["digest"], int(x["size"])) for x in d.get("layers") or ()),
            config=(d["config"]["digest"], int(d["config"]["size"])) if d.get("config") else None,
            shard=Shard.from_json(d["shard"]) if d.get("shard") else None,
            runtimes=tuple(dict(r) for r in d.get("runtimes") or ()),
        )


def write(path: Path | str, result: SuiteResult) -> None:
    """Write dist/checks.json atomically."""
    write_atomic(Path(path), pretty_json(result.to_json()))


def load(path: Path | str, *, shard: bool = False) -> SuiteResult:
    """Read a check-results record written by `write`.

    One shard's record holds only part of the suite: it is refused unless `shard`
    (the merge), so that no release record is ever made from part of the checks.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise VerificationError(
            f"check results {path} not found", hint="run `python -m pipeline verify <image>` first"
        ) from None
    result = SuiteResult.from_json(data)
    if result.shard is not None and not shard:
        raise VerificationError(
            f"{path} holds one shard of the suite, not the whole suite",
            expected="a whole or merged check-results record",
            actual=f"shard {result.shard}",
            hint="merge every shard first: `python -m pipeline checks merge SHARD.json ...`",
        )
    if shard and result.shard is None:
        raise VerificationError(
            f"{path} is not the record of one shard",
            expected="a record with a `shard` field",
            hint="write it with `--shard I/N`",
        )
    return result
