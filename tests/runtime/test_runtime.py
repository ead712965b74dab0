"""The container runtime adapter against real podman/docker and the real base image."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from pipeline import config
from pipeline.errors import ToolError
from pipeline.runtime import runtime

# `slow` where the base image is needed (tests/conftest.py marks those).
pytestmark = [pytest.mark.root, pytest.mark.container]

PROBE_DIR = Path(__file__).resolve().parent.parent / "base"
SERVE = ["/opt/arena-python/bin/python3", "-m", "uvicorn", "probe_app:app", "--host", "0.0.0.0", "--port", "8000"]
MOUNT = ["--volume", f"{PROBE_DIR}:/probe:ro", "--workdir", "/probe"]


@pytest.fixture(scope="module")
def rt():
    adapter = runtime.ContainerRuntime()
    yield adapter
    adapter.cleanup()


@pytest.fixture(scope="module")
def image(rt, base_image, local_registry):
    return rt.pull(base_image.pull_reference(local_registry.address))


def test_settings_come_from_release_toml_and_env():
    cfg = config.load().runtime
    podman = cfg.args_for("podman", environ={})
    assert "--runtime" in podman.global_args
    assert "nofile=1024:1024" in podman.run_args
    overridden = cfg.args_for("podman", environ={"RELEASE_RUNTIME_RUN_ARGS": "--ulimit nofile=64:64"})
    assert overridden.run_args == ("--ulimit", "nofile=64:64")
    # One engine's own variable wins, and leaves the other engine's flags alone.
    own = {"RELEASE_RUNTIME_DOCKER_RUN_ARGS": "--label x=1", "RELEASE_RUNTIME_RUN_ARGS": "--ulimit nofile=64:64"}
    assert cfg.args_for("docker", environ=own).run_args == ("--label", "x=1")
    assert cfg.args_for("podman", environ=own).run_args == ("--ulimit", "nofile=64:64")
    assert cfg.args_for("docker", environ={"RELEASE_RUNTIME_PODMAN_RUN_ARGS": "--label y=2"}).run_args == ()
    assert cfg.engine_choice({"RELEASE_RUNTIME_ENGINE": "podman"}) == "podman"
    with pytest.raises(config.ConfigError):
        cfg.engine_choice({"RELEASE_RUNTIME_ENGINE": "lxc"})
    # The release verifies under podman and the private Docker engine unless told otherwise.
    assert cfg.verify_engines({}) == ("podman", "docker")
    assert cfg.verify_engines({"RELEASE_RUNTIME_VERIFY": "docker"}) == ("docker",)
    for wrong in ("", "podman,podman", "podman,lxc"):
        with pytest.raises(config.ConfigError, match="the engines to verify under"):
            cfg.verify_engines({"RELEASE_RUNTIME_VERIFY": wrong})


def test_auto_is_podman_whatever_daemon_answers(monkeypatch):
    # A daemon answering on DOCKER_HOST (or the default socket) no longer picks docker:
    # tests/runtime/test_docker_engine.py runs this with a private engine answering.
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    assert runtime.detect("auto") == "podman"
    assert runtime.ContainerRuntime(config.RuntimeConfig(engine="auto")).engine == "podman"


def test_missing_engine_binary_is_a_tool_error(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ToolError, match="podman"):
        runtime.detect("podman")


def test_pull_requires_a_digest(rt):
    with pytest.raises(runtime.ContainerError, match="by digest"):
        rt.pull("127.0.0.1:5000/arena/base:bookworm")


def test_start_health_logs_stop(rt, image):
    c = rt.start(image, extra_args=MOUNT, command=SERVE)
    try:
        assert c.host == "127.0.0.1"
        with urllib.request.urlopen(c.url + "/health", timeout=5) as resp:
            assert json.load(resp)["status"] == "healthy"
        assert c.id in rt.ours()
        assert "Uvicorn running" in rt.logs(c)
        limits = rt._cli("inspect", "--format", "{{json .HostConfig.Ulimits}}", c.id)
        assert "1024" in limits.stdout.decode()
    finally:
        rt.remove(c)
    assert not rt.exists(c.id)
    rt.remove(c)  # idempotent


def test_unhealthy_container_fails_with_its_logs_and_is_removed(rt, image):
    # This adapter's own containers: other tests and runs start and remove theirs meanwhile.
    before = rt.mine()
    with pytest.raises(runtime.ContainerError, match="boom-from-the-container"):
        rt.start(image, command=["sh", "-c", "echo boom-from-the-container; exit 3"])
    assert rt.mine() == before


def test_health_timeout_names_the_url(rt, image):
    c = rt.run(image, command=["sleep", "60"])
    try:
        with pytest.raises(runtime.ContainerError, match=r"/health"):
            rt.wait_healthy(c, timeout=2)
    finally:
        rt.remove(c)


def test_cleanup_removes_only_this_adapters_containers(rt, image):
    """Neither a container without the label nor one another pipeline process (another
    adapter: a concurrent release) started is touched."""
    ours = rt.run(image, command=["sleep", "60"])
    other = runtime.ContainerRuntime()
    concurrent = other.run(image, command=["sleep", "60"])
    foreign = (
        rt._cli("run", "--detach", "--pull", "never", *rt.args.run_args, image, "sleep", "60").stdout.decode().strip()
    )
    try:
        assert ours.id in rt.mine() and concurrent.id in rt.ours() and concurrent.id not in rt.mine()
        assert rt.cleanup() >= 1
        assert not rt.exists(ours.id)
        assert rt.exists(foreign) and rt.exists(concurrent.id)
        assert rt.mine() == []
    finally:
        rt.remove(foreign)
        other.remove(concurrent)
