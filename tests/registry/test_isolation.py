"""Only nginx reaches the registry backend, nginx's workers are not root, and the
anonymous pull sends nothing the environment holds (no ~/.netrc credentials)."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from pipeline.registry.pull import pull
from pipeline.registry.push import push_layout


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def _listening_tcp_inodes() -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                inodes.add(fields[9])
    return inodes


def _uids(pid: int) -> list[int]:
    status = Path(f"/proc/{pid}/status").read_text()
    return [int(u) for u in next(l for l in status.splitlines() if l.startswith("Uid:")).split()[1:]]


def test_backend_listens_on_no_tcp_port_only_on_a_private_unix_socket(local_registry):
    assert not (_socket_inodes(local_registry.registry_pid) & _listening_tcp_inodes())
    assert local_registry.backend_address.startswith("unix:")
    sock = Path(local_registry.backend_address[len("unix:") :])
    directory = sock.parent.stat()
    assert directory.st_mode & 0o007 == 0  # no access for others
    # The socket works (nginx goes through it) but is not a way around nginx for others.
    with socket.socket(socket.AF_UNIX) as probe:
        probe.connect(str(sock))


@pytest.mark.root
def test_nginx_workers_run_without_root(local_registry):
    if os.geteuid() != 0:
        pytest.skip("workers only change user when nginx starts as root")
    children = Path(f"/proc/{local_registry.nginx_pid}/task/{local_registry.nginx_pid}/children")
    workers = [int(p) for p in children.read_text().split()]
    assert workers
    for pid in workers:
        assert 0 not in _uids(pid), pid


def _logged_since(access_log: Path, before: str, wanted: str, timeout_s: float = 10.0) -> list[str]:
    """The access-log lines written after `before`, once one of them contains `wanted`: nginx
    writes a request's line after it has sent the response, so the log can lag the client."""
    deadline = time.monotonic() + timeout_s
    while True:
        lines = access_log.read_text()[len(before) :].splitlines()
        if any(wanted in line for line in lines) or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def test_anonymous_pull_ignores_netrc(local_registry, repo_name, tmp_path, build_image, writer, monkeypatch):
    img = build_image(tmp_path / "src")
    push_layout(writer(local_registry), repo_name, tmp_path / "src", tag="v1")
    home = tmp_path / "home"
    home.mkdir()
    host = local_registry.address.split(":")[0]
    netrc = home / ".netrc"
    netrc.write_text(
        f"machine {host}\nlogin netrc-leak\npassword netrc-secret\ndefault login netrc-leak password netrc-secret\n"
    )
    netrc.chmod(0o600)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("NETRC", raising=False)
    access_log = local_registry.root / "nginx-access.log"
    before = access_log.read_text() if access_log.exists() else ""
    pulled = pull(f"{local_registry.address}/{repo_name}@{img.manifest_digest}", tmp_path / "dst")
    assert pulled.manifest_digest == img.manifest_digest
    # A request after the pull's last one: once its line is in the log, so are the pull's.
    sentinel = f"sentinel-{time.monotonic_ns()}"
    import requests

    with requests.Session() as plain:
        plain.trust_env = False
        plain.get(f"{local_registry.url}/v2/{sentinel}/tags/list", timeout=10)
    lines = _logged_since(access_log, before, sentinel)
    assert any(sentinel in line for line in lines)
    assert any(repo_name in line for line in lines)  # the log did record the pull
    assert not any("netrc-leak" in line for line in lines), [l for l in lines if "netrc-leak" in l]


def test_the_netrc_witness_has_teeth(local_registry, tmp_path, monkeypatch):
    # The same ~/.netrc is sent by a requests session that trusts the environment, and
    # nginx logs its user: so the test above would see a leak.
    import requests

    home = tmp_path / "home"
    home.mkdir()
    (home / ".netrc").write_text("default login netrc-leak password netrc-secret\n")
    (home / ".netrc").chmod(0o600)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("NETRC", raising=False)
    access_log = local_registry.root / "nginx-access.log"
    before = access_log.read_text()
    requests.get(f"{local_registry.url}/v2/teeth/tags/list", timeout=10)
    assert any("netrc-leak" in line for line in _logged_since(access_log, before, "netrc-leak"))
