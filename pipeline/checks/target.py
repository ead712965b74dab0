"""Where a server under test is reached and where its protected files live."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """One running server (a container or a local process) and its file layout.

    Paths are what the server sees: `app_dir` holds the environment code (root-only),
    the others are relative to it. `server_pid` is the server's PID in its own PID
    namespace (1 in a container).
    """

    url: str
    app_dir: str = "/opt/arena"
    server_code: str = "env/server/app.py"
    task_module: str = "env/families/__init__.py"
    vendored_file: str | None = None
    server_pid: int = 1
    workspace: str = "/workspace/repo"

    def path(self, relative: str) -> str:
        return f"{self.app_dir.rstrip('/')}/{relative}"

    def with_url(self, url: str) -> "Target":
        """The same layout reached at another URL (another container of the image)."""
        return Target(url=url, app_dir=self.app_dir, server_code=self.server_code,
                      task_module=self.task_module, vendored_file=self.vendored_file,
                      server_pid=self.server_pid, workspace=self.workspace)
