"""The local registry: Debian's `docker-registry` behind `nginx` on loopback.

nginx lets anyone read (GET/HEAD) and demands basic auth for every write; the API
root `/v2/` also challenges so that docker/podman clients learn to send their
credentials (content reads stay anonymous). docker-registry itself has no
authentication, so it listens on a unix socket in a directory only nginx's workers
can enter, never on a TCP port another local process could reach; started as root,
nginx's workers run as an unprivileged user (`www-data`, else `nobody`). Everything lives under one directory
(default `.release/registry/`): generated configs, htpasswd, the generated password
(0600), logs, the storage and `state.json`, which other processes (tests, nox
sessions, the release) read to find the running instance.

A registry a release starts records that release as its owner (PID and start time,
pipeline.runs) in `state.json`: `stop_orphaned` stops one whose owner is gone (a killed
release), which the next release does before it looks for a running registry.

A restart reuses the previous ports, the upload secret and the credentials, so
references and interrupted uploads stay valid across `stop`/`start`.

A variant without nginx serves the same storage with docker-registry's own bearer
token auth (`token_auth=`): this is how ghcr.io answers anonymous pulls.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import shutil
import socket
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import requests

from pipeline import _daemon, runs
from pipeline._io import write_atomic, write_json_atomic
from pipeline._proc import run, which
from pipeline.config import REPO_ROOT
from pipeline.errors import ToolError
from pipeline.progress import say
from pipeline.registry.client import Credentials, RegistryClient

DEFAULT_USER = "release"
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0


def default_root() -> Path:
    """`$RELEASE_REGISTRY_DIR`, else `.release/registry` in the repository."""
    env = os.environ.get("RELEASE_REGISTRY_DIR")
    return Path(env) if env else REPO_ROOT / ".release" / "registry"


@dataclass(frozen=True)
class TokenAuth:
    """docker-registry's `auth: token` settings (the ghcr.io-like variant)."""

    realm: str
    service: str
    issuer: str
    rootcertbundle: Path


@dataclass(frozen=True)
class RegistryState:
    """A running local registry, as recorded in `<root>/state.json`."""

    root: Path
    address: str
    backend_address: str
    registry_pid: int
    nginx_pid: int
    user: str
    password_file: Path
    storage: Path
    owner: runs.Owner | None = None  # the release that started it (None: started by hand, kept)

    @property
    def password(self) -> str:
        return self.password_file.read_text().strip()

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def client(self, **kw) -> RegistryClient:
        """A client that pushes here with the registry's own credentials."""
        return RegistryClient(self.address, credentials=Credentials(self.user, self.password), **kw)


# ------------------------------------------------------------------ files


def _state_path(root: Path) -> Path:
    return root / "state.json"


def _load_state(root: Path) -> RegistryState | None:
    path = _state_path(root)
    if not path.exists():
        return None
    raw = json.loads(path.read_text())
    return RegistryState(
        root=Path(raw["root"]),
        address=raw["address"],
        backend_address=raw["backend_address"],
        registry_pid=int(raw["registry_pid"]),
        nginx_pid=int(raw["nginx_pid"]),
        user=raw["user"],
        password_file=Path(raw["password_file"]),
        storage=Path(raw["storage"]),
        owner=runs.Owner.from_json(raw.get("owner")),
    )


def _write_state(state: RegistryState) -> None:
    raw = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(state).items()}
    raw["owner"] = state.owner.to_json() if state.owner else None
    write_json_atomic(_state_path(state.root), raw)


def _secret(path: Path, nbytes: int = 24) -> str:
    """A generated secret kept 0600 in `path`, created once and then reused."""
    if not path.exists():
        write_atomic(path, (secrets.token_urlsafe(nbytes) + "\n").encode(), mode=0o600)
    return path.read_text().strip()


