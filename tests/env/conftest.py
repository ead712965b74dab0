"""Live environment servers for the server tests.

`start_server` runs the real app under uvicorn in a child process on a free loopback
port (as root: the shell drops to UID 2000), contained in its own PID, mount and IPC
namespaces over an overlay of the host's root (tests/contained.py): its resets kill,
delete and add users only inside. `LiveServer.session()` drives it with openenv-core's
own WebSocket client (GenericEnvClient and its sync wrapper); `LiveServer.path` and
`.pid_alive` look into the server's namespace. The `server` fixture is one such process
with a 3 s shell timeout, shared by a module.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from openenv.core.generic_client import GenericEnvClient
from openenv.core.sync_client import SyncEnvClient

from pipeline.checks.repair import HEALTH_WITHIN_S
from tests.contained import ContainedProcess, require_containment, start_contained
from tests.forked_server import Forked

REPO_ROOT = Path(__file__).resolve().parents[2]
TEST_SHELL_TIMEOUT_S = 3.0

# Runs in the server process: build the app with the factory (so the shell timeout
# can be shortened), record the imported modules at shutdown, serve. A fault (one of
# tests/checks/broken/launch.py's PATCHES) removes one defence first, for a teeth test.
LAUNCHER = """
import json, resource, sys
from env.server.app import create_server_app
from env.server.serve import run
from env.server.environment import ServerConfig
port, tasks_file, modules_out, nofile, fault = sys.argv[1], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
timeout_s = float(sys.argv[2])
if nofile:
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(nofile), int(nofile)))
if fault:
    from tests.checks.broken.launch import PATCHES
    PATCHES[fault]()
app = create_server_app(tasks_file or None, ServerConfig(shell_timeout_s=timeout_s))
def record_modules():
    with open(modules_out, "w") as out:
        json.dump(sorted(sys.modules), out)
app.router.on_shutdown.append(record_modules)
run(app, host="127.0.0.1", port=int(port), log_level="warning")
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, {}


def _status(pid: int) -> dict[str, list[str]]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.split()
    return fields


SIGKILL_BIT = 1 << (9 - 1)


def _killed(fields: dict[str, list[str]]) -> bool:
    """Whether a process has SIGKILL pending (killed, not yet gone: reset retires the last
    episode's sandbox so, and the kernel tears it down a moment later)."""
    return any(int(fields[key][0], 16) & SIGKILL_BIT for key in ("SigPnd", "ShdPnd"))


# A reset kills the last episode's PID 1 and answers; the kernel kills the namespace's
# other processes as that PID 1 exits, a moment later (env/server/sandbox.py).
TEARDOWN_S = 10.0


def after_teardown(probe: Callable[[], list]) -> list:
    """What ``probe`` finds once it finds nothing, or once a killed sandbox has had
    TEARDOWN_S to go."""
    deadline = time.monotonic() + TEARDOWN_S
    while True:
        found = probe()
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.01)


def alive_after_teardown(pids: list[int]) -> list[int]:
    """Those of ``pids`` still alive once a killed sandbox has had TEARDOWN_S to go."""
    return after_teardown(lambda: [pid for pid in pids if host_pid_alive(pid)])


def host_pid_alive(pid: int) -> bool:
    """Whether the host has a live (non-zombie) process ``pid``."""
    try:
        return _status(pid)["State"][0] != "Z"
    except (OSError, KeyError, IndexError):
        return False


def pids_in(pid_namespace: str) -> list[int]:
    """Host PIDs of the live processes of a PID namespace."""
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.readlink(f"/proc/{name}/ns/pid") == pid_namespace and host_pid_alive(int(name)):
                    pids.append(int(name))
            except OSError:
                continue
    return pids


