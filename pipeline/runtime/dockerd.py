"""The private Docker engine: Debian's `dockerd` (docker.io) on a unix socket of its own.

The pipeline starts it as it starts the local registry (pipeline/registry/local.py): every
path under one directory (default `.release/docker/`, or `$RELEASE_DOCKER_DIR`): the socket
`docker.sock`, the data root `data/`, the exec root `exec/`, the pidfile `docker.pid`, the
logs `dockerd.log` and `containerd.log` and `state.json`, which other processes read to find
the running engine. The engine gets a containerd of its own, started here (its socket, root
and state under the same directory; the CRI plugin off) and named to dockerd with
`--containerd`: dockerd 20.10 would otherwise use a host's system containerd whenever
/run/containerd/containerd.sock exists. Its objects live in a containerd namespace named
after the directory. The engine makes no bridge and writes no iptables rule (`--bridge none
--iptables=false --ip6tables=false`): its containers use the host's network (`--network
host`), listening on loopback only. Processes using it at once share it (`running`), and the
last to end stops both by their PIDs (SIGTERM, then SIGKILL), dockerd first, Ctrl-C
included. A host's default daemon (/var/run/docker.sock) is never used, started or touched:
the client always gets `-H unix://<this socket>`. (containerd's shims keep their sockets in
/run/containerd/s/, a path containerd 1.6 fixes; each is removed with its container.)

The client is Debian's `/usr/bin/docker` of the same package, named by its path: another
`docker` may come first on PATH (a newer client, of another engine), and the records name
the client and engine versions that ran.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from pipeline import _daemon, _proc
from pipeline._io import write_json_atomic
from pipeline.config import REPO_ROOT
from pipeline.errors import ToolError
from pipeline.progress import say

# Debian's docker.io: the engine and its own client, by path (see the module docstring), and
# the containerd it depends on.
DOCKERD = "/usr/sbin/dockerd"
DOCKER_CLIENT = "/usr/bin/docker"
CONTAINERD = "/usr/bin/containerd"
PACKAGE = "docker.io"
ROOT_VARIABLE = "RELEASE_DOCKER_DIR"
START_TIMEOUT_S = 60.0
# dockerd stops its containers (10 s each, at once) and its containerd before it exits.
STOP_TIMEOUT_S = 30.0
# sockaddr_un's path is 108 bytes including the terminating NUL; containerd's ttrpc socket
# is the longest path under the exec root.
_MAX_SOCKET_PATH = 107
_CONTAINERD_SOCKET = "containerd/containerd.sock.ttrpc"


def default_root() -> Path:
    """`$RELEASE_DOCKER_DIR`, else `.release/docker` in the repository."""
    env = os.environ.get(ROOT_VARIABLE)
    return Path(env) if env else REPO_ROOT / ".release" / "docker"


@dataclass(frozen=True)
class EngineState:
    """A running private engine, as recorded in `<root>/state.json`."""

    root: Path
    socket: Path
    pid: int
    namespace: str
    version: str
    containerd_pid: int = 0
    # Started by `docker-engine start` to stay up: no run stops it when it ends.
    kept: bool = False

    @property
    def host(self) -> str:
        """The client's `-H` value."""
        return f"unix://{self.socket}"

    def client_args(self) -> tuple[str, ...]:
        """The client binary and its global flags for this engine."""
        return (DOCKER_CLIENT, "-H", self.host)


# Where the sockets and the exec root go when `root` is too deep for them (a checkout in a
# test's temporary directory, say): a short directory of the engine's own, named by root.
SHORT_DIR = Path("/run/arena-docker")


def _socket_dir(root: Path) -> Path:
    """`root`, or, where its sockets' paths would not fit a unix socket address, the short
    directory of this engine (one per root)."""
    if len(os.fsencode(root / "exec" / _CONTAINERD_SOCKET)) <= _MAX_SOCKET_PATH:
        return root
    return SHORT_DIR / namespace_of(root)


def _paths(root: Path) -> dict[str, Path]:
    short = _socket_dir(root)
    return {
        "socket": short / "docker.sock",
        "data": root / "data",
        "exec": short / "exec",
        "pidfile": root / "docker.pid",
        "log": root / "dockerd.log",
        "state": root / "state.json",
        "containerd": short / "exec" / "containerd" / "containerd.sock",
        "containerd_config": root / "containerd.toml",
        "containerd_log": root / "containerd.log",
    }


def namespace_of(root: Path) -> str:
    """The containerd namespace of the engine under `root`: one per directory."""
    return "arena-" + hashlib.sha256(str(root).encode()).hexdigest()[:12]


def binaries() -> tuple[str, str]:
    """(dockerd, docker client) of Debian's docker.io, or a ToolError saying how to install it."""
    for path in (DOCKERD, DOCKER_CLIENT, CONTAINERD):
        if not os.access(path, os.X_OK):
            raise ToolError(
                f"the private Docker engine needs {path}, which is not installed",
                expected=f"Debian's {PACKAGE} ({DOCKERD}, {DOCKER_CLIENT})",
                actual="missing",
                hint=f"run `python -m pipeline setup` (apt-get install {PACKAGE})",
            )
    return DOCKERD, DOCKER_CLIENT


