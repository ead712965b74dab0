"""External task images, verified against a loopback registry standing in for ghcr.io.

The public internet is mocked by a real local registry (docker-registry behind nginx)
holding a small Docker schema-2 image; the task entries point at it by digest.
"""

from __future__ import annotations

import random

import pytest

from pipeline.checks import external
from pipeline.config import ExternalPolicy, ExternalTask
from pipeline.errors import CheckFailure
from pipeline.image.oci.image import DOCKER, ConfigChanges, NewLayer, derive
from pipeline.image.oci.layer import FileEntry, write_layer
from pipeline.image.oci.layout import Layout
from pipeline.registry.client import RegistryClient
from pipeline.registry.push import push_layout
from pipeline.runtime.limits import ExternalLimits

REPO = "mock-ghcr/akseljoonas/mimo-openenv-software"


@pytest.fixture(scope="module")
def schema2_image(local_registry, tmp_path_factory):
    """A small schema-2 image pushed to the loopback registry: (name@digest, layer sizes, storage)."""
    root = tmp_path_factory.mktemp("ext-image")
    layout = Layout.init(root)
    blobs = root / "blobs" / "sha256"
    rng = random.Random(7)
    layers = []
    for i, size in enumerate((3000, 5000)):
        layer = write_layer(
            [FileEntry(f"opt/repair{i}.bin", "file", 0o644, source=rng.randbytes(size))], blobs, source_date_epoch=1
        )
        layers.append(NewLayer(layer.digest, layer.diff_id, layer.size, f"layer {i}"))
    img = derive(None, layers, ConfigChanges(cmd=("true",)), source_date_epoch=1, family=DOCKER)
    layout.put_bytes(img.config_bytes)
    layout.add_manifest(img.manifest_bytes, img.media_type, ref_name="ext")
    writer = local_registry.client()
    push_layout(writer, REPO, root, ref_name="ext")
    ref = f"{local_registry.address}/{REPO}@{img.manifest_digest}"
    return ref, [layer.size for layer in img.manifest.layers], img


def _task(image: str, size: int) -> ExternalTask:
    return ExternalTask(
        task_id="format-code-task-000666",
        image=image,
        compressed_bytes=size,
        after_block=1,
        split="code",
        row=50,
        reference="mimo-reference-000666",
    )


def test_mock_ghcr_schema2_image_verified_anonymously(schema2_image):
    ref, sizes, img = schema2_image
    result = external.verify_task(_task(ref, sum(sizes)))
    assert result.verified, result.status
    assert result.media_type == DOCKER.manifest
    assert [s for _, s in result.layers] == sizes and result.compressed_bytes == sum(sizes)
    assert result.schema_equal is None and "not started" in result.notes[0]
    assert external.ExternalResult.from_json(result.to_json()) == result


def test_mock_ghcr_declared_size_mismatch_is_not_verified(schema2_image):
    ref, sizes, _ = schema2_image
    result = external.verify_task(_task(ref, sum(sizes) + 1))
    assert not result.verified and "release.toml declares" in result.status


def test_mock_ghcr_missing_layer_blob_is_not_verified(local_registry, schema2_image, tmp_path):
    ref, sizes, img = schema2_image
    # A second repository holding the manifest and config but one layer fewer: the
    # registry refuses a manifest with missing blobs, so delete the blob afterwards.
    missing = img.manifest.layers[1].digest
    blob_dir = local_registry.storage / "docker/registry/v2/blobs/sha256" / missing[7:9] / missing[7:]
    saved = tmp_path / "saved"
    blob_dir.rename(saved)
    try:
        result = external.verify_task(_task(ref, sum(sizes)))
    finally:
        saved.rename(blob_dir)
    assert not result.verified and ("missing" in result.status or missing in result.status)


LOCAL = ExternalPolicy(required=False, profile="local")
ARENA = ExternalPolicy(required=True, profile="arena")


def _local_warns_arena_refuses(result, capsys) -> None:
    external.enforce([result], LOCAL)
    assert "NOT VERIFIED" in capsys.readouterr().err
    with pytest.raises(CheckFailure, match="requires every external task verified"):
        external.enforce([result], ARENA)


def test_mock_ghcr_offline_is_reported_and_arena_refuses(capsys):
    # Port 9 on loopback: nothing listens there, as for a machine without the internet.
    task = _task("127.0.0.1:9/akseljoonas/mimo-openenv-software@sha256:" + "0" * 64, 1)
    result = external.verify_task(task, client=RegistryClient("127.0.0.1:9", attempts=1))
    assert result.status.startswith("not verified: ")
    _local_warns_arena_refuses(result, capsys)


class _NoRuntime:
    """A runtime that must not be used: an unreachable image is never started."""

    def __getattr__(self, name):
        raise AssertionError(f"runtime.{name} called for an unreachable image")


def test_mock_ghcr_offline_with_start_plan_is_not_started_and_arena_refuses(capsys):
    task = _task("127.0.0.1:9/akseljoonas/mimo-openenv-software@sha256:" + "0" * 64, 1)
    plan = external.StartPlan(
        runtime=_NoRuntime(),
        budget={"reset_wall_s": 180, "tool_wall_s": 120, "verifier_wall_s": 120, "tool_calls_total": 64},
        limits=ExternalLimits(memory_bytes=16 << 30, cpus=2.0),
    )
    result = external.verify_task(task, client=RegistryClient("127.0.0.1:9", attempts=1), start=plan)
    assert result.status.startswith("not verified: ") and result.checks == ()
    _local_warns_arena_refuses(result, capsys)


def test_mock_ghcr_reachable_but_not_started_is_refused_by_arena(schema2_image):
    ref, sizes, _ = schema2_image
    result = external.verify_task(_task(ref, sum(sizes)))
    assert result.verified and not result.checks
    with pytest.raises(CheckFailure, match="repair checks not run"):
        external.enforce([result], ARENA)


def test_repair_checks_of_an_unreachable_image_start_nothing():
    image = "127.0.0.1:9/akseljoonas/mimo-openenv-software@sha256:" + "0" * 64
    plan = external.StartPlan(
        runtime=_NoRuntime(),
        budget={"reset_wall_s": 180, "tool_wall_s": 120, "verifier_wall_s": 120},
        limits=ExternalLimits(memory_bytes=16 << 30, cpus=2.0),
    )
    result = external.check_image(
        image, "format-code-task-000666", start=plan, client=RegistryClient("127.0.0.1:9", attempts=1)
    )
    assert result.status.startswith("not verified: ") and result.checks == ()
    assert not result.fully_checked and result.writable_layer_peak_bytes is None