@dataclass
class LiveServer:
    """A running server process and how to talk to it."""

    url: str
    process: subprocess.Popen | Forked
    log_path: Path
    modules_path: Path

    @property
    def contained(self) -> ContainedProcess:
        return ContainedProcess(self.process)

    @property
    def sandbox_id(self) -> int:
        """The server's UID and GID 2000 as this process sees them (`os.stat`, /proc/PID/status):
        a host ID of the server's own (tests/userns_exec.py)."""
        return self.contained.host_id(2000)

    def path(self, inside: str | os.PathLike) -> Path:
        """A path as the current episode's commands see it (e.g. /workspace/repo, /tmp),
        openable by the test; before the first reset, as the server sees it."""
        init = self.episode_init()
        if init is None:
            return self.contained.path(inside)
        return Path(f"/proc/{init}/root") / os.fspath(inside).lstrip("/")

    def episode_init(self) -> int | None:
        """The host PID of the current episode's PID 1 (env/server/nsinit.py), if any.

        The server holds two live sandboxes: the current episode's and the next one, made
        after it (env/server/sandbox.py); the current one is the older. Ended ones, killed
        and being reaped, are not counted."""
        found = self.sandbox_inits()
        return found[0] if found else None

    def sandbox_inits(self) -> list[int]:
        """Host PIDs of the sandboxes' PID 1s, oldest first."""
        server_ns = os.readlink(f"/proc/{self.contained.init_pid()}/ns/pid")
        found = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                if b"nsinit.py" not in Path(f"/proc/{name}/cmdline").read_bytes():
                    continue
                fields = _status(int(name))
                if fields["NSpid"][-1] != "1" or len(fields["NSpid"]) < 2:
                    continue
                if os.readlink(f"/proc/{fields['PPid'][0]}/ns/pid") != server_ns:
                    continue
                if _killed(fields):
                    continue  # an ended episode's, being reaped in the background
                started = int(Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[19])
            except (OSError, KeyError, IndexError):
                continue
            found.append((started, int(name)))
        return [pid for _, pid in sorted(found)]

    def episode_pid_namespace(self) -> str | None:
        """The current episode's PID namespace (as /proc/PID/ns/pid names it)."""
        init = self.episode_init()
        return None if init is None else os.readlink(f"/proc/{init}/ns/pid")

    def episode_pids(self) -> list[int]:
        """Host PIDs of the current episode's processes other than its PID 1."""
        init = self.episode_init()
        if init is None:
            return []
        return [pid for pid in pids_in(os.readlink(f"/proc/{init}/ns/pid")) if pid != init]

    def client(self, message_timeout_s: float = 60.0) -> SyncEnvClient:
        """A connected sync client (its session is the server's one session)."""
        return GenericEnvClient(base_url=self.url, message_timeout_s=message_timeout_s).sync().connect()

    @contextmanager
    def session(self, message_timeout_s: float = 60.0) -> Iterator[SyncEnvClient]:
        """A client whose session has been accepted, waiting briefly for the previous one to end."""
        deadline = time.monotonic() + 10
        while True:
            client = self.client(message_timeout_s)
            try:
                client.state()
                break
            except RuntimeError as exc:
                client.close()
                if "CAPACITY_REACHED" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        try:
            yield client
        finally:
            client.close()

    def get(self, path: str) -> tuple[int, dict]:
        """GET ``path``: (HTTP status, JSON body)."""
        return http_get(self.url + path)

    def healthy(self) -> bool:
        return self.get("/health") == (200, {"status": "healthy"})

    @staticmethod
    def write_command(name: str, text: str) -> str:
        """A shell command that writes ``text`` (plus a newline) to ``name`` verbatim."""
        return f"cat > {name} <<'ARENA_EOF'\n{text}\nARENA_EOF"

    def stop(self) -> list[str]:
        """Stop the server; return the modules it had imported."""
        self.contained.stop()
        if self.modules_path.exists():
            return json.loads(self.modules_path.read_text())
        return []


def start_server(
    workdir: Path,
    *,
    tasks_file: str | None = None,
    shell_timeout_s: float = TEST_SHELL_TIMEOUT_S,
    python: list[str] | None = None,
    pythonpath: str | None = None,
    nofile: int | None = None,
    isolation: str | None = None,
    fault: str | None = None,
) -> LiveServer:
    """Start the app in a child process and wait until /health answers (``nofile``: its
    descriptor limit, as a container run with the budget's limits has; ``fault``: a
    defence removed, tests/checks/broken/launch.py's PATCHES)."""
    port = free_port()
    log_path = workdir / f"server-{port}.log"
    modules_path = workdir / f"modules-{port}.json"
    env = {k: v for k, v in os.environ.items() if k != "ARENA_TASKS_FILE"}
    env["PYTHONPATH"] = pythonpath if pythonpath is not None else str(REPO_ROOT)
    if isolation is not None:
        env["ARENA_ISOLATION"] = isolation
    log_path.write_bytes(b"")
    argv = [
        *(python or [sys.executable]),
        "-c",
        LAUNCHER,
        str(port),
        str(shell_timeout_s),
        tasks_file or "",
        str(modules_path),
        str(nofile or ""),
        fault or "",
    ]
    process = start_contained(workdir / f"ns-{port}", workdir, argv, cwd=workdir, env=env, log=log_path)
    server = LiveServer(f"http://127.0.0.1:{port}", process, log_path, modules_path)
    deadline = time.monotonic() + HEALTH_WITHIN_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}:\n{log_path.read_text()}")
        try:
            if server.healthy():
                return server
        except OSError:
            pass
        time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"server did not become healthy in {HEALTH_WITHIN_S:g} s:\n{log_path.read_text()}")


def require_root() -> None:
    require_containment()


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[LiveServer]:
    """One live server (3 s shell timeout) for a test module."""
    require_root()
    live = start_server(tmp_path_factory.mktemp("server"))
    try:
        yield live
    finally:
        live.stop()


@pytest.fixture(scope="session")
def oracle_json():
    """Function: case ID -> the case's reference answer as JSON text (first-party oracle)."""
    from env.catalog import make_case, parse_case_id
    from env.loader import load_task_module

    tasks = load_task_module()

    def answer(case_id: str) -> str:
        return json.dumps(tasks.oracle_answer(make_case(tasks, parse_case_id(case_id))))

    return answer


@pytest.fixture
def start_live_server(tmp_path) -> Iterator:
    """Function: start_server(**options) for servers that a test configures itself; stopped after it."""
    require_root()
    started: list[LiveServer] = []

    def start(**options) -> LiveServer:
        live = start_server(tmp_path, **options)
        started.append(live)
        return live

    yield start
    for live in started:
        live.stop()
