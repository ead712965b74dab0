"""Collect CheckResults with their timing while a check group runs."""

from __future__ import annotations

import time
from typing import Any

from pipeline.checks.client import ServerError
from pipeline.checks.results import CheckResult


class Recorder:
    """Results of one group of checks, ids prefixed by `prefix` ("<case>" or "image")."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.results: list[CheckResult] = []
        self._mark = time.monotonic()

    def restart_clock(self) -> None:
        self._mark = time.monotonic()

    def add(self, name: str, passed: bool, *, observed: Any = None, expected: Any = None, detail: str = "") -> bool:
        now = time.monotonic()
        self.results.append(
            CheckResult(f"{self.prefix}/{name}", bool(passed), now - self._mark, observed, expected, detail)
        )
        self._mark = now
        return bool(passed)

    def not_applicable(self, name: str, reason: str) -> None:
        """Record `name` as not applicable (neither passed nor failed), saying why."""
        now = time.monotonic()
        self.results.append(CheckResult(f"{self.prefix}/{name}", False, now - self._mark, not_applicable=reason))
        self._mark = now

    def error(self, name: str, exc: ServerError, expected: Any = None) -> bool:
        """Record `name` as failed because the server answered with an error."""
        return self.add(name, False, observed=f"server error ({exc.code}): {exc}", expected=expected)
