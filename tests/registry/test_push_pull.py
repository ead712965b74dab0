"""Push to the real local registry and pull back anonymously by digest."""

from __future__ import annotations

import pytest

from pipeline.errors import DigestMismatch, RegistryError
from pipeline.image.oci.image import DOCKER, DOCKER_MANIFEST
from pipeline.image.oci.layout import Layout
from pipeline.registry import referrers
from pipeline.registry.client import RegistryClient
from pipeline.registry.pull import pull
from pipeline.registry.push import push_layout


def test_push_then_anonymous_pull_by_digest(local_registry, repo_name, tmp_path, build_image, writer):
    img = build_image(tmp_path / "src")
    result = push_layout(writer(local_registry), repo_name, tmp_path / "src", tag="v1")
    assert result.manifest_digest == img.manifest_digest
    assert set(result.blobs_sent) == {img.manifest.config.digest, *(l.digest for l in img.manifest.layers)}
    assert result.blobs_skipped == () and result.manifest_sent
    assert RegistryClient(local_registry.address).head_manifest(repo_name, "v1") == img.manifest_digest

    pulled = pull(f"{local_registry.address}/{repo_name}@{img.manifest_digest}", tmp_path / "dst")
    assert pulled.manifest_digest == img.manifest_digest
    assert pulled.layer_count == 2
    assert pulled.compressed_size == sum(l.size for l in img.manifest.layers)
    assert Layout.open(tmp_path / "dst").verify_image(img.manifest_digest).manifest_bytes == img.manifest_bytes


def test_pushing_again_sends_no_blobs(local_registry, repo_name, tmp_path, build_image, writer):
    build_image(tmp_path / "src")
    first = push_layout(writer(local_registry), repo_name, tmp_path / "src", tag="v1")
    again = push_layout(writer(local_registry), repo_name, tmp_path / "src", tag="v1")
    assert again.blobs_sent == () and again.bytes_sent == 0 and not again.manifest_sent
    assert set(again.blobs_skipped) == set(first.blobs_sent)


def test_push_mounts_blobs_from_another_repository_instead_of_uploading(
    local_registry, repo_name, tmp_path, build_image, writer
):
    build_image(tmp_path / "src")
    first = push_layout(writer(local_registry), repo_name, tmp_path / "src", tag="v1")
    other = repo_name + "-derived"
    mounted = push_layout(writer(local_registry), other, tmp_path / "src", tag="v1", mount_from=(repo_name,))
    assert mounted.blobs_sent == () and mounted.bytes_sent == 0 and mounted.manifest_sent
    assert set(mounted.blobs_skipped) == set(first.blobs_sent)
    anonymous = RegistryClient(local_registry.address)
    assert all(anonymous.has_blob(other, d) for d in first.blobs_sent)
    # without a source to mount from, the same push uploads every blob
    fresh = push_layout(writer(local_registry), repo_name + "-fresh", tmp_path / "src")
    assert set(fresh.blobs_sent) == set(first.blobs_sent)


def test_anonymous_push_is_refused(local_registry, repo_name, tmp_path, build_image, writer):
    build_image(tmp_path / "src")
    with pytest.raises(RegistryError, match="HTTP 401") as err:
        push_layout(RegistryClient(local_registry.address), repo_name, tmp_path / "src")
    assert "RELEASE_REGISTRY_USER" in str(err.value)


def test_wrong_password_is_refused(local_registry, repo_name, tmp_path, build_image, writer):
    from pipeline.registry.client import Credentials

    build_image(tmp_path / "src")
    client = RegistryClient(local_registry.address, credentials=Credentials(local_registry.user, "x"))
    with pytest.raises(RegistryError, match="HTTP 401"):
        push_layout(client, repo_name, tmp_path / "src")