def ssha_htpasswd_line(user: str, password: str) -> str:
    """One htpasswd line in the `{SSHA}` scheme, which nginx's auth_basic reads."""
    salt = secrets.token_bytes(8)
    digest = hashlib.sha1(password.encode() + salt).digest()
    return f"{user}:{{SSHA}}{base64.b64encode(digest + salt).decode()}\n"


def _credentials(root: Path) -> tuple[str, str, Path]:
    """Write credentials: RELEASE_REGISTRY_USER/PASSWORD when both set, else generated."""
    pw_file = root / "password"
    user = os.environ.get("RELEASE_REGISTRY_USER")
    password = os.environ.get("RELEASE_REGISTRY_PASSWORD")
    if user and password:
        write_atomic(pw_file, (password + "\n").encode(), mode=0o600)
    else:
        user, password = DEFAULT_USER, _secret(pw_file)
    write_atomic(root / "htpasswd", ssha_htpasswd_line(user, password).encode(), mode=0o600)
    return user, password, pw_file


def _free_port(preferred: int | None) -> int:
    """`preferred` if it can be bound on loopback, else a fresh free port."""
    for candidate in ([preferred] if preferred else []) + [0]:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            return s.getsockname()[1]
    raise ToolError("no free loopback port for the local registry")


def _ports(root: Path) -> dict[str, int]:
    path = root / "ports.json"
    return json.loads(path.read_text()) if path.exists() else {}


# The unprivileged user nginx's workers run as when it is started as root.
WORKER_USERS = (("www-data", "www-data"), ("nobody", "nogroup"))
# sockaddr_un's path is 108 bytes including the terminating NUL.
_MAX_SOCKET_PATH = 107


def _worker_identity() -> tuple[str, int, int] | None:
    """(user, uid, gid) nginx's workers drop to, or None when we are not root."""
    import grp
    import pwd

    if os.geteuid() != 0:
        return None
    for user, group in WORKER_USERS:
        try:
            return user, pwd.getpwnam(user).pw_uid, grp.getgrnam(group).gr_gid
        except KeyError:
            continue
    raise ToolError(
        f"no unprivileged user for nginx's workers: none of {[u for u, _ in WORKER_USERS]} exists",
        hint="create the www-data user (Debian's base-passwd has it)",
    )


RUNTIME_PREFIX = "arena-registry-"


def _runtime_dir(root: Path, worker: tuple[str, int, int] | None) -> Path:
    """A fresh directory for what nginx's workers must reach (the backend socket, the
    htpasswd, nginx's temporary files): root and the workers' group only. As root it is
    made in /tmp, since `root` may sit below directories the workers cannot enter."""
    if worker is None:
        directory = root / "run"
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(mode=0o700)
    else:
        directory = Path(tempfile.mkdtemp(prefix=RUNTIME_PREFIX, dir="/tmp"))
        os.chown(directory, 0, worker[2])
        os.chmod(directory, 0o750)
    sock = directory / "registry.sock"
    if len(os.fsencode(sock)) > _MAX_SOCKET_PATH:
        raise ToolError(
            "the registry directory's path is too long for a unix socket",
            expected=f"at most {_MAX_SOCKET_PATH} bytes",
            actual=str(sock),
            hint="set RELEASE_REGISTRY_DIR to a shorter path",
        )
    return directory


def _remove_runtime_dir(state: RegistryState) -> None:
    if not state.backend_address.startswith("unix:"):
        return
    directory = Path(state.backend_address[len("unix:") :]).parent
    if directory.name.startswith(RUNTIME_PREFIX) or directory == state.root / "run":
        shutil.rmtree(directory, ignore_errors=True)


def _wait_socket(sock: Path, pid: int, logfile: Path, worker: tuple[str, int, int] | None) -> None:
    """Wait until docker-registry accepts on ``sock``; then let the workers' group connect."""
    _daemon.wait_ready(
        pid,
        "docker-registry",
        logfile,
        lambda: None if _daemon.answers(sock) else "no answer",
        timeout_s=START_TIMEOUT_S,
        expected=f"docker-registry listening on {sock}",
    )
    os.chmod(sock, 0o660)
    if worker is not None:
        os.chown(sock, 0, worker[2])


