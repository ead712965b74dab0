"""Live servers for the check-suite tests, each isolated like a container.

A server runs as root, PID 1 of its own PID, mount and IPC namespaces over an overlay
of the host's root (tests/contained.py: its /etc/passwd, /workspace and temporary
directories are private), from a root-only copy of `env/` — the image's layout on the
host: UID 2000 cannot read the code.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from pipeline.checks.target import Target
from tests.contained import ContainedProcess, require_containment, start_contained

REPO = Path(__file__).resolve().parents[2]
BROKEN = Path(__file__).resolve().parent / "broken" / "launch.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _needs_root() -> None:
    require_containment()


# Not a temporary directory: the sandbox mounts its own scratch filesystems over /tmp and
# /dev/shm, so the agent would not see the copy there at all (ENOENT, not EACCES).
APP_PARENT = Path("/srv")


@pytest.fixture(scope="session")
def app_dir() -> Iterator[Path]:
    """A root-only copy of the environment package, as /opt/arena is in the image."""
    root = Path(tempfile.mkdtemp(prefix="arena-app-", dir=APP_PARENT))
    try:
        shutil.copytree(REPO / "env", root / "env", ignore=shutil.ignore_patterns("__pycache__"))
        os.chmod(root, 0o700)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def serving(app: Path, argv: list[str], log: Path):
    """Run `argv` (a server on 127.0.0.1) isolated; yield its Target; stop it."""
    _needs_root()
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(app), "NO_PROXY": "127.0.0.1,localhost"}
    log.write_bytes(b"")
    proc = start_contained(
        log.parent / f"ns-{port}", log.parent, [a.replace("{port}", str(port)) for a in argv], cwd=app, env=env, log=log
    )
    url = f"http://127.0.0.1:{port}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with opener.open(url + "/health", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server did not start: {log.read_text(errors='replace')[-2000:]}") from None
                time.sleep(0.2)
        contained = ContainedProcess(proc)
        yield Target(url=url, app_dir=str(app), server_pid=1, host_root=f"/proc/{contained.init_pid()}/root")
    finally:
        ContainedProcess(proc).stop()


@pytest.fixture(scope="module")
def live_server(app_dir, tmp_path_factory):
    """The real server, `python -m env serve`, on a free loopback port."""
    log = tmp_path_factory.mktemp("logs") / "live.log"
    # Host mode, contained: its namespace has a private /workspace.
    with serving(
        app_dir,
        [
            sys.executable,
            "-m",
            "env",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "{port}",
            "--host-mode",
            "--workspace",
            "/workspace",
        ],
        log,
    ) as target:
        yield target


@pytest.fixture
def broken_server(app_dir, tmp_path):
    """broken_server(fault) -> context manager serving the real server with that fault."""

    def start(fault: str):
        return serving(app_dir, [sys.executable, str(BROKEN), fault, "{port}"], tmp_path / f"{fault}.log")

    return start
