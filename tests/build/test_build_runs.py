"""Derived images built on the real local base run in the real container runtime: an
OCI base and a Docker schema-2 copy of it (made here), each answering /health and an
OpenEnv reset over the WebSocket protocol."""

from __future__ import annotations

import json

import pytest
import requests

from pipeline.checks.client import Session
from pipeline.image.oci import image as oci_image
from pipeline.registry.client import RegistryClient
from pipeline.runtime.runtime import ContainerRuntime

from ..base.basefixtures import base_image, registry_client  # noqa: F401
from .conftest import clone
from .test_build import run_build

pytestmark = [pytest.mark.slow, pytest.mark.root, pytest.mark.container]


def _schema2_copy(local_registry, record) -> str:
    """The base's manifest rewritten in the Docker schema-2 family (same blobs)."""
    client = registry_client(local_registry)
    fetched = client.get_manifest("arena/base", record.digest)
    oci = oci_image.parse_manifest(fetched.raw, fetched.media_type)
    docker = oci_image.Manifest(
        media_type=oci_image.DOCKER_MANIFEST,
        config=oci_image.Descriptor(oci_image.DOCKER_CONFIG, oci.config.digest, oci.config.size),
        layers=tuple(oci_image.Descriptor(oci_image.DOCKER_LAYER_GZIP, l.digest, l.size) for l in oci.layers),
    )
    raw = docker.to_bytes()
    for desc in (oci.config, *oci.layers):
        client.mount_blob("test/base-schema2", desc.digest, "arena/base")
    digest = client.put_manifest("test/base-schema2", "base", raw, oci_image.DOCKER_MANIFEST)
    return f"{local_registry.address}/test/base-schema2@{digest}"


@pytest.mark.parametrize("family", ["oci", "docker"])
def test_derived_image_runs_and_answers_health_and_reset(family, tmp_path, source_repo, local_registry, base_image):
    base_ref = (
        base_image.pull_reference(local_registry.address)
        if family == "oci"
        else _schema2_copy(local_registry, base_image)
    )
    repo = clone(source_repo, tmp_path / "r")
    proc, rec = run_build(repo, local_registry, base_ref)
    assert proc.returncode == 0, proc.stderr
    pushed = proc.stdout.strip().splitlines()[-1]
    manifest = RegistryClient(local_registry.address).get_manifest(
        "arena/openenv-data-workflows", pushed.rsplit("@", 1)[1]
    )
    expected = oci_image.DOCKER_MANIFEST if family == "docker" else oci_image.OCI_MANIFEST
    assert manifest.media_type == expected
    layer_types = {l["mediaType"] for l in json.loads(manifest.raw)["layers"]}
    assert layer_types == {oci_image.DOCKER_LAYER_GZIP if family == "docker" else oci_image.OCI_LAYER_GZIP}
    rt = ContainerRuntime()
    rt.pull(pushed)
    container = rt.start(pushed, port=8000)
    try:
        assert requests.get(f"{container.url}/health", timeout=10).status_code == 200
        with Session(container.url) as session:
            reply = session.reset(task_id="math_route-d1-s101")
            assert reply.task_id == "math_route-d1-s101"
    finally:
        rt.remove(container)
