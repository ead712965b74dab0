"""Which containers a pipeline process started, when other processes start some too.

The pipeline labels every container it starts as the pipeline's (`runtime.LABEL`) and
with its adapter's own session; a test that runs `python -m pipeline ...` in a child
process cannot know that session. Tests run beside other tests (xdist workers, a
second run of the suite on the same machine), so "pipeline containers that were not
there before" may be anyone's. A `ContainerScope` gives the child an extra label of
its own through `RELEASE_RUNTIME_PODMAN_RUN_ARGS` and `RELEASE_RUNTIME_DOCKER_RUN_ARGS` (each
engine's run flags from release.toml, plus `--label`), and lists exactly the podman
containers that carry it (a private Docker engine is the child's, stopped when it ends).
"""

from __future__ import annotations

import re
import shlex
import shutil
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import ToolError
from pipeline.runtime.runtime import ContainerRuntime

SCOPE_LABEL = "org.openenv-arena.test.scope"


# Every scope a test made: tests/conftest.py removes their containers after each test, so
# that a test stopped mid-run (its timeout kills the pipeline process it waited for, which
# then cannot remove its own) leaves none behind.
MADE: list[ContainerScope] = []


@dataclass(frozen=True)
class ContainerScope:
    label: str

    @classmethod
    def new(cls) -> ContainerScope:
        scope = cls(f"{SCOPE_LABEL}={uuid.uuid4().hex}")
        MADE.append(scope)
        return scope

    @property
    def docker_dir(self) -> Path:
        """The private Docker engine's directory of this scope's pipeline processes (in /tmp: its
        sockets need a short path), stopped and removed with the scope."""
        return Path("/tmp") / f"arena-dk-{self.label.rpartition('=')[2][:12]}"

    def env(self) -> dict[str, str]:
        """Environment for a pipeline process whose containers must carry this scope's label, and
        whose private Docker engine is the scope's."""
        from pipeline.config import load
        from pipeline.runtime import dockerd

        runtime = load().runtime
        return {
            **{
                f"RELEASE_RUNTIME_{engine.upper()}_RUN_ARGS": shlex.join(
                    [*runtime.args_for(engine).run_args, "--label", self.label]
                )
                for engine in ("podman", "docker")
            },
            dockerd.ROOT_VARIABLE: str(self.docker_dir),
        }

    def containers(self) -> list[str]:
        """IDs of the containers (running or not) that carry this scope's label."""
        rt = ContainerRuntime()
        out = rt._cli("ps", "--all", "--no-trunc", "--filter", f"label={self.label}", "--format", "{{.ID}}")
        return sorted(line.strip() for line in out.stdout.decode().splitlines() if line.strip())

    def remove(self) -> list[str]:
        """Remove every container that carries this scope's label, and the scope's private Docker
        engine (stopped by its PIDs: dockerd stops its containers first); the podman IDs."""
        from pipeline.runtime import dockerd

        found = self.containers()
        if found:
            ContainerRuntime()._cli("rm", "--force", *found, check=False)
        if self.docker_dir.exists():
            dockerd.stop(self.docker_dir)
            shutil.rmtree(self.docker_dir, ignore_errors=True)
        return found


# ------------------------------------------------------------------ images
# What a run pulls into the engine's image store: every release and repair check pulls the
# image it verifies from a loopback registry (127.0.0.1:PORT, a port of that run), and the
# store keeps the name after the registry is gone. Left there, a developer's store grew by
# about 35 names a run, and each podman command reads the whole store (`podman images` took
# 3.5 s with 360). The run's controller removes, when the run ends, the loopback names that
# were not there when it started and whose registry no longer answers: never a name another
# run still reads from its own live registry, nor anything that was there before.

_LOOPBACK = re.compile(r"^127\.0\.0\.1:(\d+)/")


def _runtime() -> ContainerRuntime | None:
    try:
        return ContainerRuntime()
    except ToolError:  # no engine on this machine: nothing was pulled
        return None


def loopback_images(rt: ContainerRuntime | None = None) -> set[str]:
    """`host:port/repository@digest` of every image name from a loopback registry. Every name
    of each image: `images` lists an image with many names by digest under one of them."""
    rt = rt or _runtime()
    if rt is None:
        return set()
    return {name for name in _store_names(rt) if _LOOPBACK.match(name) and "@sha256:" in name}


# Listing the store is two commands, `images` (the IDs) then `image inspect` (each one's
# names). Either fails outright, printing nothing or part, when an image is removed while it
# reads the store ("retrieving label for image ...", "reading image ...: image not known"),
# which beside other tests and runs that pull and remove images happens a few times a minute.
# A failed listing taken for an empty store failed a run (2026-12-03: a test's "names there
# before" came out empty); the pair is run again until both succeed, or it is an error.
_LIST_ATTEMPTS = 10


def _store_names(rt: ContainerRuntime) -> list[str]:
    for attempt in range(_LIST_ATTEMPTS):
        if attempt:
            time.sleep(0.1 * attempt)
        out = rt._cli("images", "--quiet", "--no-trunc", check=False)
        ids = sorted(set(out.stdout.decode().split()))
        if out.returncode == 0 and ids:
            out = rt._cli(
                "image", "inspect", "--format", "{{range .RepoDigests}}{{println .}}{{end}}", *ids, check=False
            )
        if out.returncode == 0:
            return out.stdout.decode().split()
    raise ToolError(
        f"listing the images of {rt.engine}'s store failed {_LIST_ATTEMPTS} times in a row",
        expected=f"`{rt.engine} images` and `{rt.engine} image inspect` exit 0",
        actual=out.stderr.decode(errors="replace").strip()[-500:],
        hint=f"run `{rt.engine} images` by hand: a damaged store needs `{rt.engine} rmi` of the image it names",
    )


def _port_answers(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def remove_images_left_by(before: set[str]) -> list[str]:
    """Remove the loopback image names that are new since `before` and whose registry is
    gone; the ones removed. An image a container still uses stays (podman refuses)."""
    removed: list[str] = []
    rt = _runtime()
    if rt is None:
        return removed
    gone = sorted(
        name for name in loopback_images(rt) - before if not _port_answers(int(_LOOPBACK.match(name).group(1)))
    )
    return [name for name in gone if rt._cli("rmi", name, check=False).returncode == 0]
