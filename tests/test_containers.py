"""tests/containers.py: what a run leaves in the container engine's image store."""

from __future__ import annotations


import pytest

from pipeline.registry import local as localregistry
from pipeline.registry.push import push_image
from pipeline.verify.runtime import ContainerRuntime

from . import containers
from .registry.conftest import _build_image

pytestmark = [pytest.mark.container, pytest.mark.root]


def _pushed(state, root, repository: str, *aliases: str) -> str | list[str]:
    """A small image pushed to the registry `state`; its name by digest (its names, pushed
    to `repository` and each of `aliases` too)."""
    image = _build_image(root)
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
