"""Where a server under test is reached and where its protected files live."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Target:
    """One running server (a container or a local process) and its file layout.

    Paths are what the server sees: `app_dir` holds the environment code (root-only),
    the others are relative to it. `server_pid` is the server's PID in its own PID
    namespace (1 in a container). `host_root`, when set, is where the suite itself can
    read the server's filesystem (/proc/<host PID>/root, for a container or a contained
    server on this host); checks that must see a file no later episode could show
    (cached-terminal's marker, deleted by the next reset) look there.
    """

    url: str
    app_dir: str = "/opt/arena"
    server_code: str = "env/server/app.py"
    task_module: str = "env/families/__init__.py"
    vendored_file: str | None = None
    server_pid: int = 1
    workspace: str = "/workspace/repo"
    host_root: str | None = None
    # The container limits the runtime applied (pipeline/runtime/limits.py `expected()`), as
    # sorted pairs; empty: none were applied, and the limit-* checks do not run.
    limits: tuple[tuple[str, float], ...] = ()
    # Files the base leaves root-only under the app dir (pipeline/image/inherited.py), as
    # the server sees them; empty: the base holds none, and protected-inherited does not run.
    inherited: tuple[str, ...] = ()
    # The isolation modes this server may report in /metadata (image/isolation-mode): both,
    # unless the runtime is known to allow user namespaces (podman), where only `namespaces` is.
    isolation: tuple[str, ...] = ("namespaces", "unprivileged")

    def path(self, relative: str) -> str:
        return f"{self.app_dir.rstrip('/')}/{relative}"

    def peek(self, inside: str) -> bool | None:
        """Whether ``inside`` (a path as the server or one of its episodes sees it) exists;
        None if the suite cannot see the server's filesystem. An episode has a mount
        namespace of its own (env/server/sandbox.py): the roots of the server's
        descendants are looked at too."""
        if self.host_root is None:
            return None
        roots = [self.host_root, *(f"/proc/{pid}/root" for pid in _descendants(self.host_root))]
        return any(os.path.lexists(f"{root.rstrip('/')}/{inside.lstrip('/')}") for root in roots)

    def with_url(self, url: str) -> Target:
        """The same layout reached at another URL (another container of the image, whose
        filesystem the suite does not know: no `host_root`)."""
        return Target(
            url=url,
            app_dir=self.app_dir,
            server_code=self.server_code,
            task_module=self.task_module,
            vendored_file=self.vendored_file,
            server_pid=self.server_pid,
            workspace=self.workspace,
            limits=self.limits,
            inherited=self.inherited,
            isolation=self.isolation,
        )


def _descendants(host_root: str) -> list[int]:
    """The host PIDs of every descendant of the process whose root ``host_root`` names
    (/proc/PID/root); none for another kind of path."""
    found = re.fullmatch(r"/proc/(\d+)/root/?", host_root)
    if found is None:
        return []
    # Each thread's `children` file lists the processes it forked: only the server's own
    # tree is read, not the stat file of every process on the host (the cached-terminal
    # check asks ten times a case, while a test run may hold hundreds of processes).
    pending, seen = [int(found.group(1))], []
    while pending:
        pid = pending.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # ended meanwhile
        for tid in tasks:
            try:
                kids = Path(f"/proc/{pid}/task/{tid}/children").read_text().split()
            except OSError:
                continue
            for child in map(int, kids):
                seen.append(child)
                pending.append(child)
    return seen
