"""The local registry's lifecycle and its access policy (anonymous read, authenticated write)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import requests

from pipeline.registry import local as localregistry


def test_policy_anonymous_read_authenticated_write(local_registry):
    url = local_registry.url
    assert requests.get(f"{url}/v2/nothing/here/tags/list").status_code == 404  # read reaches the registry
    assert requests.post(f"{url}/v2/x/y/blobs/uploads/").status_code == 401
    assert requests.delete(f"{url}/v2/x/y/manifests/latest").status_code == 401
    # The API root challenges, so docker/podman clients learn to send credentials.
    root = requests.get(f"{url}/v2/")
    assert root.status_code == 401 and root.headers["WWW-Authenticate"].startswith("Basic")
    assert requests.get(f"{url}/v2/", auth=(local_registry.user, local_registry.password)).ok
    assert requests.get(f"{url}/v2/", auth=(local_registry.user, "wrong")).status_code == 401


def test_secrets_are_private(local_registry):
    for name in ("password", "htpasswd", "http-secret"):
        mode = stat.S_IMODE((local_registry.root / name).stat().st_mode)
        assert mode == 0o600, name
    assert "{SSHA}" in (local_registry.root / "htpasswd").read_text()


def test_start_reuses_stop_is_idempotent_and_leaves_nothing(tmp_path):
    root = tmp_path / "reg"
    first = localregistry.start(root)
    assert localregistry.start(root) == first
    assert localregistry.status(root) == first
    assert localregistry.endpoint(root).address == first.address
    assert localregistry.stop(root) is True
    assert localregistry.stop(root) is False
    assert localregistry.status(root) is None
    for pid in (first.registry_pid, first.nginx_pid):
        assert not os.path.exists(f"/proc/{pid}") or "Z" in open(f"/proc/{pid}/stat").read().split()[2]
    try:
        requests.get(f"{first.url}/v2/", timeout=2)
        raise AssertionError("registry still answers after stop")
    except requests.ConnectionError:
        pass
    # A new start keeps the address, so references recorded earlier stay valid.
    again = localregistry.start(root)
    try:
        assert again.address == first.address
    finally:
        localregistry.stop(root)


def test_cli_start_status_stop(tmp_path):
    env = {**os.environ, "RELEASE_REGISTRY_DIR": str(tmp_path / "reg")}

    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "pipeline", "registry", *args],
            env=env,
            cwd=Path(__file__).resolve().parents[2],
            capture_output=True,
            text=True,
            timeout=60,
        )

    try:
        assert cli("status").returncode == 3
        started = cli("start")
        assert started.returncode == 0, started.stderr
        assert "registry running at 127.0.0.1:" in started.stdout
        assert cli("status").returncode == 0
    finally:
        stopped = cli("stop")
    assert stopped.returncode == 0 and "registry stopped" in stopped.stdout
    assert cli("status").returncode == 3


def test_a_registry_whose_release_is_gone_is_stopped_and_one_started_by_hand_is_kept(tmp_path):
    from pipeline import runs

    sleeper = subprocess.Popen(["sleep", "60"])
    gone = runs.Owner(sleeper.pid, runs._start_time(sleeper.pid))
    sleeper.kill()
    sleeper.wait()
    by_hand, ours, orphan = tmp_path / "by-hand", tmp_path / "ours", tmp_path / "orphan"
    try:
        localregistry.start(by_hand)
        localregistry.start(ours, owner=runs.current())
        state = localregistry.start(orphan, owner=gone)
        assert localregistry.stop_orphaned(by_hand) is None and localregistry.status(by_hand) is not None
        assert localregistry.stop_orphaned(ours) is None and localregistry.status(ours) is not None
        line = localregistry.stop_orphaned(orphan)
        assert line == (
            f"stopped the local registry (docker-registry {state.registry_pid}, nginx {state.nginx_pid}) "
            f"that a release which is gone (PID {gone.pid}) had started, under {orphan}"
        )
        assert localregistry.status(orphan) is None and not (orphan / "state.json").exists()
        assert localregistry.stop_orphaned(orphan) is None
    finally:
        for root in (by_hand, ours, orphan):
            localregistry.stop(root)


def test_a_corrupt_blob_in_the_storage_is_removed_before_a_registry_serves_it_again(tmp_path, capsys):
    import hashlib

    root = tmp_path / "reg"
    good, bad = b"a blob that stays whole\n", b"a blob whose stored bytes rot\n"
    digests = {data: "sha256:" + hashlib.sha256(data).hexdigest() for data in (good, bad)}
    state = localregistry.start(root)
    try:
        client = state.client()
        for data, digest in digests.items():
            client.upload_blob("t/blobs", digest, data)
    finally:
        localregistry.stop(root)
    stored = state.storage / "docker" / "registry" / "v2" / "blobs" / "sha256"
    rotten = stored / digests[bad][7:9] / digests[bad][7:] / "data"
    rotten.write_bytes(bad.replace(b"rot", b"ROT"))
    capsys.readouterr()
    state = localregistry.start(root)
    try:
        said = capsys.readouterr().err
        assert said == (
            f"removed 1 corrupt blob(s) from the local registry's storage ({digests[bad][:19]}) "
            f"before serving it from {state.storage}; the next push sends them again\n"
        )
        assert not rotten.parent.exists()
        client = state.client()
        assert client.get_blob_bytes("t/blobs", digests[good]) == good
        assert not client.has_blob("t/blobs", digests[bad])
        client.upload_blob("t/blobs", digests[bad], bad)
        assert client.get_blob_bytes("t/blobs", digests[bad]) == bad
    finally:
        localregistry.stop(root)
    # A storage that is whole is started on without a word.
    localregistry.start(root)
    localregistry.stop(root)
    assert capsys.readouterr().err == ""