def _registry_config(root: Path, storage: Path, listen: tuple[str, str], token_auth: TokenAuth | None) -> Path:
    # JSON is valid YAML, and it keeps the generated file free of quoting pitfalls.
    config: dict = {
        "version": 0.1,
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {
            "filesystem": {"rootdirectory": str(storage)},
            "delete": {"enabled": True},
            "maintenance": {"uploadpurging": {"enabled": False}},
        },
        "http": {
            "net": listen[0],
            "addr": listen[1],
            # A fixed secret keeps upload sessions valid across a restart.
            "secret": _secret(root / "http-secret", 32),
            "headers": {"X-Content-Type-Options": ["nosniff"]},
        },
    }
    if token_auth is not None:
        config["auth"] = {
            "token": {
                "realm": token_auth.realm,
                "service": token_auth.service,
                "issuer": token_auth.issuer,
                "rootcertbundle": str(token_auth.rootcertbundle),
            }
        }
    path = root / "registry.yml"
    write_atomic(path, json.dumps(config, indent=2).encode(), mode=0o600)
    return path


def _nginx_config(root: Path, port: int, run_dir: Path, worker: tuple[str, int, int] | None) -> Path:
    tmp = run_dir / "nginx-tmp"
    for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (tmp / sub).mkdir(parents=True, exist_ok=True)
        if worker is not None:
            os.chown(tmp / sub, worker[1], worker[2])
    backend = run_dir / "registry.sock"
    # The workers read the htpasswd on every write request: a copy readable by their group only.
    htpasswd = run_dir / "htpasswd"
    write_atomic(htpasswd, (root / "htpasswd").read_bytes(), mode=0o640 if worker else 0o600)
    user = ""
    if worker is not None:
        os.chown(htpasswd, 0, worker[2])
        user = f"user {worker[0]} {grp_name(worker[2])};\n"
    proxy = f"""
            proxy_pass http://unix:{backend}:;
            proxy_http_version 1.1;
            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-Host $http_host;
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Real-IP $remote_addr;
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_read_timeout 900s;
            proxy_send_timeout 900s;"""
    text = f"""# generated by pipeline.registry.local; regenerated on every start
{user}daemon off;
master_process on;
worker_processes 1;
pid {root}/nginx.pid;
error_log {root}/nginx-error.log warn;
events {{ worker_connections 512; }}
http {{
    access_log {root}/nginx-access.log;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    client_max_body_size 0;
    chunked_transfer_encoding on;
    server {{
        listen 127.0.0.1:{port};
        server_name localhost;
        location = /v2/ {{
            auth_basic "arena registry";
            auth_basic_user_file {htpasswd};{proxy}
        }}
        location /v2/ {{
            limit_except GET HEAD {{
                auth_basic "arena registry";
                auth_basic_user_file {htpasswd};
            }}{proxy}
        }}
        location / {{ return 404; }}
    }}
}}
"""
    path = root / "nginx.conf"
    write_atomic(path, text.encode(), mode=0o600)
    return path


def grp_name(gid: int) -> str:
    import grp

    return grp.getgrgid(gid).gr_name


# ------------------------------------------------------------------ processes


def _wait_healthy(
    url: str, pid: int, marker: str, logfile: Path, auth: tuple[str, str] | None, ok: tuple[int, ...] = (200,)
) -> None:
    def answer() -> str | None:
        try:
            resp = requests.get(url, auth=auth, timeout=2)
        except requests.RequestException as exc:
            return type(exc).__name__
        return None if resp.status_code in ok else f"HTTP {resp.status_code}"

    _daemon.wait_ready(pid, marker, logfile, answer, timeout_s=START_TIMEOUT_S, expected=f"{url} answering HTTP 200")


