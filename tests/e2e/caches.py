"""This checkout's base caches, seeded into a fresh clone the e2e tests make."""

from __future__ import annotations

import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def seed_caches(checkout: Path) -> None:
    """Copy this checkout's base layout (from a release here or from the base tests) into
    `checkout`, whose release then re-pushes it when its digest is the pinned one instead of
    building it; link the rootfs and wheel caches (read-mostly, and every blob is
    digest-checked when used; the rootfs holds device nodes: never copy it)."""
    state = checkout / ".release"
    (state / "base").mkdir(parents=True)
    for layout in (REPO / ".release" / "base" / "oci", REPO / ".release" / "test-base" / "oci"):
        if layout.is_dir():
            shutil.copytree(layout, state / "base" / "oci")
            break
    for cache, link in (
        (REPO / ".release" / "base" / "rootfs", state / "base" / "rootfs"),
        (REPO / ".release" / "wheels", state / "wheels"),
    ):
        if cache.is_dir():
            link.symlink_to(cache)
