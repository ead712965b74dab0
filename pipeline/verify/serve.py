"""`python -m pipeline serve`: the environment as users run it, the built image in a container.

By default the image of `dist/build.json` (or `--image name@sha256:...`) is pulled and
started under the procedural budget's limits (pipeline/verify/limits.py) with its port on
loopback; Ctrl-C stops and removes it. `--host-mode` serves on this host instead, for
development: from a root-only copy of env/ (so UID 2000 cannot read the code or the
task module) with its own workspace under `.release/serve-host/`; the server lists
what it changes on the host before it starts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from pipeline import config as config_mod
from pipeline.errors import ConfigError
from pipeline.image.imageconfig import TASKS_FILE_VARIABLE
from pipeline.verify.limits import ContainerLimits
from pipeline.progress import say

HOST_DIR = config_mod.REPO_ROOT / ".release" / "serve-host"


def built_image(record: Path) -> str:
    """`repository@digest` of the last build (dist/build.json)."""
    from pipeline.image.build import load_record

    if not record.exists():
        raise ConfigError(f"no build record at {record}", expected="dist/build.json from `nox -s build`",
                          hint="build the image first (nox -s build) or pass --image name@sha256:...")
    built = load_record(record)
    return f"{built.repository}@{built.manifest_digest}"


def serve_container(image: str, cfg: config_mod.ReleaseConfig) -> int:
    from pipeline.verify.runtime import ContainerRuntime

    runtime = ContainerRuntime(cfg.runtime)
    runtime.pull(image)
    container = runtime.start(image, port=cfg.port,
                              limits=ContainerLimits.from_budgets(cfg.budgets["procedural"]))
    say(f"serving {image} at {container.url} (container {container.id[:12]}); Ctrl-C stops it")
    try:
        while runtime.exists(container.id):
            time.sleep(1)
        say("the container exited:\n" + runtime.logs(container, tail=30))
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        runtime.remove(container)


def root_only_copy(source: Path, target: Path) -> Path:
    """``source`` copied to ``target`` with directories 0700 and files 0600, as in the image."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    for directory, _, files in os.walk(target):
        os.chmod(directory, 0o700)
        for name in files:
            os.chmod(os.path.join(directory, name), 0o600)
    return target


def serve_host(port: int, tasks_file: str | None) -> int:
    if os.geteuid() != 0:
        raise ConfigError("host mode needs root (the shell drops every command to UID 2000)",
                          actual=f"uid {os.geteuid()}", hint="run as root, or serve the image (no --host-mode)")
    app = HOST_DIR / "app"
    app.mkdir(parents=True, exist_ok=True)
    os.chmod(app, 0o700)
    root_only_copy(config_mod.REPO_ROOT / "env", app / "env")
    argv = [sys.executable, "-m", "env", "serve", "--host-mode", "--port", str(port),
            "--workspace", str(HOST_DIR / "workspace")]
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
