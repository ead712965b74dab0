"""`nox -s serve -- --host-mode` (python -m pipeline serve --host-mode), contained: it says
what it changes, works in its own directory, and UID 2000 cannot read its code."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.contained import ContainedProcess, contained_argv
from tests.env.conftest import REPO_ROOT, LiveServer, free_port, require_root

pytestmark = pytest.mark.root


@pytest.mark.slow
def test_host_mode_lists_its_changes_uses_its_own_workspace_and_hides_its_code(tmp_path):
    require_root()
    port = free_port()
    log = tmp_path / "serve.log"
    argv = [sys.executable, "-m", "pipeline", "serve", "--host-mode", "--port", str(port)]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("ARENA_TASKS_FILE", None)
    with open(log, "wb") as out:
        process = subprocess.Popen(
            contained_argv(tmp_path / "ns", tmp_path, argv),
            cwd=REPO_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    live = LiveServer(f"http://127.0.0.1:{port}", process, log, tmp_path / "none.json")
    try:
        deadline = time.monotonic() + 60
        while not _healthy(live):
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        text = log.read_text()
        assert "changes this host" in text and "/etc/passwd" in text and "mounts a tmpfs of its own" in text
        workspace = REPO_ROOT / ".release" / "serve-host" / "workspace"
        assert str(workspace) in text
        with live.session() as session:
            out = session.reset().observation["output"]
            assert f"{workspace}/repo" in out
            assert session.step({"operation": "shell", "command": "pwd"}).observation["output"] == f"{workspace}/repo\n"
            app = REPO_ROOT / ".release" / "serve-host" / "app"
            for path in (app / "env" / "server" / "app.py", app / "env" / "families" / "__init__.py"):
                probe = session.step({"operation": "shell", "command": f"cat {path}"}).observation
                # Under /tmp (a clone there) the episode's own /tmp hides it altogether.
                assert probe["exit_code"] != 0 and (
                    "Permission denied" in probe["output"] or "No such file" in probe["output"]
                ), path
        assert not live.path("/workspace/repo").exists()  # the image's path is not used
    finally:
        ContainedProcess(process).stop(timeout_s=3)


def _healthy(live: LiveServer) -> bool:
    try:
        return live.healthy()
    except OSError:
        return False