def _healthy(state: RegistryState) -> bool:
    if not _daemon.alive(state.registry_pid, "docker-registry"):
        return False
    if state.nginx_pid and not _daemon.alive(state.nginx_pid, "nginx"):
        return False
    auth = (state.user, state.password) if state.nginx_pid else None
    try:
        resp = requests.get(f"http://{state.address}/v2/", auth=auth, timeout=3)
    except requests.RequestException:
        return False
    # A token-auth registry answers its API root with a bearer challenge.
    return resp.status_code == 200 or (not state.nginx_pid and resp.status_code == 401)


# ------------------------------------------------------------------ public API


def status(root: Path | None = None) -> RegistryState | None:
    """The running, healthy registry under `root`, or None."""
    state = _load_state(Path(root or default_root()))
    return state if state is not None and _healthy(state) else None


def stop(root: Path | None = None) -> bool:
    """Stop the registry under `root`; True if something was running. Idempotent."""
    root = Path(root or default_root())
    with _daemon.locked(root):
        return _stop_unlocked(root)


def _stop_unlocked(root: Path) -> bool:
    state = _load_state(root)
    if state is None:
        return False
    was_running = _daemon.alive(state.registry_pid, "docker-registry") or _daemon.alive(state.nginx_pid, "nginx")
    # nginx first: no client should reach a half-stopped backend.
    _daemon.terminate(state.nginx_pid, "nginx", timeout_s=STOP_TIMEOUT_S)
    _daemon.terminate(state.registry_pid, "docker-registry", timeout_s=STOP_TIMEOUT_S)
    _remove_runtime_dir(state)
    _state_path(root).unlink(missing_ok=True)
    return was_running


def stop_orphaned(root: Path | None = None) -> str | None:
    """Stop the registry under `root` when the release that started it is gone; the line
    that says so, or None (nothing recorded, started by hand, or its owner still runs)."""
    root = Path(root or default_root())
    if not _state_path(root).exists():
        return None
    with _daemon.locked(root):
        state = _load_state(root)
        if state is None or state.owner is None or state.owner.alive:
            return None
        running = _stop_unlocked(root)
    what = "stopped the local registry" if running else "cleared the state of the local registry"
    return (
        f"{what} (docker-registry {state.registry_pid}, nginx {state.nginx_pid}) that a release which "
        f"is gone (PID {state.owner.pid}) had started, under {root}"
    )


