"""Image configs, manifests and indexes of both families (OCI and Docker schema 2).

Records are typed and immutable; `to_bytes()` gives canonical bytes (sorted keys,
compact, UTF-8) so that digests are a pure function of content. Parsed manifests keep
no bytes of their own: whoever fetched them keeps the exact bytes (their digest is
the identity), these records are for reading fields.

`derive` makes a new image from a base: the base config is copied field by field
(fields this module does not model survive untouched), layers are appended with the
base's family media type, and the config changes are applied.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pipeline._io import canonical_json
from pipeline.errors import ReleaseError
from pipeline.formats import epoch_time
from pipeline.image.oci import digest as _digest

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"

MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
ARCH, OS = "amd64", "linux"


class ManifestError(ReleaseError):
    """A manifest, index or config is malformed or of an unsupported kind."""


class UnsupportedPlatform(ReleaseError):
    """The image is not available for linux/amd64."""


@dataclass(frozen=True)
class Family:
    """The media types of one manifest family."""

    name: str
    manifest: str
    config: str
    layer_gzip: str
    index: str


OCI = Family("oci", OCI_MANIFEST, OCI_CONFIG, OCI_LAYER_GZIP, OCI_INDEX)
DOCKER = Family("docker", DOCKER_MANIFEST, DOCKER_CONFIG, DOCKER_LAYER_GZIP, DOCKER_LIST)


def family_of(manifest_media_type: str) -> Family:
    for fam in (OCI, DOCKER):
        if manifest_media_type in (fam.manifest, fam.index):
            return fam
    raise ManifestError(
        "unsupported manifest media type", expected=" or ".join(MANIFEST_TYPES), actual=manifest_media_type
    )


def _frozen(mapping: Mapping[str, str] | None) -> Mapping[str, str]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class Platform:
    architecture: str
    os: str
    variant: str = ""

    def __str__(self) -> str:
        return f"{self.os}/{self.architecture}" + (f"/{self.variant}" if self.variant else "")


@dataclass(frozen=True)
class Descriptor:
    """A content descriptor: what a manifest says about one blob or manifest."""

    media_type: str
    digest: str
    size: int
    annotations: Mapping[str, str] = field(default_factory=dict)
    platform: Platform | None = None
    urls: tuple[str, ...] = ()
    # What an artifact manifest it points to is (OCI 1.1: referrers indexes list it).
    artifact_type: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mediaType": self.media_type, "digest": self.digest, "size": self.size}
        if self.artifact_type:
            out["artifactType"] = self.artifact_type
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        if self.platform is not None:
            out["platform"] = {"architecture": self.platform.architecture, "os": self.platform.os}
            if self.platform.variant:
                out["platform"]["variant"] = self.platform.variant
        if self.urls:
            out["urls"] = list(self.urls)
        return out

    @classmethod
    def from_json(cls, raw: Any, *, where: str) -> Descriptor:
        if not isinstance(raw, dict):
            raise ManifestError(f"{where} is not a descriptor object", actual=type(raw).__name__)
        try:
            size = raw["size"]
            dig = _digest.parse(raw["digest"], what=f"{where}.digest")
            media_type = raw.get("mediaType", "")
        except KeyError as exc:
            raise ManifestError(f"{where} lacks {exc.args[0]!r}") from None
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ManifestError(f"{where}.size is not a byte count", actual=repr(size))
        plat = raw.get("platform")
        return cls(
            media_type=media_type,
            digest=dig,
            size=size,
            annotations=_frozen(raw.get("annotations")),
            platform=Platform(plat.get("architecture", ""), plat.get("os", ""), plat.get("variant", ""))
            if isinstance(plat, dict)
            else None,
            urls=tuple(raw.get("urls") or ()),
            artifact_type=str(raw.get("artifactType") or ""),
        )


@dataclass(frozen=True)
class Manifest:
    """An image manifest (OCI or Docker schema 2), or an OCI artifact manifest."""

    media_type: str
    config: Descriptor
    layers: tuple[Descriptor, ...]
    annotations: Mapping[str, str] = field(default_factory=dict)
    artifact_type: str = ""
    subject: Descriptor | None = None

    @property
    def family(self) -> Family:
        return family_of(self.media_type)

    @property
    def compressed_size(self) -> int:
        """Sum of the layer sizes: the bytes a pull transfers for layers."""
        return sum(layer.size for layer in self.layers)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schemaVersion": 2,
            "mediaType": self.media_type,
            "config": self.config.to_json(),
            "layers": [layer.to_json() for layer in self.layers],
        }
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        if self.artifact_type:
            out["artifactType"] = self.artifact_type
        if self.subject is not None:
            out["subject"] = self.subject.to_json()
        return out

    def to_bytes(self) -> bytes:
        return canonical_json(self.to_json())


@dataclass(frozen=True)
class Index:
    """An OCI image index or a Docker manifest list."""

    media_type: str
    manifests: tuple[Descriptor, ...]

    def to_json(self) -> dict[str, Any]:
        return {"schemaVersion": 2, "mediaType": self.media_type, "manifests": [d.to_json() for d in self.manifests]}

    def to_bytes(self) -> bytes:
        return canonical_json(self.to_json())

    def select(self, architecture: str = ARCH, os: str = OS) -> Descriptor:
        """The manifest for os/architecture, or UnsupportedPlatform naming what exists."""
        for desc in self.manifests:
            if desc.platform and desc.platform.architecture == architecture and desc.platform.os == os:
                return desc
        found = ", ".join(str(d.platform) for d in self.manifests if d.platform) or "none"
        raise UnsupportedPlatform(
            f"image index has no {os}/{architecture} manifest",
            expected=f"{os}/{architecture}",
            actual=found,
            hint="use a base image built for linux/amd64",
        )


def _load(raw: bytes, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ManifestError(f"{what} is not a JSON object", actual=type(obj).__name__)
    return obj


def parse(raw: bytes, media_type: str = "") -> Manifest | Index:
    """Parse a manifest or index; `media_type` is the Content-Type if the body lacks one."""
    obj = _load(raw, "manifest")
    kind = obj.get("mediaType") or media_type
    if not kind:
        kind = OCI_INDEX if "manifests" in obj else OCI_MANIFEST
    if obj.get("schemaVersion") != 2:
        raise ManifestError(
            "unsupported manifest schema version",
            expected=2,
            actual=obj.get("schemaVersion"),
            hint="schema 1 manifests are not supported; re-push the image",
        )
    if kind in INDEX_TYPES:
        items = obj.get("manifests")
        if not isinstance(items, list):
            raise ManifestError("image index lacks a manifests list")
        return Index(kind, tuple(Descriptor.from_json(d, where=f"manifests[{i}]") for i, d in enumerate(items)))
    if kind not in MANIFEST_TYPES:
        raise ManifestError(
            "unsupported manifest media type", expected=" or ".join(MANIFEST_TYPES + INDEX_TYPES), actual=kind
        )
    layers = obj.get("layers")
    if not isinstance(layers, list):
        raise ManifestError("manifest lacks a layers list")
    subject = obj.get("subject")
    return Manifest(
        media_type=kind,
        config=Descriptor.from_json(obj.get("config"), where="config"),
        layers=tuple(Descriptor.from_json(d, where=f"layers[{i}]") for i, d in enumerate(layers)),
        annotations=_frozen(obj.get("annotations")),
        artifact_type=obj.get("artifactType", ""),
        subject=Descriptor.from_json(subject, where="subject") if subject else None,
    )


def parse_manifest(raw: bytes, media_type: str = "") -> Manifest:
    """Parse bytes that must be a single-image manifest (not an index)."""
    parsed = parse(raw, media_type)
    if isinstance(parsed, Index):
        raise ManifestError("expected an image manifest, got an index", hint="select a platform from the index first")
    return parsed


# ------------------------------------------------------------------ config


@dataclass(frozen=True)
class ContainerConfig:
    """The runtime part of an image config (`config` in the JSON)."""

    cmd: tuple[str, ...] = ()
    entrypoint: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    working_dir: str = ""
    exposed_ports: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    user: str = ""

    def env_map(self) -> dict[str, str]:
        return {name: value for name, _, value in (item.partition("=") for item in self.env)}


@dataclass(frozen=True)
class HistoryEntry:
    created: str = ""
    created_by: str = ""
    comment: str = ""
    empty_layer: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"created": self.created, "created_by": self.created_by}
        if self.comment:
            out["comment"] = self.comment
        if self.empty_layer:
            out["empty_layer"] = True
        return out


@dataclass(frozen=True)
class ImageConfig:
    """A parsed image config. `raw` keeps every field, modelled or not."""

    architecture: str
    os: str
    created: str
    config: ContainerConfig
    diff_ids: tuple[str, ...]
    history: tuple[HistoryEntry, ...]
    raw: Mapping[str, Any] = field(repr=False, compare=False, default_factory=dict)

    def check_platform(self) -> None:
        if (self.os, self.architecture) != (OS, ARCH):
            raise UnsupportedPlatform(
                "image is not built for linux/amd64",
                expected=f"{OS}/{ARCH}",
                actual=f"{self.os}/{self.architecture}",
                hint="use a base image built for linux/amd64",
            )


def parse_config(raw: bytes) -> ImageConfig:
    obj = _load(raw, "image config")
    cfg = obj.get("config") or {}
    rootfs = obj.get("rootfs") or {}
    if rootfs.get("type", "layers") != "layers" or not isinstance(rootfs.get("diff_ids", []), list):
        raise ManifestError("image config has no layer rootfs", actual=repr(rootfs)[:80])
    return ImageConfig(
        architecture=obj.get("architecture", ""),
        os=obj.get("os", ""),
        created=obj.get("created", ""),
        config=ContainerConfig(
            cmd=tuple(cfg.get("Cmd") or ()),
            entrypoint=tuple(cfg.get("Entrypoint") or ()),
            env=tuple(cfg.get("Env") or ()),
            working_dir=cfg.get("WorkingDir") or "",
            exposed_ports=tuple(sorted(cfg.get("ExposedPorts") or {})),
            labels=_frozen(cfg.get("Labels")),
            user=cfg.get("User") or "",
        ),
        diff_ids=tuple(rootfs.get("diff_ids") or ()),
        history=tuple(
            HistoryEntry(
                h.get("created", ""), h.get("created_by", ""), h.get("comment", ""), bool(h.get("empty_layer", False))
            )
            for h in obj.get("history") or ()
        ),
        raw=MappingProxyType(obj),
    )


# ------------------------------------------------------------------ building


@dataclass(frozen=True)
class ConfigChanges:
    """What a derived image changes in its base's runtime config (None = keep)."""

    cmd: tuple[str, ...] | None = None
    entrypoint: tuple[str, ...] | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    working_dir: str | None = None
    exposed_ports: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    user: str | None = None


