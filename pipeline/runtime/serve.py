"""`python -m pipeline serve`: the environment as users run it, the built image in a container.

By default the image of the last build (`dist/build.json`) is served from the OCI layout
the build wrote (`dist/oci`, the bytes the release verified): every blob is checked
against its digest, the image is loaded into the container engine as an OCI archive, and
the engine's id of it is checked again. No registry is involved, so it works right after
`nox -s release`, which stops the registry it started. `--image name@sha256:...` pulls
that image from its registry instead. The container runs under the procedural budget's
limits (pipeline/runtime/limits.py) with its port on 127.0.0.1:`--port` (release.toml's
`port`, or `RELEASE_SERVE_PORT`); the URL is printed, Ctrl-C stops and removes it.
`--engine docker` serves it with the pipeline's private Docker engine (pipeline/runtime/dockerd.py)
under Docker's defaults, on the host's network with the server on that loopback port; the
engine is started for it and stopped with it, unless it was already running.
`--host-mode` serves on this host instead, for development: from a root-only copy of
env/ (so UID 2000 cannot read the code or the task module) with its own workspace under
`.release/serve-host/`; the server lists what it changes on the host before it starts.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from pipeline import config as config_mod
from pipeline._io import write_atomic
from pipeline.curriculum import CURRICULUM_PATH, Curriculum
from pipeline.errors import ConfigError, ReleaseError
from pipeline.image.build import BuildRecord, load_record
from pipeline.image.imageconfig import TASKS_FILE_VARIABLE
from pipeline.image.oci import digest as oci_digest
from pipeline.image.oci.layout import Layout
from pipeline.progress import say
from pipeline.runtime import dockerd
from pipeline.runtime.limits import ContainerLimits
from pipeline.runtime.runtime import ContainerRuntime

HOST_DIR = config_mod.REPO_ROOT / ".release" / "serve-host"
PORT_VARIABLE = "RELEASE_SERVE_PORT"


def serve_port(cfg: config_mod.ReleaseConfig, requested: int | None, environ: Mapping[str, str] = os.environ) -> int:
    """The loopback port to serve on: `--port`, else $RELEASE_SERVE_PORT, else release.toml's."""
    if requested is not None:
        return requested
    raw = environ.get(PORT_VARIABLE)
    if raw is None:
        return cfg.port
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise ConfigError(
            f"{PORT_VARIABLE} is not a port number",
            expected="1..65535",
            actual=raw,
            hint=f"unset it to serve on {cfg.port}",
        )
    return int(raw)