def _load_state(root: Path) -> EngineState | None:
    path = _paths(root)["state"]
    if not path.exists():
        return None
    raw = json.loads(path.read_text())
    return EngineState(
        root=Path(raw["root"]),
        socket=Path(raw["socket"]),
        pid=int(raw["pid"]),
        namespace=raw["namespace"],
        version=raw["version"],
        containerd_pid=int(raw.get("containerd_pid", 0)),
        kept=bool(raw.get("kept", False)),
    )


def _server_version(sock: Path, timeout: float = 10) -> str | None:
    out = _proc.run(
        [DOCKER_CLIENT, "-H", f"unix://{sock}", "version", "--format", "{{.Server.Version}}"],
        check=False,
        timeout=timeout,
    )
    text = out.stdout.decode().strip()
    return text if out.returncode == 0 and text else None


def _healthy(state: EngineState) -> bool:
    return (
        _daemon.alive(state.pid, "dockerd")
        and _daemon.alive(state.containerd_pid, "containerd")
        and _server_version(state.socket) is not None
    )


def status(root: Path | None = None) -> EngineState | None:
    """The running, answering engine under `root`, or None."""
    state = _load_state(Path(root or default_root()).resolve())
    return state if state is not None and _healthy(state) else None


def start(root: Path | None = None, *, keep: bool = False) -> EngineState:
    """Start (or reuse) the private engine under `root`; its state. With `keep` (the
    `docker-engine start` command), no run that uses it stops it when it ends."""
    root = Path(root or default_root()).resolve()
    with _daemon.locked(root):
        current = _load_state(root)
        if current is not None and _healthy(current):
            if keep and not current.kept:
                current = replace(current, kept=True)
                _write_state(current)
            return current
        _stop_unlocked(root)
        return _start_unlocked(root, keep=keep)


def _write_state(state: EngineState) -> None:
    write_json_atomic(
        _paths(state.root)["state"], {k: str(v) if isinstance(v, Path) else v for k, v in asdict(state).items()}
    )


def _containerd_config(paths: dict[str, Path]) -> Path:
    """containerd's config: everything under the engine's directory, the CRI plugin off."""
    sock = paths["containerd"]
    text = "\n".join(
        [
            "# generated by pipeline.runtime.dockerd; rewritten on every start",
            "version = 2",
            f'root = "{paths["data"] / "containerd"}"',
            f'state = "{paths["exec"] / "containerd-state"}"',
            'disabled_plugins = ["io.containerd.grpc.v1.cri"]',
            "[grpc]",
            f'  address = "{sock}"',
            "[ttrpc]",
            f'  address = "{sock}.ttrpc"',
            "[debug]",
            '  address = ""',
            "[metrics]",
            '  address = ""',
            "",
        ]
    )
    paths["containerd_config"].write_text(text)
    return paths["containerd_config"]


