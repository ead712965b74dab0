"""The release's images measured as the seed and as the platform measure them.

Both measures read only what registry manifests declare (descriptor sizes), never the
blobs themselves:

- **seed** (the seed release's figure): the sum of layer sizes, no config blobs, each
  layer once *in its place*: an image built FROM another image of the release (its layer
  list begins with the other's) adds only its own new layers. Layers are told apart by
  their chain (the layer and every layer below it, as a layer store keeps them), so the
  32-byte empty layer that both MiMo images end with counts in each, as the seed counted
  it: 1,485,090,141 = 573,951,843 + 911,121,444 + the derived image's 16,854 new bytes.
- **platform** (`compressed_bytes_declared_by_registry_manifests`): config blob plus
  layers, every distinct blob (by digest) once, as the platform's admission reports it.

An image whose manifest could not be read (an external image offline) counts in the seed
figure by the size release.toml declares for it; the platform figure, which needs its
config blob, is then unknown (None) for it and for the release.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipeline.config import ExternalTask
from pipeline.errors import ConfigError, VerificationError

if TYPE_CHECKING:  # the check suite's modules load the OpenEnv client: only `descriptors` needs them
    from pipeline.checks.results import SuiteResult

SEED_MEASURE = (
    "layer sizes, no config blobs; an image built FROM another image of the release "
    "adds only its new layers (layers counted once per chain)"
)
PLATFORM_MEASURE = "compressed_bytes_declared_by_registry_manifests: config blob + layers, every distinct blob once"


@dataclass(frozen=True)
class Blob:
    """A descriptor of a manifest: the blob's digest and declared size."""

    digest: str
    size: int


@dataclass(frozen=True)
class ImageDescriptors:
    """What one image's manifest declares: its config blob and layers (empty when the
    manifest was not read, `declared_bytes` then standing in for the seed figure)."""

    image: str
    config: Blob | None
    layers: tuple[Blob, ...]
    declared_bytes: int | None = None

    @property
    def measured(self) -> bool:
        return self.config is not None and bool(self.layers)


@dataclass(frozen=True)
class ImageSize:
    """One image's two figures (platform None: not measured)."""

    image: str
    measured: bool
    layer_count: int | None
    seed_bytes: int
    platform_bytes: int | None


@dataclass(frozen=True)
class Sizes:
    """Every image of the release and the release's totals, in both measures."""

    images: tuple[ImageSize, ...]
    seed_bytes: int
    platform_bytes: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "measures": {"seed": SEED_MEASURE, "platform": PLATFORM_MEASURE},
            "images": [img.__dict__ for img in self.images],
            "seed_bytes": self.seed_bytes,
            "platform_bytes": self.platform_bytes,
        }

    @classmethod
    def from_json(cls, data: Any) -> Sizes:
        if not isinstance(data, dict) or set(data) != {"measures", "images", "seed_bytes", "platform_bytes"}:
            raise ConfigError(
                "sizes is not a sizes record",
                expected=["images", "measures", "platform_bytes", "seed_bytes"],
                actual=sorted(data) if isinstance(data, dict) else type(data).__name__,
            )
        return cls(
            images=tuple(ImageSize(**img) for img in data["images"]),
            seed_bytes=data["seed_bytes"],
            platform_bytes=data["platform_bytes"],
        )


def _once(blobs: Iterable[tuple[Any, Blob]]) -> int:
    """The sum of sizes, each key once; a key listed with two sizes is refused."""
    sizes: dict[Any, int] = {}
    for key, blob in blobs:
        if sizes.setdefault(key, blob.size) != blob.size:
            raise VerificationError(
                f"blob {blob.digest} is listed with two sizes", expected=sizes[key], actual=blob.size
            )
    return sum(sizes.values())


def _chains(layers: Sequence[Blob]) -> Iterable[tuple[tuple[str, ...], Blob]]:
    """Each layer keyed by its chain: its digest and the digests of every layer below it."""
    for i, layer in enumerate(layers):
        yield tuple(l.digest for l in layers[: i + 1]), layer


def seed_total(images: Sequence[ImageDescriptors]) -> int:
    """The seed's figure for a release (see the module doc)."""
    measured = _once(pair for img in images if img.layers for pair in _chains(img.layers))
    return measured + sum(img.declared_bytes or 0 for img in images if not img.layers)


def platform_total(images: Sequence[ImageDescriptors]) -> int | None:
    """The platform's figure for a release; None unless every manifest was read."""
    if not images or not all(img.measured for img in images):
        return None
    return _once((b.digest, b) for img in images for b in (img.config, *img.layers) if b is not None)


def measure(images: Sequence[ImageDescriptors]) -> Sizes:
    """Both figures of every image (one entry per distinct image, first seen first) and of the release."""
    seen: dict[str, ImageDescriptors] = {}
    for img in images:
        seen.setdefault(img.image, img)
    distinct = list(seen.values())
    rows = tuple(
        ImageSize(
            image=img.image,
            measured=img.measured,
            layer_count=len(img.layers) if img.layers else None,
            seed_bytes=seed_total([img]),
            platform_bytes=platform_total([img]),
        )
        for img in distinct
    )
    return Sizes(images=rows, seed_bytes=seed_total(distinct), platform_bytes=platform_total(distinct))


def descriptors(checks: SuiteResult, image: str, tasks: Sequence[ExternalTask]) -> list[ImageDescriptors]:
    """The release's images as the check suite read their manifests: the built image (pulled
    by digest) first, then each external task's image in release.toml order."""
    from pipeline.checks.external import ExternalResult

    config = Blob(*checks.config) if checks.config else None
    out = [ImageDescriptors(image, config, tuple(Blob(d, n) for d, n in checks.layers))]
    results = {e["task_id"]: ExternalResult.from_json(e) for e in checks.external}
    for task in tasks:
        got = results.get(task.task_id)
        if got is not None and got.layers and got.config_size:
            out.append(
                ImageDescriptors(
                    task.image, Blob(got.config_digest, got.config_size), tuple(Blob(d, n) for d, n in got.layers)
                )
            )
        else:
            out.append(ImageDescriptors(task.image, None, (), declared_bytes=task.compressed_bytes))
    return out
