"""Which worker runs what next: pytest-xdist's `loadgroup`, without hoarding long tests.

xdist sends a worker its next unit (a test, or a group of tests that share a module
fixture) while it still has two pending, so a worker that runs a long test has two more
queued behind it. When those are long too (the end-to-end releases, one to three minutes
each on two cores), they wait for that one worker while the others run out of work: a run
ended with one worker running three releases in a row for 90 s after the other five were
done. Here a worker is sent its next unit when it has one pending (the one it runs; the
queued one is what it needs to run it), and a worker busy with a slow test is sent the
first unit with no slow test in the queue: the slow units stay for the worker that is free
first. The order of the queue is still tests/conftest.py's (`pytest_collection_modifyitems`).

Which tests are slow is what the workers' collection marked (`slow`); the workers write it
into the run's temporary root (`write_slow`) before the controller starts scheduling.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from xdist.scheduler import LoadGroupScheduling

SLOW_FILE = "schedule-slow.json"


def write_slow(run_root: Path, nodeids: Iterable[str]) -> None:
    """Record the slow tests (every worker writes the same list; the last write wins)."""
    run_root.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=run_root, prefix=".schedule-")
    with os.fdopen(fd, "w") as out:
        json.dump(sorted(nodeids), out)
    os.replace(tmp, run_root / SLOW_FILE)


def _without_group(nodeid: str) -> str:
    # loadgroup appends `@<group>` to a grouped test's id (after any parameter brackets).
    return nodeid.rsplit("@", 1)[0] if nodeid.rfind("@") > nodeid.rfind("]") else nodeid


class SlowAwareScheduling(LoadGroupScheduling):
    """`--dist loadgroup` that queues one unit per worker and keeps slow units for free
    workers."""

    def __init__(self, config, log=None, run_root: Path | None = None) -> None:
        super().__init__(config, log)
        self.run_root = run_root
        self._slow: set[str] | None = None

    def _is_slow(self, nodeid: str) -> bool:
        if self._slow is None:
            path = self.run_root / SLOW_FILE if self.run_root else None
            self._slow = set(json.loads(path.read_text())) if path and path.exists() else set()
        return _without_group(nodeid) in self._slow

    def _running_slow(self, node) -> bool:
        return any(
            not done and self._is_slow(nodeid)
            for unit in self.assigned_work.get(node, {}).values()
            for nodeid, done in unit.items()
        )

    def _reschedule(self, node) -> None:
        if node.shutting_down:
            return
        if not self.workqueue:
            node.shutdown()
            return
        if self._pending_of(self.assigned_work[node]) > 1:
            return
        self._assign_work_unit(node)

    def _assign_work_unit(self, node) -> None:
        if self._running_slow(node):
            fast = next(
                (scope for scope, unit in self.workqueue.items() if not any(self._is_slow(nodeid) for nodeid in unit)),
                None,
            )
            if fast is not None:
                self.workqueue.move_to_end(fast, last=False)
        super()._assign_work_unit(node)