def check_port_free(host_port: int) -> None:
    """Refuse, with the command that serves elsewhere, a loopback port something else holds."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", host_port))
        except OSError as exc:
            raise ConfigError(
                f"cannot serve on 127.0.0.1:{host_port}: {exc.strerror}",
                hint=f"serve on another port: `nox -s serve -- --port {host_port + 1}` (and give the client that URL)",
            ) from None


def built_record(record: Path) -> BuildRecord:
    """The record of the last build (dist/build.json)."""
    if not record.exists():
        raise ConfigError(f"nothing to serve: no build record at {record}", hint="run `nox -s release` first")
    return load_record(record)


def local_name(record: BuildRecord) -> str:
    """The engine-local name the built image is loaded as: its repository (without a registry
    host) and its manifest digest as the tag, so a name never stands for two images."""
    first, _, rest = record.repository.partition("/")
    path = rest if rest and ("." in first or ":" in first or first == "localhost") else record.repository
    return f"localhost/{path}:sha256-{oci_digest.hex_of(record.manifest_digest)}"


def load_built(runtime: ContainerRuntime, record: BuildRecord) -> str:
    """Load the built image from its OCI layout into the engine, checked by digest; its name."""
    name = local_name(record)
    scratch = config_mod.REPO_ROOT / ".release"
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="serve-", dir=scratch) as tmp:
        archive = Path(tmp) / "image.tar"
        try:
            Layout.open(Path(record.layout)).write_archive(
                record.manifest_digest, archive, name=name, docker=runtime.engine == "docker"
            )
        except ReleaseError as exc:
            raise ConfigError(
                f"the built image {record.manifest_digest} is not intact in {record.layout}: {exc.what}",
                expected=exc.expected,
                actual=exc.actual,
                hint="run `nox -s release` again",
            ) from None
        return runtime.load(archive, name, digests=(record.manifest_digest, record.config_digest))


def serve_container(
    runtime: ContainerRuntime, image: str, cfg: config_mod.ReleaseConfig, *, host_port: int, what: str
) -> int:
    """Run `image` (already in the engine) on 127.0.0.1:`host_port` until Ctrl-C or it exits."""
    check_port_free(host_port)
    # A service manager (or a test) stops with SIGTERM: remove the container then too.
    signal.signal(signal.SIGTERM, _interrupt)
    container = runtime.start(
        image, port=cfg.port, host_port=host_port, limits=ContainerLimits.from_budgets(cfg.budgets["procedural"])
    )
    say(f"serving {what} at {container.url} (container {container.id[:12]}); Ctrl-C stops it")
    try:
        while runtime.exists(container.id):
            time.sleep(1)
        say("the container exited:\n" + runtime.logs(container, tail=30))
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        # A second Ctrl-C (or nox's SIGTERM) must not cut the removal short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        runtime.remove(container)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def engine_runtime(cfg: config_mod.ReleaseConfig, engine: str | None) -> Iterator[ContainerRuntime]:
    """The adapter for `engine` (default: [runtime] engine); for docker, the private engine runs
    while the block does (started here and stopped on the way out, Ctrl-C included, unless it
    was running before)."""
    choice = engine or cfg.runtime.engine_choice()
    if choice != "docker":
        yield ContainerRuntime(cfg.runtime, engine=choice)
        return
    # The engine is stopped after the container: SIGINT/SIGTERM are ignored from the removal on.
    with dockerd.running() as state:
        yield ContainerRuntime(cfg.runtime, engine="docker", docker=state)


def serve_built(record_path: Path, cfg: config_mod.ReleaseConfig, *, host_port: int, engine: str | None = None) -> int:
    record = built_record(record_path)
    check_port_free(host_port)
    with engine_runtime(cfg, engine) as runtime:
        image = load_built(runtime, record)
        return serve_container(
            runtime,
            image,
            cfg,
            host_port=host_port,
            what=f"{record.repository}@{record.manifest_digest} (from {record.layout})",
        )


def serve_pulled(image: str, cfg: config_mod.ReleaseConfig, *, host_port: int, engine: str | None = None) -> int:
    check_port_free(host_port)
    with engine_runtime(cfg, engine) as runtime:
        runtime.pull(image)
        return serve_container(runtime, image, cfg, host_port=host_port, what=image)


def root_only_copy(source: Path, target: Path) -> Path:
    """``source`` copied to ``target`` with directories 0700 and files 0600, as in the image."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    for directory, _, files in os.walk(target):
        os.chmod(directory, 0o700)
        for name in files:
            os.chmod(os.path.join(directory, name), 0o600)
    return target


def serve_host(port: int, tasks_file: str | None, curriculum: Curriculum) -> int:
    """The server run on this host from a root-only copy of env/, serving `curriculum` as the
    image would (its env/curriculum.json)."""
    if os.geteuid() != 0:
        raise ConfigError(
            "host mode needs root (the shell drops every command to UID 2000)",
            actual=f"uid {os.geteuid()}",
            hint="run as root, or serve the image (no --host-mode)",
        )
    app = HOST_DIR / "app"
    app.mkdir(parents=True, exist_ok=True)
    os.chmod(app, 0o700)
    root_only_copy(config_mod.REPO_ROOT / "env", app / "env")
    write_atomic(app / CURRICULUM_PATH, curriculum.file_bytes(), mode=0o600)
    argv = [
        sys.executable,
        "-m",
        "env",
        "serve",
        "--host-mode",
        "--port",
        str(port),
        "--workspace",
        str(HOST_DIR / "workspace"),
    ]
    if tasks_file:
        argv += ["--tasks", str(root_only_copy_file(Path(tasks_file), app / "vendor" / "tasks.py"))]
    env = {k: v for k, v in os.environ.items() if k != TASKS_FILE_VARIABLE}
    env["PYTHONPATH"] = str(app)
    return subprocess.run(argv, env=env, cwd=app).returncode


def root_only_copy_file(source: Path, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    shutil.copyfile(source, target)
    os.chmod(target, 0o600)
    return target