def corrupt_blobs(root: Path | None = None, *, storage: Path | None = None) -> list[str]:
    """Check every blob docker-registry stores under `storage` (default `<root>/storage`)
    against its digest; remove the corrupt ones (their data, so that a push uploads them
    again: the registry keeps an existing blob's bytes when the same digest is pushed) and
    return their digests. The registry holds each blob once, whichever repositories link it."""
    storage = Path(storage or Path(root or default_root()) / "storage")
    blobs = storage / "docker" / "registry" / "v2" / "blobs" / "sha256"
    bad = []
    for data in sorted(blobs.glob("*/*/data")) if blobs.is_dir() else []:
        hexdigest = data.parent.name
        h = hashlib.sha256()
        with open(data, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        if h.hexdigest() != hexdigest:
            shutil.rmtree(data.parent)
            bad.append(f"sha256:{hexdigest}")
    return bad


def start(
    root: Path | None = None,
    *,
    storage: Path | None = None,
    token_auth: TokenAuth | None = None,
    owner: runs.Owner | None = None,
) -> RegistryState:
    """Start (or reuse) the registry under `root` and return its state.

    `storage` defaults to `<root>/storage`. With `token_auth`, docker-registry itself
    demands bearer tokens and no nginx is started (the ghcr.io-like variant). `owner`: the
    release starting it, recorded so that the next release stops it should this one die
    (a registry already running keeps the owner it had).
    """
    root = Path(root or default_root()).resolve()
    with _daemon.locked(root):
        current = _load_state(root)
        if current is not None and _healthy(current):
            return current
        _stop_unlocked(root)
        return _start_unlocked(root, Path(storage or root / "storage").resolve(), token_auth, owner)


def _start_unlocked(
    root: Path, storage: Path, token_auth: TokenAuth | None, owner: runs.Owner | None = None
) -> RegistryState:
    registry_bin = which("docker-registry", package="docker-registry")
    storage.mkdir(parents=True, exist_ok=True)
    # A storage an earlier registry left is a cache like the others: checked before anything
    # is served from it, whichever command starts the registry (a release checks one that
    # already runs in its registry stage). docker-registry trusts the bytes it stored.
    corrupt = corrupt_blobs(storage=storage)
    if corrupt:
        say(
            f"removed {len(corrupt)} corrupt blob(s) from the local registry's storage "
            f"({', '.join(d[:19] for d in corrupt)}) before serving it from {storage}; the next push "
            "sends them again"
        )
    user, password, pw_file = _credentials(root)
    previous = _ports(root)
    worker = _worker_identity()
    if token_auth is None:
        # Behind nginx: docker-registry has no authentication of its own, so no TCP port.
        run_dir = _runtime_dir(root, worker)
        backend_sock = run_dir / "registry.sock"
        front = _free_port(previous.get("front"))
        listen = ("unix", str(backend_sock))
        backend_address = f"unix:{backend_sock}"
        write_json_atomic(root / "ports.json", {"front": front})
    else:
        # The ghcr.io-like variant: docker-registry's own token auth guards it.
        backend = _free_port(previous.get("backend"))
        listen = ("tcp", f"127.0.0.1:{backend}")
        backend_address = listen[1]
        write_json_atomic(root / "ports.json", {"backend": backend})

    reg_log = root / "registry.log"
    reg_conf = _registry_config(root, storage, listen, token_auth)
    reg_pid = _daemon.spawn([registry_bin, "serve", str(reg_conf)], reg_log)
    try:
        nginx_pid = 0
        if token_auth is not None:
            _wait_healthy(f"http://{backend_address}/v2/", reg_pid, "docker-registry", reg_log, None, ok=(200, 401))
            address = backend_address
        else:
            _wait_socket(backend_sock, reg_pid, reg_log, worker)
            nginx_bin = which("nginx", package="nginx-light")
            conf = _nginx_config(root, front, run_dir, worker)
            err_log = root / "nginx-error.log"
            base = [nginx_bin, "-p", str(root), "-c", str(conf), "-e", str(err_log)]
            run(base + ["-t"])
            nginx_pid = _daemon.spawn(base, err_log)
            address = f"127.0.0.1:{front}"
            _wait_healthy(f"http://{address}/v2/", nginx_pid, "nginx", err_log, (user, password))
    except BaseException:
        _daemon.terminate(reg_pid, "docker-registry", timeout_s=STOP_TIMEOUT_S)
        if "nginx_pid" in locals() and nginx_pid:
            _daemon.terminate(nginx_pid, "nginx", timeout_s=STOP_TIMEOUT_S)
        if token_auth is None:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    state = RegistryState(
        root=root,
        address=address,
        backend_address=backend_address,
        registry_pid=reg_pid,
        nginx_pid=nginx_pid,
        user=user,
        password_file=pw_file,
        storage=storage,
        owner=owner,
    )
    _write_state(state)
    return state


def endpoint(root: Path | None = None, *, start_if_needed: bool = True) -> RegistryState:
    """The running local registry (started if needed): its address, and `client()` with its
    push credentials."""
    state = status(root)
    if state is None:
        if not start_if_needed:
            raise ToolError("the local registry is not running", hint="run `python -m pipeline registry start`")
        state = start(root)
    return state


def running_address(root: Path | None = None) -> str:
    """The running local registry's `host:port` ("" when it is not running)."""
    state = status(root)
    return state.address if state is not None else ""
