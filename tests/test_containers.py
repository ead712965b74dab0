"""tests/containers.py: what a run leaves in the container engine's image store."""

from __future__ import annotations

import shlex
import tempfile
import threading
import uuid
from pathlib import Path

import pytest

from pipeline import _daemon
from pipeline.errors import ToolError
from pipeline.registry import local as localregistry
from pipeline.registry.push import push_image
from pipeline.runtime.runtime import ContainerRuntime

from . import containers
from .registry.conftest import _build_image

pytestmark = [pytest.mark.container, pytest.mark.root]


def _pushed(state, root, repository: str, *aliases: str) -> str | list[str]:
    """A small image pushed to the registry `state`; its name by digest (its names, pushed
    to `repository` and each of `aliases` too). Its content is new to the engine's store: the
    helper's default seeds count from 0 in each process, and the same image pulled by a test of
    another worker or run (the same ID under other names) made removals collide."""
    image = _build_image(root, seed=uuid.uuid4().int)
    blobs = {f"sha256:{p.name}": p for p in (root / "blobs" / "sha256").iterdir() if not p.name.startswith(".")}
    names = []
    for repo in (repository, *aliases):
        pushed = push_image(state.client(), repo, image.manifest_bytes, image.media_type, blobs)
        names.append(f"{state.address}/{repo}@{pushed.manifest_digest}")
    return names if aliases else names[0]


def test_the_run_removes_what_it_pulled_from_gone_registries_and_nothing_else(tmp_path):
    """Names pulled during the run from a registry that is gone are removed; a name from a
    registry that still answers stays (another run may read it), and so does one that was
    there when the run started."""
    runtime = ContainerRuntime()
    live, gone = localregistry.start(tmp_path / "live"), localregistry.start(tmp_path / "gone")
    names: list[str] = []
    try:
        older = _pushed(gone, tmp_path / "older", "test/images-left")
        runtime.pull(older)
        names.append(older)
        before = containers.loopback_images()
        assert older in before
        pulled = _pushed(gone, tmp_path / "pulled", "test/images-left")
        # One image under several names (as a run pulls one release from many registries):
        # the engine lists it under one of them, every one must go.
        aliases = _pushed(gone, tmp_path / "aliased", *(f"test/images-left-{n}" for n in range(5)))
        from_live = _pushed(live, tmp_path / "from-live", "test/images-left")
        for name in (pulled, *aliases, from_live):
            runtime.pull(name)
            names.append(name)
        localregistry.stop(tmp_path / "gone")
        removed = containers.remove_images_left_by(before)
        left = containers.loopback_images()
        assert pulled in removed and pulled not in left
        assert set(aliases) <= set(removed) and not set(aliases) & left
        assert from_live not in removed and from_live in left
        assert older not in removed and older in left
    finally:
        localregistry.stop(tmp_path / "gone")
        localregistry.stop(tmp_path / "live")
        for name in names:
            runtime._cli("rmi", name, check=False)


def test_the_store_is_listed_whole_while_another_run_removes_images(tmp_path):
    """`podman images` and `image inspect` fail outright, printing nothing or part, when an
    image goes while they read the store; the listing must still hold every name that stayed
    (it was once empty: the run then took no name for "there before"). Each listing starts
    as another run removes an image (read once, about every other such listing came out
    empty)."""
    runtime = ContainerRuntime()
    registry = localregistry.start(tmp_path / "registry")
    stays = _pushed(registry, tmp_path / "stays", "test/listed-stays")
    churned = _pushed(registry, tmp_path / "churned", "test/listed-churned")
    lister_ready, remove_now = threading.Semaphore(0), threading.Semaphore(0)
    removed: list[int] = []
    stop = threading.Event()

    def other_run() -> None:  # pulls an image, then removes it as a listing starts
        while not stop.is_set():
            runtime._cli("pull", "--quiet", "--tls-verify=false", churned, check=False)
            lister_ready.acquire()
            if stop.is_set():
                return
            remove_now.release()
            removed.append(runtime._cli("rmi", churned, check=False).returncode)

    runtime.pull(stays)
    other = threading.Thread(target=other_run)
    other.start()
    listings = []
    try:
        for _ in range(10):
            lister_ready.release()
            remove_now.acquire()
            listings.append(containers.loopback_images(runtime))
    finally:
        stop.set()
        lister_ready.release()
        other.join()
        localregistry.stop(tmp_path / "registry")
        for name in (stays, churned):
            runtime._cli("rmi", name, check=False)
    missed = [listing for listing in listings if stays not in listing]
    assert not missed, f"{stays} missing from {len(missed)} of {len(listings)} listings, e.g. {missed[0]}"
    assert removed == [0] * 10, f"the other run's removals did not all remove: exit codes {removed}"


def test_a_store_that_cannot_be_listed_is_an_error_not_an_empty_store():
    # podman wants a short runroot (50 characters at most): a directory of TMPDIR itself.
    with tempfile.TemporaryDirectory(prefix="store-") as tmp:
        (Path(tmp) / "file").touch()
        broken = ContainerRuntime(
            environ={
                "RELEASE_RUNTIME_GLOBAL_ARGS": shlex.join(
                    [*ContainerRuntime().args.global_args, "--root", f"{tmp}/file/root", "--runroot", f"{tmp}/file/run"]
                )
            }
        )
        with pytest.raises(ToolError, match="store failed 10 times in a row") as failed:
            containers.loopback_images(broken)
    assert "not a directory" in str(failed.value)


@pytest.mark.root
@pytest.mark.container
def test_a_scope_s_private_docker_engine_goes_with_the_scope():
    from pipeline.runtime import dockerd

    scope = containers.ContainerScope.new()
    env = scope.env()
    assert env[dockerd.ROOT_VARIABLE] == str(scope.docker_dir) and "--label" in env["RELEASE_RUNTIME_DOCKER_RUN_ARGS"]
    # A pipeline process killed mid-run leaves its engine running; the scope's removal stops it.
    state = dockerd.start(scope.docker_dir)
    try:
        scope.remove()
        assert not _daemon.alive(state.pid, "dockerd") and not _daemon.alive(state.containerd_pid, "containerd")
        assert not scope.docker_dir.exists()
    finally:
        dockerd.stop(scope.docker_dir)