@dataclass(frozen=True)
class NewLayer:
    """A layer to append: its blob digests and size, and a history line."""

    digest: str
    diff_id: str
    size: int
    created_by: str
    comment: str = ""


@dataclass(frozen=True)
class BaseImage:
    """A base as fetched: its manifest and its exact config bytes."""

    manifest: Manifest
    config_bytes: bytes


@dataclass(frozen=True)
class BuiltImage:
    """A derived image: exact config and manifest bytes, and their digests."""

    manifest: Manifest
    manifest_bytes: bytes
    manifest_digest: str
    config_bytes: bytes
    config_digest: str

    @property
    def media_type(self) -> str:
        return self.manifest.media_type


def _merge_env(base: Sequence[str], changes: Mapping[str, str]) -> list[str]:
    out, seen = [], set()
    for item in base:
        key = item.split("=", 1)[0]
        if key in changes:
            out.append(f"{key}={changes[key]}")
            seen.add(key)
        else:
            out.append(item)
    out += [f"{k}={changes[k]}" for k in sorted(changes) if k not in seen]
    return out


def _apply(cfg: dict[str, Any], changes: ConfigChanges) -> dict[str, Any]:
    cfg = dict(cfg)
    if changes.cmd is not None:
        cfg["Cmd"] = list(changes.cmd)
    if changes.entrypoint is not None:
        cfg["Entrypoint"] = list(changes.entrypoint) or None
    if changes.env:
        cfg["Env"] = _merge_env(cfg.get("Env") or [], changes.env)
    if changes.working_dir is not None:
        cfg["WorkingDir"] = changes.working_dir
    if changes.exposed_ports:
        ports = dict(cfg.get("ExposedPorts") or {})
        ports.update({p: {} for p in changes.exposed_ports})
        cfg["ExposedPorts"] = ports
    if changes.labels:
        cfg["Labels"] = {**(cfg.get("Labels") or {}), **changes.labels}
    if changes.user is not None:
        cfg["User"] = changes.user
    return {k: v for k, v in cfg.items() if v is not None}


