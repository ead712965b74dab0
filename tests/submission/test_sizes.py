"""Image sizes in the seed's measure and the platform's, on descriptor stand-ins that carry the
real layer digests and sizes of the two MiMo images (docs/spec/mimo.md).

The registries are not reachable here: the manifests are stand-ins, built from the published
descriptors. Their config blobs are not published, so their sizes are made up (named so)."""

from __future__ import annotations

import hashlib

import pytest

from pipeline.errors import VerificationError
from pipeline.records import sizes
from pipeline.records.sizes import Blob, ImageDescriptors

MIMO_000666 = tuple(
    Blob("sha256:" + d, n)
    for d, n in (
        ("9a1e383e068632047045a276f891d457dff25d68d1c0a20eeeceb8b81b855b35", 431_542_190),
        ("1b41855cccc730788360ef6261e2516d24d3c5f015b319ed61d0413c200802ce", 140_501_547),
        ("006a47175527b3de695ebaec3280907ae6f2fbd7878a7d39495382b98088cbc7", 4_020),
        ("92e87f787a050392916c7d331c0c6593a80ec9ac92544b33b6ebe33d747aa3cc", 2_271),
        ("647d66c53d9fb3c47deca38b6b85501a4c6cc5d3e5f1744f6f56cf080316d28d", 1_901_783),
        ("4f4fb700ef54461cfa02571ae0db9a0dc1e0cdb5577484a6d75e68dc38e8acc1", 32),
    )
)
MIMO_001926 = tuple(
    Blob("sha256:" + d, n)
    for d, n in (
        ("5e2ef81cc2107356373c2575cbb72bbf9a2984fc0092745e0ab1c8f6d1d6077f", 662_840_610),
        ("824e3e1b0f3d3f0fdf46d51b313f65e3f65781f40cd19a1b8c4d16411969938f", 140_499_773),
        ("42809c16ecdd42043e4a78f39b04abe03b2a1fc50a563982e8df287b5426e1d1", 4_020),
        ("078f81a721694f8a66ef126620c5611b327637ef291ef4444f4741dea8a49e57", 2_362),
        ("dadc262899197171635be1d95806a35f2ac4f6817f22df39763c738617ca36dd", 107_774_647),
        ("4f4fb700ef54461cfa02571ae0db9a0dc1e0cdb5577484a6d75e68dc38e8acc1", 32),
    )
)
EMPTY_LAYER = MIMO_000666[-1]
IMAGE_000666 = (
    "ghcr.io/akseljoonas/mimo-openenv-software@sha256:2031f3313b3a94474fcb8f9d0b2d416eb0bb86346dd32d8dbf177384c7a681c9"
)
IMAGE_001926 = (
    "ghcr.io/akseljoonas/mimo-openenv-software@sha256:0b68bf274f65a72c13a7a6758138941aaa1b9f2fda488e05850bb466c1f9db17"
)
DERIVED = "ghcr.io/akseljoonas/mimo-openenv-software@sha256:" + "d" * 64


def _blob(tag: str, size: int) -> Blob:
    return Blob("sha256:" + hashlib.sha256(tag.encode()).hexdigest(), size)


# Stand-ins: config blob sizes (not published) and the derived image's new layers.
CONFIG_000666, CONFIG_001926, CONFIG_DERIVED = (
    _blob("config-000666", 7_345),
    _blob("config-001926", 7_512),
    _blob("config-derived", 2_904),
)
NEW_LAYERS = (_blob("env", 12_001), _blob("tasks", 4_021), _blob("licenses", 832))


def _release(new_layers=NEW_LAYERS) -> list[ImageDescriptors]:
    # The derived image is FROM the 000666 image: its six layers first, then its own.
    return [
        ImageDescriptors(DERIVED, CONFIG_DERIVED, MIMO_000666 + tuple(new_layers)),
        ImageDescriptors(IMAGE_000666, CONFIG_000666, MIMO_000666),
        ImageDescriptors(IMAGE_001926, CONFIG_001926, MIMO_001926),
    ]


def test_the_mimo_images_sum_to_the_published_figures():
    assert sum(b.size for b in MIMO_000666) == 573_951_843
    assert sum(b.size for b in MIMO_001926) == 911_121_444


def test_seed_measure_counts_the_derived_images_base_layers_once():
    new = sum(b.size for b in NEW_LAYERS)
    measured = sizes.measure(_release())
    assert measured.seed_bytes == 1_485_073_287 + new
    # The seed's published figure, with its derived image's 16,854 new bytes.
    assert new == 16_854 and measured.seed_bytes == 1_485_090_141
    assert [(i.image, i.seed_bytes, i.layer_count) for i in measured.images] == [
        (DERIVED, 573_951_843 + new, 9),
        (IMAGE_000666, 573_951_843, 6),
        (IMAGE_001926, 911_121_444, 6),
    ]


def test_platform_measure_adds_config_blobs_and_counts_every_blob_once():
    new = sum(b.size for b in NEW_LAYERS)
    configs = CONFIG_DERIVED.size + CONFIG_000666.size + CONFIG_001926.size
    measured = sizes.measure(_release())
    # Every distinct blob once: the 32-byte empty layer both MiMo images end with is one blob
    # for the platform (it reported it as shared), while the seed counted it in each image.
    assert measured.platform_bytes == 1_485_073_287 - EMPTY_LAYER.size + new + configs
    assert [i.platform_bytes for i in measured.images] == [
        573_951_843 + new + CONFIG_DERIVED.size,
        573_951_843 + CONFIG_000666.size,
        911_121_444 + CONFIG_001926.size,
    ]


def test_without_the_shared_base_every_layer_counts():
    """Teeth: a derived image that is not FROM the 000666 image adds its whole size."""
    own_base = tuple(_blob(f"other-base-{i}", b.size) for i, b in enumerate(MIMO_000666))
    images = [ImageDescriptors(DERIVED, CONFIG_DERIVED, own_base + NEW_LAYERS)] + _release()[1:]
    assert sizes.measure(images).seed_bytes == 1_485_073_287 + 573_951_843 + 16_854


def test_an_unread_manifest_counts_by_its_declared_size_and_leaves_the_platform_figure_unknown():
    images = _release()[:2] + [ImageDescriptors(IMAGE_001926, None, (), declared_bytes=911_121_444)]
    measured = sizes.measure(images)
    assert measured.seed_bytes == 1_485_090_141
    assert measured.platform_bytes is None and measured.images[2].platform_bytes is None
    assert not measured.images[2].measured and measured.images[2].layer_count is None


def test_one_blob_with_two_sizes_is_refused():
    forged = MIMO_001926[:-1] + (Blob(EMPTY_LAYER.digest, 33),)
    with pytest.raises(VerificationError, match="two sizes"):
        sizes.measure(_release()[:2] + [ImageDescriptors(IMAGE_001926, CONFIG_001926, forged)])


def test_the_record_round_trips():
    measured = sizes.measure(_release())
    assert sizes.Sizes.from_json(measured.to_json()) == measured
