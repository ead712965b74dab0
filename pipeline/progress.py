"""Progress lines for long stages (bytes for transfers, cases for checks).

Written to stderr, one line per step, so that logs stay readable in CI (no carriage
returns) and a human sees that something is happening.
"""

from __future__ import annotations

import sys
import time


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Progress:
    """Report `done/total` at most every `interval` seconds, and once at the end."""

    def __init__(self, label: str, total: int | None, *, unit: str = "", interval: float = 2.0):
        self.label, self.total, self.unit, self.interval = label, total, unit, interval
        self.done = 0
        self.started = self._last = time.monotonic()

    def _fmt(self, n: int) -> str:
        if self.unit == "B":
            return f"{n / 1e6:.1f} MB"
        return f"{n}{self.unit}"

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self._last >= self.interval:
            self._last = now
            self._emit()

    def _emit(self, final: bool = False) -> None:
        total = f"/{self._fmt(self.total)}" if self.total else ""
        took = time.monotonic() - self.started
        end = f" in {took:.1f} s" if final else ""
        say(f"  {self.label}: {self._fmt(self.done)}{total}{end}")

    def finish(self) -> None:
        self._emit(final=True)
