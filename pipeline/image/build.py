"""Daemonless derived-image build: base@digest + application layers + config.

The image is a pure function of the base's manifest and config (read by digest from a
`BaseSource`: a registry or an OCI image layout), the base's recorded name, the
application layers (`pipeline.image.payload`), the image-input revision and
SOURCE_DATE_EPOCH. Nothing about where the base was read from (a loopback registry's
port, a layout's path) reaches the image. Output: a complete OCI image layout under
`dist/oci/` (base blobs included, so later stages never need the registry) and the
build record `dist/build.json`, which holds every value written into the config.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from pipeline import config as _config
from pipeline._io import read_json, write_json_atomic
from pipeline.errors import ConfigError
from pipeline.image.imageconfig import ImageConfigValues, image_config
from pipeline.image.layerdiff import AppLayer, members_of_blob
from pipeline.image.oci.image import BaseImage, NewLayer, derive
from pipeline.image.oci.layer import write_layer, zlib_version
from pipeline.image.oci.layout import Layout
from pipeline.image.payload import VendoredTaskFile, app_layers
from pipeline.progress import say

RECORD_VERSION = 2
# How the history of the image config names each layer this build appends; whatever
# comes before them is the base's (image/inherited.py reads it back).
HISTORY_PREFIX = "pipeline.build: "


class Base(Protocol):
    """The base a build is handed, already resolved: its recorded name and digest, and a
    way to read it (registry/basesource.py's BaseSource reads a registry or a layout).
    The build never finds a registry itself."""

    @property
    def name(self) -> str: ...

    @property
    def digest(self) -> str: ...

    def read(self, layout: Layout) -> BaseImage:
        """The base's manifest and config, its layer blobs linked into `layout`."""


@dataclass(frozen=True)
class BuildRecord:
    """What `build` produced; written to dist/build.json by `write_record`."""

    repository: str
    tag: str
    manifest_digest: str
    media_type: str
    config_digest: str
    base: str
    base_layers: tuple[tuple[str, int], ...]
    app_layers: tuple[AppLayer, ...]
    source_revision: str
    source_date_epoch: int
    zlib: str
    layout: str
    config: ImageConfigValues

    @property
    def compressed_size(self) -> int:
        return sum(s for _, s in self.base_layers) + sum(l.size for l in self.app_layers)

    @property
    def app_size(self) -> int:
        return sum(l.size for l in self.app_layers)

    def to_json(self) -> dict:
        data = asdict(self)
        data["version"] = RECORD_VERSION
        data["base_layers"] = [{"digest": d, "size": s} for d, s in self.base_layers]
        data["app_layers"] = [l.to_json() for l in self.app_layers]
        data["config"] = self.config.to_json()
        return data

    @classmethod
    def from_json(cls, data: dict) -> BuildRecord:
        if data.get("version") != RECORD_VERSION:
            raise ConfigError("unsupported build record version", expected=RECORD_VERSION, actual=data.get("version"))
        return cls(
            repository=data["repository"],
            tag=data["tag"],
            manifest_digest=data["manifest_digest"],
            media_type=data["media_type"],
            config_digest=data["config_digest"],
            base=data["base"],
            base_layers=tuple((l["digest"], l["size"]) for l in data["base_layers"]),
            app_layers=tuple(AppLayer.from_json(l) for l in data["app_layers"]),
            source_revision=data["source_revision"],
            source_date_epoch=data["source_date_epoch"],
            zlib=data["zlib"],
            layout=data["layout"],
            config=ImageConfigValues.from_json(data["config"]),
        )


def write_record(record: BuildRecord, path: Path) -> None:
    write_json_atomic(path, record.to_json())


def load_record(path: Path) -> BuildRecord:
    try:
        return BuildRecord.from_json(read_json(path))
    except FileNotFoundError:
        raise ConfigError(f"no build record at {path}", hint="run `nox -s build` first") from None


def build(
    cfg: _config.ReleaseConfig,
    *,
    repo: Path,
    base: Base,
    repository: str,
    tag: str,
    source_revision: str,
    source_date_epoch: int,
    vendored: VendoredTaskFile | None = None,
    out: Path,
) -> BuildRecord:
    """Build the derived image into `out/oci` and return its record (not yet written).

    `source_revision` is the image-input commit (`pipeline.inputs.image_inputs`)."""
    layout = Layout.init(Path(out) / "oci")
    base_image = base.read(layout)
    blobs_dir = layout.root / "blobs" / "sha256"
    built_layers: list[AppLayer] = []
    # The image's env/catalog.py serves only the curriculum file the build writes: a release.toml
    # without [curriculum] is refused here (ConfigError), not at the image's first start.
    for spec in app_layers(repo, cfg.app_dir, vendored, cfg.curriculum.file_bytes()):
        layer = write_layer(spec.entries, blobs_dir, source_date_epoch=source_date_epoch)
        built_layers.append(
            AppLayer(spec.name, layer.digest, layer.diff_id, layer.size, tuple(members_of_blob(layer.path)))
        )
    values = image_config(
        cfg,
        base_name=base.name,
        base_digest=base.digest,
        revision=source_revision,
        source_date_epoch=source_date_epoch,
        vendored=vendored,
    )
    image = derive(
        base_image,
        [NewLayer(l.digest, l.diff_id, l.size, f"{HISTORY_PREFIX}{l.name} layer") for l in built_layers],
        values.changes(),
        source_date_epoch=source_date_epoch,
    )
    layout.put_bytes(image.config_bytes)
    layout.add_manifest(image.manifest_bytes, image.media_type, ref_name=tag)
    record = BuildRecord(
        repository=repository,
        tag=tag,
        manifest_digest=image.manifest_digest,
        media_type=image.media_type,
        config_digest=image.config_digest,
        base=f"{base.name}@{base.digest}",
        base_layers=tuple((l.digest, l.size) for l in base_image.manifest.layers),
        app_layers=tuple(built_layers),
        source_revision=source_revision,
        source_date_epoch=source_date_epoch,
        zlib=zlib_version(),
        layout=str(layout.root),
        config=values,
    )
    say(f"built {repository}@{image.manifest_digest}")
    say(
        f"  base {base}; {len(built_layers)} app layers, {record.app_size:,} bytes "
        f"({', '.join(f'{l.name} {l.digest[7:19]}' for l in built_layers)})"
    )
    return record