def _spawn(argv: list[str], log_path: Path) -> int:
    return _daemon.spawn(argv, log_path, env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")})


def _start_unlocked(root: Path, *, keep: bool = False) -> EngineState:
    dockerd, _ = binaries()
    paths = _paths(root)
    longest = paths["exec"] / _CONTAINERD_SOCKET
    if len(os.fsencode(longest)) > _MAX_SOCKET_PATH:
        raise ToolError(
            "the Docker engine's directory is too long for its unix sockets",
            expected=f"at most {_MAX_SOCKET_PATH} bytes",
            actual=str(longest),
            hint=f"set {ROOT_VARIABLE} to a shorter path",
        )
    for key in ("data", "exec"):
        paths[key].mkdir(parents=True, exist_ok=True, mode=0o700)
    paths["socket"].parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    paths["containerd"].parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    for sock in (paths["socket"], paths["containerd"]):
        sock.unlink(missing_ok=True)
    namespace = namespace_of(root)
    containerd_pid = _spawn(
        [CONTAINERD, "--config", str(_containerd_config(paths)), "--log-level", "warn"], paths["containerd_log"]
    )
    pid = 0
    version = None
    try:
        _daemon.wait_ready(
            containerd_pid,
            "containerd",
            paths["containerd_log"],
            lambda: None if _daemon.answers(paths["containerd"]) else "no answer",
            timeout_s=START_TIMEOUT_S,
            expected="containerd answering",
            interval_s=0.2,
        )
        pid = _spawn(
            [
                dockerd,
                "--host",
                f"unix://{paths['socket']}",
                "--data-root",
                str(paths["data"]),
                "--exec-root",
                str(paths["exec"]),
                "--pidfile",
                str(paths["pidfile"]),
                "--containerd",
                str(paths["containerd"]),
                "--containerd-namespace",
                namespace,
                "--containerd-plugins-namespace",
                f"{namespace}-plugins",
                "--bridge",
                "none",
                "--iptables=false",
                "--ip6tables=false",
                "--ip-masq=false",
                "--userland-proxy=false",
                "--group",
                "root",
                "--log-level",
                "warn",
            ],
            paths["log"],
        )

        def ready() -> str | None:
            nonlocal version
            version = _server_version(paths["socket"]) if paths["socket"].exists() else None
            return None if version is not None else "no answer"

        _daemon.wait_ready(
            pid,
            "dockerd",
            paths["log"],
            ready,
            timeout_s=START_TIMEOUT_S,
            expected="dockerd answering `docker version`",
            interval_s=0.2,
        )
    except BaseException:
        if pid:
            _daemon.terminate(pid, "dockerd", timeout_s=STOP_TIMEOUT_S)
        _daemon.terminate(containerd_pid, "containerd", timeout_s=STOP_TIMEOUT_S)
        raise
    state = EngineState(
        root=root,
        socket=paths["socket"],
        pid=pid,
        namespace=namespace,
        version=str(version),
        containerd_pid=containerd_pid,
        kept=keep,
    )
    _write_state(state)
    return state


def stop(root: Path | None = None) -> bool:
    """Stop the engine under `root` by its PID; True if it was running. Idempotent."""
    root = Path(root or default_root()).resolve()
    with _daemon.locked(root):
        return _stop_unlocked(root)


def _stop_unlocked(root: Path) -> bool:
    paths = _paths(root)
    state = _load_state(root)
    pids = {state.pid} if state is not None else set()
    with contextlib.suppress(OSError, ValueError):
        pids.add(int(paths["pidfile"].read_text().strip()))
    running = [pid for pid in pids if _daemon.alive(pid, "dockerd")]
    for pid in running:  # dockerd first: it stops its containers through containerd
        _daemon.terminate(pid, "dockerd", timeout_s=STOP_TIMEOUT_S)
    if state is not None and _daemon.alive(state.containerd_pid, "containerd"):
        running.append(state.containerd_pid)
        _daemon.terminate(state.containerd_pid, "containerd", timeout_s=STOP_TIMEOUT_S)
    _unmount_under(root)
    if paths["exec"].parent != root:  # the short directory: the engine's alone, gone with it
        _unmount_under(paths["exec"].parent)
        shutil.rmtree(paths["exec"].parent, ignore_errors=True)
    paths["state"].unlink(missing_ok=True)
    paths["socket"].unlink(missing_ok=True)
    paths["containerd"].unlink(missing_ok=True)
    return bool(running)


def mounts_under(root: Path) -> list[str]:
    """Mount points below `root` (this process's view, /proc/self/mountinfo), deepest first."""
    prefix = str(root).rstrip("/") + "/"
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])
        if point.startswith(prefix):
            found.append(point)
    return sorted(set(found), key=lambda p: (-p.count("/"), p))


def _unmount_under(root: Path) -> None:
    """Unmount what the stopped engine left mounted below its directory: dockerd bind-mounts the
    host's network namespace at `<exec root>/netns/default` and never unmounts it (and a killed
    engine leaves its containers' overlays). Each is the engine's own, below `root`; nothing else
    is touched."""
    for point in mounts_under(root):
        _proc.run(["umount", "--lazy", point], check=False, timeout=60)


@contextlib.contextmanager
def running(root: Path | None = None) -> Iterator[EngineState]:
    """The engine under `root` for the duration of the block, shared with every other process
    using it at the time (a release's verify stage, a serve, a sharded verify beside another):
    started if it was not running; stopped on the way out (Ctrl-C included) by the last user
    to leave, unless `docker-engine start` keeps it. Each user holds a shared lock on
    `<root>/.users` while it runs; the one that can take it exclusively is the last."""
    root = Path(root or default_root()).resolve()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".users", "a") as users:
        fcntl.flock(users, fcntl.LOCK_SH)
        try:
            before = status(root)
            state = start(root)
            say(
                f"    private Docker engine {state.version} at {state.host} (pid {state.pid})"
                + (", already running" if before is not None and before.pid == state.pid else "")
            )
            yield state
        finally:
            fcntl.flock(users, fcntl.LOCK_UN)
    if _leave(root):
        say("    stopped the private Docker engine (its last user ended)")


def stop_unused(root: Path | None = None) -> str | None:
    """Stop the engine under `root` when no process uses it and `docker-engine start` did not
    keep it: what a run killed while it used the engine left running. The line that says
    so, or None."""
    root = Path(root or default_root()).resolve()
    state = _load_state(root)
    if state is None or state.kept or not _leave(root):
        return None
    return (
        f"stopped the private Docker engine (dockerd {state.pid}, containerd {state.containerd_pid}) "
        f"that a run which is gone had started, under {root}"
    )


def _leave(root: Path) -> bool:
    """Stop the engine under `root` if no process uses it any more and it is not kept; True if
    it was stopped."""
    with _daemon.locked(root), open(root / ".users", "a") as users:
        try:
            fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # another process uses it: the last one stops it
        try:
            state = _load_state(root)
            return state is not None and not state.kept and _stop_unlocked(root)
        finally:
            fcntl.flock(users, fcntl.LOCK_UN)