def test_corrupted_blob_in_registry_storage_is_caught_on_pull(local_registry, repo_name, tmp_path, build_image, writer):
    img = build_image(tmp_path / "src")
    push_layout(writer(local_registry), repo_name, tmp_path / "src")
    victim = img.manifest.layers[1].digest
    hexd = victim.split(":")[1]
    data_file = local_registry.storage / "docker/registry/v2/blobs/sha256" / hexd[:2] / hexd / "data"
    original = data_file.read_bytes()
    corrupted = bytearray(original)
    corrupted[len(corrupted) // 2] ^= 0xFF
    data_file.write_bytes(bytes(corrupted))
    try:
        with pytest.raises(DigestMismatch) as err:
            pull(f"{local_registry.address}/{repo_name}@{img.manifest_digest}", tmp_path / "dst")
        assert victim in str(err.value)
        assert not (tmp_path / "dst/blobs/sha256" / hexd).exists()
    finally:
        data_file.write_bytes(original)


def test_pull_refuses_tags_and_non_empty_store(local_registry, repo_name, tmp_path, build_image, writer):
    img = build_image(tmp_path / "src")
    push_layout(writer(local_registry), repo_name, tmp_path / "src", tag="v1")
    with pytest.raises(Exception, match="by digest"):
        pull(f"{local_registry.address}/{repo_name}:v1", tmp_path / "dst")
    (tmp_path / "dst").mkdir()
    (tmp_path / "dst" / "old").write_text("x")
    with pytest.raises(Exception, match="not empty"):
        pull(f"{local_registry.address}/{repo_name}@{img.manifest_digest}", tmp_path / "dst")


def test_schema2_image_pushes_and_pulls_with_exact_bytes(local_registry, repo_name, tmp_path, build_image, writer):
    img = build_image(tmp_path / "src", family=DOCKER)
    push_layout(writer(local_registry), repo_name, tmp_path / "src")
    fetched = RegistryClient(local_registry.address).get_manifest(repo_name, img.manifest_digest)
    assert fetched.raw == img.manifest_bytes and fetched.media_type == DOCKER_MANIFEST
    pulled = pull(f"{local_registry.address}/{repo_name}@{img.manifest_digest}", tmp_path / "dst")
    assert pulled.media_type == DOCKER_MANIFEST


def test_chunked_upload(local_registry, repo_name, tmp_path, build_image, writer):
    img = build_image(tmp_path / "src", layer_sizes=(300_000,))
    client = writer(local_registry, chunk_size=64 * 1024)
    push_layout(client, repo_name, tmp_path / "src")
    pulled = pull(f"{local_registry.address}/{repo_name}@{img.manifest_digest}", tmp_path / "dst")
    assert pulled.compressed_size == img.manifest.layers[0].size > 64 * 1024


def test_referrers_fall_back_to_the_tag_schema(local_registry, repo_name, tmp_path, build_image, writer):
    """Debian's docker-registry has no referrers API: a referrer is listed in the image index
    tagged `sha256-<hex>`, found from the image digest alone by an anonymous client."""
    img = build_image(tmp_path / "src")
    push_layout(writer(local_registry), repo_name, tmp_path / "src")
    payload = b'{"mediaType":"application/example"}'
    res = referrers.push_referrer(
        writer(local_registry),
        repo_name,
        img.manifest_digest,
        artifact_type="application/example",
        payload=payload,
        media_type="application/example",
        annotations={"k": "v"},
    )
    tag = "sha256-" + img.manifest_digest.split(":")[1]
    assert res.listed_by == f"tag {tag}" and res.descriptor.artifact_type == "application/example"
    anon = RegistryClient(local_registry.address)
    listing = referrers.list_referrers(anon, repo_name, img.manifest_digest)
    assert listing.found_by == f"tag {tag}" and listing.descriptors == (res.descriptor,)
    got = referrers.fetch_referrer(
        anon,
        repo_name,
        res.descriptor,
        img.manifest_digest,
        artifact_type="application/example",
        media_type="application/example",
    )
    assert got.payload == payload and got.manifest.annotations == {"k": "v"}
    assert referrers.list_referrers(anon, repo_name, "sha256:" + "0" * 64).descriptors == ()


def test_a_referrers_tag_that_is_no_index_is_refused(local_registry, repo_name, tmp_path, build_image, writer):
    img = build_image(tmp_path / "src")
    client = writer(local_registry)
    push_layout(client, repo_name, tmp_path / "src", tag="sha256-" + img.manifest_digest.split(":")[1])
    with pytest.raises(RegistryError, match="is not a referrers index"):
        referrers.list_referrers(client, repo_name, img.manifest_digest)


def test_cross_repository_mount(local_registry, repo_name, tmp_path, build_image, writer):
    img = build_image(tmp_path / "src")
    push_layout(writer(local_registry), repo_name, tmp_path / "src")
    client = writer(local_registry)
    layer = img.manifest.layers[0].digest
    assert client.mount_blob(repo_name + "-copy", layer, repo_name) is True
    assert RegistryClient(local_registry.address).has_blob(repo_name + "-copy", layer)
