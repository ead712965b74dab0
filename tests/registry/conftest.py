"""Helpers for registry tests: small real images in OCI layouts, fresh registries."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from pipeline.image.oci.image import OCI, ConfigChanges, Family, NewLayer, derive
from pipeline.image.oci.layer import FileEntry, write_layer
from pipeline.image.oci.layout import Layout
from pipeline.registry import local as localregistry
from pipeline.registry.client import RegistryClient

_counter = itertools.count()


def _build_image(root: Path, *, family: Family = OCI, layer_sizes=(2000, 3000), seed: int | None = None):
    """An OCI layout at `root` with one image of random-content layers; returns the image."""
    rng = random.Random(next(_counter) if seed is None else seed)
    layout = Layout.init(root)
    blobs = root / "blobs" / "sha256"
    layers = []
    for i, size in enumerate(layer_sizes):
        data = rng.randbytes(size)
        layer = write_layer([FileEntry(f"opt/data{i}.bin", "file", 0o644, source=data)], blobs, source_date_epoch=1)
        layers.append(NewLayer(layer.digest, layer.diff_id, layer.size, f"data {i}"))
    img = derive(None, layers, ConfigChanges(cmd=("true",)), source_date_epoch=1, family=family)
    layout.put_bytes(img.config_bytes)
    layout.add_manifest(img.manifest_bytes, img.media_type, ref_name="test")
    return img


def _writer(state, **kw) -> RegistryClient:
    return state.client(**kw)


@pytest.fixture
def build_image():
    """build_image(root, family=OCI, layer_sizes=(...)) -> BuiltImage in a layout at root."""
    return _build_image


@pytest.fixture
def writer():
    """writer(registry_state, **client_kw) -> a RegistryClient with push credentials."""
    return _writer


@pytest.fixture
def fresh_registry(tmp_path):
    """A registry of its own (for tests that kill or restart it)."""
    root = tmp_path / "registry"
    state = localregistry.start(root)
    try:
        yield state
    finally:
        localregistry.stop(root)


@pytest.fixture
def repo_name(request):
    """A repository name unique to the test."""
    return "test/" + request.node.name.lower().replace("[", "-").replace("]", "").replace("_", "-")[:60]
