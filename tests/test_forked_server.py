"""A server forked from the worker's forkserver (tests/forked_server.py) is contained
exactly as one run through `contained_argv`: the same command, run both ways, sees the same
namespaces, mounts, identity, environment, working directory, sys.path and exit code."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from tests import forked_server
from tests.contained import ContainedProcess, require_containment, start_contained

pytestmark = [pytest.mark.root]

# Run in the contained process: what it sees of itself, written to $1 as JSON; exits 3.
FACTS = r"""
import json, os, sys
out = sys.argv[1]
mounts = {}
for line in open("/proc/self/mounts"):
    device, point, kind = line.split()[:3]
    mounts[point] = kind
import marker_module
facts = {
    "pid": os.getpid(),
    "ns": {n: os.readlink(f"/proc/self/ns/{n}") for n in ("pid", "mnt", "ipc", "user")},
    "uid_map": [line.split() for line in open("/proc/self/uid_map")],
    "mounts": {p: mounts.get(p) for p in ("/", "/workspace", "/dev/mqueue", "/dev/shm", "/proc")},
    "cwd": os.getcwd(),
    "argv": sys.argv,
    "path_head": sys.path[:2],
    "repo_on_path": any(p.rstrip("/") == sys.argv[2] for p in sys.path),
    "marker": marker_module.MARK,
    "env": {k: os.environ.get(k) for k in ("FORKED_TEST_MARK", "PYTHONPATH", "UNSET_BY_TEST")},
    "uid": os.getuid(),
    "etc_passwd_writable_privately": os.access("/etc/passwd", os.W_OK),
}
json.dump(facts, open(out, "w"))
sys.exit(3)
"""


def _run(tmp_path: Path, name: str, argv_head: list[str]) -> tuple[dict, int]:
    share = tmp_path / name
    share.mkdir()
    lib = share / "lib"
    lib.mkdir()
    (lib / "marker_module.py").write_text(f"MARK = {name!r}\n")
    env = {k: v for k, v in os.environ.items() if k != "UNSET_BY_TEST"}
    env.update(FORKED_TEST_MARK=name, PYTHONPATH=str(lib))
    out = share / "facts.json"
    process = start_contained(
        share / "ns", share, [*argv_head, "-c", FACTS, str(out), str(Path.cwd())], cwd=share, env=env, log=share / "log"
    )
    deadline = time.monotonic() + 60
    while process.poll() is None:
        assert time.monotonic() < deadline, (share / "log").read_text()
        time.sleep(0.05)
    assert out.exists(), (share / "log").read_text()
    return json.loads(out.read_text()), process.poll()


def test_a_forked_server_is_contained_as_an_executed_one(tmp_path, monkeypatch):
    require_containment()
    monkeypatch.setenv("UNSET_BY_TEST", "the worker's own")
    assert forked_server.forkable([sys.executable, "-c", "pass"])
    assert not forked_server.forkable(["/usr/bin/env", sys.executable, "-c", "pass"])
    forked, forked_code = _run(tmp_path, "forked", [sys.executable])
    executed, executed_code = _run(tmp_path, "executed", ["/usr/bin/env", sys.executable])
    assert forked_code == executed_code == 3

    host_ns = {n: os.readlink(f"/proc/self/ns/{n}") for n in ("pid", "mnt", "ipc", "user")}
    for facts, name in ((forked, "forked"), (executed, "executed")):
        assert facts["pid"] == 1
        assert all(facts["ns"][n] != host_ns[n] for n in host_ns), facts["ns"]
        [sandbox] = [int(host) for inside, host, count in facts["uid_map"] if inside == "2000"]
        assert sandbox >= 2**31
        assert facts["mounts"] == {
            "/": "overlay",
            "/workspace": "tmpfs",
            "/dev/mqueue": "mqueue",
            "/dev/shm": "overlay",
            "/proc": "proc",
        }
        assert facts["cwd"] == str(tmp_path / name)
        assert facts["marker"] == name
        assert facts["env"] == {
            "FORKED_TEST_MARK": name,
            "PYTHONPATH": str(tmp_path / name / "lib"),
            "UNSET_BY_TEST": None,
        }
        assert facts["path_head"] == ["", str(tmp_path / name / "lib")]
        assert facts["repo_on_path"] is False
        assert facts["uid"] == 0 and facts["etc_passwd_writable_privately"] is True
    assert forked["argv"][0] == executed["argv"][0] == "-c"


def test_a_forked_server_that_is_killed_takes_its_namespace_with_it(tmp_path):
    require_containment()
    share = tmp_path / "share"
    share.mkdir()
    code = "import subprocess, time; subprocess.Popen(['sleep', '600']); time.sleep(600)"
    process = start_contained(
        share / "ns", share, [sys.executable, "-c", code], cwd=share, env=dict(os.environ), log=share / "log"
    )
    contained = ContainedProcess(process)
    init = contained.init_pid()
    deadline = time.monotonic() + 30
    children = Path(f"/proc/{init}/task/{init}/children")
    while not children.read_text().split():
        assert time.monotonic() < deadline, (share / "log").read_text()
        time.sleep(0.05)
    [sleeper] = map(int, children.read_text().split())
    process.kill()
    process.wait(timeout=30)
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{pid}").exists() for pid in (init, sleeper)):
        assert time.monotonic() < deadline, "the namespace outlived its forked server"
        time.sleep(0.05)
