"""The slim runtime lock: hash-pinned, installable alone, enough for server and client,
and nothing in it unused."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
import urllib.request

import pytest
from packaging.utils import canonicalize_name

from pipeline.errors import ConfigError, DigestMismatch
from pipeline.sources import lock
from tests.contained import ContainedProcess, contained_argv, require_containment

from .basefixtures import HERE, make_venv, pip_install, wheel_dir


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def probe_server(lock_venv):
    """The probe OpenEnv app (create_app) under uvicorn, from the lock-only venv."""
    port = _free_port()
    proc = subprocess.Popen(
        [lock_venv, "-m", "uvicorn", "probe_app:app", "--host", "127.0.0.1", "--port", str(port)],
        cwd=HERE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"server exited: {proc.stdout.read().decode()[-2000:]}")
            try:
                urllib.request.urlopen(url + "/health", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail("server did not answer /health within 60 s")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_every_line_is_hash_pinned_and_matches_runtime_in():
    locked = lock.load_lock()
    pins = lock.read_pins()
    assert {(canonicalize_name(w.name), w.version) for w in locked.wheels} == {(p.key, p.version) for p in pins}
    assert all(re.fullmatch(r"[0-9a-f]{64}", w.sha256) for w in locked.wheels)
    assert "openenv-core" in {canonicalize_name(w.name) for w in locked.wheels}


def test_ui_and_llm_libraries_are_not_in_the_lock():
    names = {canonicalize_name(w.name) for w in lock.load_lock().wheels}
    assert not names & {"gradio", "openai", "huggingface-hub", "typer", "tomli-w", "pyyaml"}


@pytest.mark.slow
def test_server_and_openenv_client_round_trip_with_only_the_lock(lock_venv, probe_server):
    out = subprocess.run(
        [lock_venv, "probe_client.py", probe_server], cwd=HERE, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert (result["reset"], result["step"], result["reward"], result["done"]) == ("ready", "hello", 1.0, True)


def test_env_server_imports_in_the_lock_venv(lock_venv):
    out = subprocess.run(
        [lock_venv, "-c", "import openenv.core.env_server, uvicorn, resource"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr


def test_lock_is_minimal_every_wheel_is_imported(lock_venv, probe_server):
    """Each locked distribution is imported by the running server or by the client."""
    client = subprocess.run(
        [lock_venv, "probe_client.py", probe_server], cwd=HERE, capture_output=True, text=True, timeout=120
    )
    assert client.returncode == 0, client.stderr
    used = set(json.loads(client.stdout)["distributions"])
    with urllib.request.urlopen(probe_server + "/probe/distributions") as resp:
        used |= set(json.load(resp))
    locked = {canonicalize_name(w.name) for w in lock.load_lock().wheels}
    assert locked - {canonicalize_name(n) for n in used} == set()


def test_tampered_hash_is_refused_by_pip(tmp_path):
    text = lock.LOCK.read_text()
    first = re.search(r"--hash=sha256:([0-9a-f]{64})", text)[1]
    bad = "0" * 64 if first != "0" * 64 else "1" * 64
    tampered = tmp_path / "runtime.txt"
    tampered.write_text(text.replace(first, bad, 1))
    python = make_venv(tmp_path / "venv")
    result = pip_install(python, tampered, wheel_dir(tmp_path))
    assert result.returncode != 0
    assert "DO NOT MATCH THE HASHES" in result.stderr


def test_tampered_cached_wheel_is_refused(tmp_path):
    locked = lock.load_lock()
    wheel = locked.wheels[0]
    src = lock.fetch(lock.RuntimeLock(locked.path, (wheel,), locked.sha256))[0]
    cache = tmp_path / "cache"
    copy = cache / wheel.sha256 / src.name
    copy.parent.mkdir(parents=True)
    copy.write_bytes(src.read_bytes() + b"\0")
    with pytest.raises(DigestMismatch, match=wheel.name):
        lock.cached_wheel(wheel, cache)


def test_malformed_lock_line_is_refused(tmp_path):
    path = tmp_path / "runtime.txt"
    path.write_text("fastapi==0.165.0\n")
    with pytest.raises(ConfigError, match="not a hash-pinned requirement"):
        lock.load_lock(path)


def test_runtime_in_must_pin_exact_versions(tmp_path):
    path = tmp_path / "runtime.in"
    path.write_text("fastapi>=0.100\n")
    with pytest.raises(ConfigError, match="not an exact pin"):
        lock.read_pins(path)


def test_generate_hashes_the_downloaded_wheels_and_measures_the_install(tmp_path):
    pins = tmp_path / "runtime.in"
    pins.write_text("# two small pure wheels\nannotated-types==0.8.0\nh11==0.16.0\n")
    out = tmp_path / "runtime.txt"
    generated, size = lock.generate(pins, out, tmp_path / "cache")
    assert [w.name for w in generated.wheels] == ["annotated-types", "h11"]
    for w in generated.wheels:
        path = lock.cached_wheel(w, tmp_path / "cache")
        assert path is not None and lock.sha256_file(path) == w.sha256
    assert size.files > 5 and size.bytes > 10_000
    assert f"{size.bytes} bytes" in out.read_text()
    assert lock.load_lock(out).sha256 == lock.sha256_bytes(out.read_bytes())


REAL_CLIENT = """
import json, sys
from openenv.core import GenericEnvClient
with GenericEnvClient(base_url=sys.argv[1]).sync() as env:
    env.reset()
    result = env.step({"operation": "shell", "command": "id -u"})
print(json.dumps(result.observation))
"""


@pytest.mark.slow
@pytest.mark.root
def test_real_environment_server_runs_on_the_lock_alone(lock_venv, tmp_path):
    """env.server.app (the image's Cmd) serves a shell step with only the locked wheels.

    The server runs contained (its own PID, mount and IPC namespaces over an overlay of /):
    it adds the sandbox user and rebuilds /workspace, which must not happen on the host."""
    require_containment()
    repo = HERE.parent.parent
    port = _free_port()
    argv = contained_argv(
        tmp_path / "ns",
        tmp_path,
        [str(lock_venv), "-m", "uvicorn", "env.server.app:app", "--host", "127.0.0.1", "--port", str(port)],
    )
    proc = subprocess.Popen(
        argv,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(repo)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                urllib.request.urlopen(url + "/health", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
        script = tmp_path / "client.py"
        script.write_text(REAL_CLIENT)
        out = subprocess.run([lock_venv, script, url], capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert "2000" in json.loads(out.stdout)["output"]
    finally:
        ContainedProcess(proc).stop()
