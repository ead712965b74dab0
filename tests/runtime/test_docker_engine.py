"""The private Docker engine (pipeline/runtime/dockerd.py) and the adapter driving it, for real:
Debian's dockerd started on a socket of its own and stopped by its PID, a container run with
Docker's defaults (nothing loosened: read back from `docker inspect`), and `auto` podman
while that engine answers.

The image is made here, small: `docker import` of a tree holding a tiny /health server, run
with the host's /usr mounted read-only (the host's python3), so no base image is needed.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import urllib.request
import uuid
from pathlib import Path

import pytest

from pipeline import _daemon, config
from pipeline.runtime import dockerd, runtime
from pipeline.runtime.limits import ContainerLimits

pytestmark = [
    pytest.mark.root,
    pytest.mark.container,
    pytest.mark.skipif(not os.access(dockerd.DOCKERD, os.X_OK), reason="docker.io is not installed"),
]

DEFAULT_SOCKET = Path("/var/run/docker.sock")
IMAGE = "arena-test/health:1"
SERVER = r"""
import argparse, http.server
p = argparse.ArgumentParser()
p.add_argument("--host"); p.add_argument("--port", type=int)
a = p.parse_args()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"status": "healthy"}'
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
http.server.HTTPServer((a.host, a.port), H).serve_forever()
"""
CMD = ["/usr/bin/python3", "/srv/serve.py", "--host", "0.0.0.0", "--port", "8000"]
HOST_USR = ["--volume", "/usr:/usr:ro"]


def _image_tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in ("usr", "srv", "tmp", "etc", "workspace"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if name == "tmp" else 0o755
            tar.addfile(info)
        for link in ("bin", "lib", "lib64", "sbin"):
            info = tarfile.TarInfo(link)
            info.type, info.linkname = tarfile.SYMTYPE, f"usr/{link}"
            tar.addfile(info)
        data = SERVER.encode()
        info = tarfile.TarInfo("srv/serve.py")
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture(scope="module")
def engine():
    default_before = DEFAULT_SOCKET.exists()
    # /tmp, not tmp_path: the engine's sockets need a short path.
    root = Path(tempfile.mkdtemp(prefix="arena-dk-", dir="/tmp"))
    state = dockerd.start(root)
    try:
        yield state
    finally:
        assert dockerd.stop(root)
        assert not _daemon.alive(state.pid, "dockerd") and not _daemon.alive(state.containerd_pid, "containerd")
        assert dockerd.mounts_under(root) == []
        shutil.rmtree(root)
        assert DEFAULT_SOCKET.exists() == default_before


@pytest.fixture(scope="module")
def rt(engine):
    adapter = runtime.ContainerRuntime(config.RuntimeConfig(), engine="docker", docker=engine)
    subprocess.run(
        [*engine.client_args(), "import", "--change", f"CMD {json.dumps(CMD)}", "-", IMAGE],
        input=_image_tar(),
        check=True,
        capture_output=True,
    )
    yield adapter
    adapter.cleanup()


def test_engine_is_private_and_stops_by_its_pid(engine, tmp_path):
    assert engine.socket.parent == engine.root and engine.socket.is_socket()
    assert engine.pid == int((engine.root / "docker.pid").read_text())
    # Its containerd is its own, started with it: never a host's system containerd.
    containerd = Path(f"/proc/{engine.containerd_pid}/cmdline").read_bytes().split(b"\0")
    assert _daemon.alive(engine.containerd_pid, "containerd") and str(engine.root / "containerd.toml") in [
        a.decode() for a in containerd
    ]
    dockerd_argv = Path(f"/proc/{engine.pid}/cmdline").read_bytes().split(b"\0")
    assert str(engine.root / "exec" / "containerd" / "containerd.sock").encode() in dockerd_argv
    assert dockerd.status(engine.root) == engine  # a second start reuses it
    assert dockerd.start(engine.root).pid == engine.pid
    info = json.loads(
        subprocess.run(
            [*engine.client_args(), "info", "--format", "{{json .}}"], check=True, capture_output=True
        ).stdout
    )
    assert info["DockerRootDir"] == str(engine.root / "data")
    assert "name=seccomp,profile=default" in info["SecurityOptions"]
    assert info["ServerVersion"].startswith("20.10")
    # Another engine, started and stopped here: nothing of it is left running.
    other = Path(tempfile.mkdtemp(prefix="arena-dk-", dir="/tmp"))
    try:
        with dockerd.running(other) as state:
            assert _daemon.answers(state.socket)
            pid, containerd_pid = state.pid, state.containerd_pid
        assert not _daemon.alive(pid, "dockerd") and not _daemon.alive(containerd_pid, "containerd")
        assert dockerd.status(other) is None
        # dockerd's bind mount of the host's network namespace (exec/netns/default) goes too.
        assert dockerd.mounts_under(other) == []
        assert not (other / "docker.sock").exists()
        assert dockerd.stop(other) is False  # idempotent
    finally:
        shutil.rmtree(other, ignore_errors=True)


def test_auto_is_podman_while_a_docker_engine_answers(engine, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", engine.host)
    assert [runtime.detect("auto", quiet=True) for _ in range(3)] == ["podman"] * 3
    assert runtime.detect("docker", quiet=True) == "docker"


def test_a_container_runs_with_dockers_defaults_and_the_budgets_limits(rt):
    limits = ContainerLimits(memory_bytes=1 << 30, pids=256, cpus=1.0, workspace_bytes=64 << 20)
    container = rt.start(IMAGE, extra_args=HOST_USR, limits=limits)
    try:
        assert container.host == "127.0.0.1"
        with urllib.request.urlopen(container.url + "/health", timeout=5) as resp:
            assert json.load(resp) == {"status": "healthy"}
        security = rt.security(container)
        assert security == {
            "security_opt": [],
            "seccomp": "default",
            "cap_add": [],
            "privileged": False,
            "userns_mode": "",
            "network_mode": "host",
        }
        inspected = json.loads(rt._cli("inspect", container.id).stdout)[0]
        host = inspected["HostConfig"]
        assert host["CapAdd"] is None and host["SecurityOpt"] is None and host["Privileged"] is False
        assert host["UsernsMode"] == "" and host["CapDrop"] is None
        assert (host["Memory"], host["MemorySwap"], host["PidsLimit"], host["NanoCpus"]) == (
            1 << 30,
            1 << 30,
            256,
            1_000_000_000,
        )
        assert host["Tmpfs"] == {"/workspace": f"rw,size={64 << 20},mode=0755"}
        # The image's command, given a loopback port of its own.
        assert inspected["Args"][-4:] == ["--host", "127.0.0.1", "--port", str(container.port)]
        info = rt.engine_info()
        assert info["engine"] == "docker" and info["client"] == dockerd.DOCKER_CLIENT
        assert info["version"].startswith("20.10") and info["client_version"].startswith("20.10")
        assert "name=seccomp,profile=default" in info["security_options"]
    finally:
        rt.remove(container)
    assert rt.mine() == []


def test_loopback_command():
    assert runtime.loopback_command(CMD, 4321)[-4:] == ["--host", "127.0.0.1", "--port", "4321"]
    with pytest.raises(runtime.ContainerError, match="--port"):
        runtime.loopback_command(["python", "-m", "server", "--host", "0.0.0.0"], 1)


def test_the_layout_image_loads_into_docker_checked_by_digest(rt, tmp_path):
    from pipeline.runtime.runtime import ContainerError

    from .test_serve import _layout

    layout, img = _layout(tmp_path / "oci")
    name = f"localhost/test/serve-load:{uuid.uuid4().hex[:12]}"
    archive = tmp_path / "image.tar"
    layout.write_archive(img.manifest_digest, archive, name=name, docker=True)
    assert rt.load(archive, name, digests=(img.manifest_digest, img.config_digest)) == name
    with pytest.raises(ContainerError, match="did not load"):
        rt.load(archive, name, digests=("sha256:" + "0" * 64,))
    rt.remove_image(name)
    assert rt._cli("image", "inspect", name, check=False).returncode != 0
    rt.remove_image(name)  # already gone: fine


def test_serve_starts_the_engine_for_itself_and_stops_it(monkeypatch):
    from pipeline.runtime import serve

    root = Path(tempfile.mkdtemp(prefix="arena-dk-", dir="/tmp"))
    monkeypatch.setenv(dockerd.ROOT_VARIABLE, str(root))
    try:
        with serve.engine_runtime(config.load(), "docker") as adapter:
            assert adapter.engine == "docker" and adapter.docker.root == root
            pid = adapter.docker.pid
            assert _daemon.alive(pid, "dockerd")
        assert not _daemon.alive(pid, "dockerd") and dockerd.status(root) is None
    finally:
        dockerd.stop(root)
        shutil.rmtree(root, ignore_errors=True)


def test_setup_installs_docker_io_when_its_engine_or_client_is_missing(monkeypatch):
    from pipeline.runtime import hosttools

    present = os.access
    # Another docker first on PATH does not count: the engine and the client are looked for by path.
    monkeypatch.setattr(
        hosttools.os, "access", lambda path, mode: path != dockerd.DOCKER_CLIENT and present(path, mode)
    )
    assert hosttools.missing_packages().count("docker.io") == 1
    monkeypatch.setattr(hosttools.os, "access", lambda path, mode: path != dockerd.DOCKERD and present(path, mode))
    assert "docker.io" in hosttools.missing_packages()
    monkeypatch.setattr(hosttools.os, "access", present)
    assert "docker.io" not in hosttools.missing_packages()


def test_the_docker_engine_command_starts_shows_and_stops_it(monkeypatch, capsys):
    from pipeline import cli

    root = Path(tempfile.mkdtemp(prefix="arena-dk-", dir="/tmp"))
    try:
        assert cli.main(["docker-engine", "status", "--dir", str(root)]) == 3
        assert cli.main(["docker-engine", "start", "--dir", str(root)]) == 0
        assert cli.main(["docker-engine", "status", "--dir", str(root)]) == 0
        state = dockerd.status(root)
        assert state is not None and f"pid {state.pid}" in capsys.readouterr().out
        assert cli.main(["docker-engine", "stop", "--dir", str(root)]) == 0
        assert "docker engine stopped" in capsys.readouterr().out
        assert not _daemon.alive(state.pid, "dockerd") and not _daemon.alive(state.containerd_pid, "containerd")
    finally:
        dockerd.stop(root)
        shutil.rmtree(root, ignore_errors=True)


def test_the_last_user_stops_the_engine_and_a_kept_one_stays():
    root = Path(tempfile.mkdtemp(prefix="arena-dk-", dir="/tmp"))
    try:
        with dockerd.running(root) as outer:
            with dockerd.running(root) as inner:  # another user (a serve, a second verify) meanwhile
                assert inner.pid == outer.pid
            assert _daemon.alive(outer.pid, "dockerd"), "the engine stopped while a user still ran"
        assert not _daemon.alive(outer.pid, "dockerd") and not _daemon.alive(outer.containerd_pid, "containerd")
        kept = dockerd.start(root, keep=True)
        with dockerd.running(root) as state:
            assert state.pid == kept.pid
        assert dockerd.status(root) is not None, "a kept engine is stopped only by `docker-engine stop`"
        assert dockerd.stop(root)
    finally:
        dockerd.stop(root)
        shutil.rmtree(root, ignore_errors=True)


def test_an_engine_a_killed_run_left_is_stopped_by_the_next_and_only_then():
    # A run killed inside `running` leaves the engine up, unkept, with no user: what
    # dockerd.start alone leaves. The next release's cleanup stops it; one in use or kept stays.
    root = Path(tempfile.mkdtemp(prefix="arena-dk-", dir="/tmp"))
    try:
        left = dockerd.start(root)
        with open(root / ".users", "a") as users:
            fcntl.flock(users, fcntl.LOCK_SH)  # a verify using it meanwhile
            assert dockerd.stop_unused(root) is None and dockerd.status(root) is not None
        line = dockerd.stop_unused(root)
        assert line is not None and f"dockerd {left.pid}" in line and "a run which is gone" in line
        assert dockerd.status(root) is None and not _daemon.alive(left.pid, "dockerd")
        assert dockerd.stop_unused(root) is None  # nothing left: nothing said
        dockerd.start(root, keep=True)
        assert dockerd.stop_unused(root) is None and dockerd.status(root) is not None
    finally:
        dockerd.stop(root)
        shutil.rmtree(root, ignore_errors=True)