def derive(
    base: BaseImage | None,
    layers: Sequence[NewLayer],
    changes: ConfigChanges,
    *,
    source_date_epoch: int,
    family: Family = OCI,
    annotations: Mapping[str, str] | None = None,
) -> BuiltImage:
    """Base + appended layers + config changes -> new config and manifest bytes.

    With a base, the base's family is kept (a Docker schema-2 base gets schema-2
    layers) and `family` is ignored; without one, the image starts from scratch.
    """
    created = epoch_time(source_date_epoch)
    if base is not None:
        family = base.manifest.family
        _digest.verify(base.config_bytes, base.manifest.config.digest, what="base image config")
        cfg = parse_config(base.config_bytes)
        cfg.check_platform()
        if len(cfg.diff_ids) != len(base.manifest.layers):
            raise ManifestError(
                "base config and manifest disagree on the layer count",
                expected=len(base.manifest.layers),
                actual=len(cfg.diff_ids),
            )
        obj = dict(cfg.raw)
        base_layers = base.manifest.layers
    else:
        obj = {
            "architecture": ARCH,
            "os": OS,
            "config": {},
            "rootfs": {"type": "layers", "diff_ids": []},
            "history": [],
        }
        base_layers = ()
    obj["created"] = created
    obj["config"] = _apply(obj.get("config") or {}, changes)
    obj["rootfs"] = {"type": "layers", "diff_ids": list(obj["rootfs"]["diff_ids"]) + [l.diff_id for l in layers]}
    obj["history"] = list(obj.get("history") or []) + [
        HistoryEntry(created, l.created_by, l.comment).to_json() for l in layers
    ]
    config_bytes = canonical_json(obj)
    config_digest = _digest.of_bytes(config_bytes)
    manifest = Manifest(
        media_type=family.manifest,
        config=Descriptor(family.config, config_digest, len(config_bytes)),
        layers=tuple(base_layers) + tuple(Descriptor(family.layer_gzip, l.digest, l.size) for l in layers),
        annotations=_frozen(annotations) if family is OCI else _frozen(None),
    )
    manifest_bytes = manifest.to_bytes()
    return BuiltImage(manifest, manifest_bytes, _digest.of_bytes(manifest_bytes), config_bytes, config_digest)
