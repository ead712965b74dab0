"""Daemonless derived-image build: base@digest + application layers + config.

The image is a pure function of the base's manifest and config (read by digest from a
`BaseSource`: a registry or an OCI image layout), the base's recorded name, the
application layers (`pipeline.payload`), the image-input revision and
SOURCE_DATE_EPOCH. Nothing about where the base was read from (a loopback registry's
port, a layout's path) reaches the image. Output: a complete OCI image layout under
`dist/oci/` (base blobs included, so later stages never need the registry) and the
build record `dist/build.json`, which holds every value written into the config.
"""

from __future__ import annotations

import argparse
import ipaddress
from dataclasses import asdict, dataclass
from pathlib import Path

from . import config as _config
from . import base as _base
from . import localregistry, provenance
from ._io import read_json, write_json_atomic
from .errors import ConfigError
from .layerdiff import AppLayer, members_of_blob
from .imageconfig import ImageConfigValues, image_config
from .oci.image import (BaseImage, Index, NewLayer, UnsupportedPlatform, derive,
                        parse, parse_config, parse_manifest)
from .oci.layer import write_layer, zlib_version
from .oci.layout import Layout
from .oci.registry import Credentials, Reference, RegistryClient
from .payload import VendoredTaskFile, app_layers
from .progress import Progress, say
from .publish import push_layout
from .sources import check_vendored

RECORD_VERSION = 2
# Base layer blobs, content-addressed and shared by every build of this checkout.
BLOB_CACHE = _config.REPO_ROOT / ".release" / "cache" / "blobs"


def _loopback(registry: str) -> bool:
    """Whether `host[:port]` (or `[v6]:port`) names this machine's loopback interface."""
    name = registry[1:registry.find("]")] if registry.startswith("[") else registry.split(":")[0]
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def stable_name(ref: Reference) -> str:
    """The name a base is recorded under: a loopback registry's address is this machine's
    (another rebuilder's port differs), so only the repository; otherwise host/repository."""
    return ref.repository if _loopback(ref.registry) else ref.name


@dataclass(frozen=True)
class BaseSource:
    """Where the build reads its base (by digest): a registry, or an OCI image layout.

    `name` is the base's recorded name, the one the image's label carries, whatever
    the source; the source itself never reaches the image.
    """

    name: str
    digest: str
    registry: str | None = None
    repository: str | None = None
    layout: Path | None = None

    @classmethod
    def from_registry(cls, reference: str, name: str | None = None) -> "BaseSource":
        ref = Reference.parse(reference)
        if ref.digest is None:
            raise ConfigError(f"base {ref} must be pinned by digest", expected="name@sha256:...",
                              actual=str(ref))
        return cls(name=name or stable_name(ref), digest=ref.digest, registry=ref.registry,
                   repository=ref.repository)

    @classmethod
    def from_layout(cls, layout: Path, name: str, digest: str) -> "BaseSource":
        return cls(name=name, digest=digest, layout=Path(layout))

    def __str__(self) -> str:
        where = f"registry {self.registry}" if self.layout is None else f"OCI layout {self.layout}"
        return f"{self.name}@{self.digest} from {where}"


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
    def from_json(cls, data: dict) -> "BuildRecord":
        if data.get("version") != RECORD_VERSION:
            raise ConfigError("unsupported build record version", expected=RECORD_VERSION,
                              actual=data.get("version"))
        return cls(
            repository=data["repository"], tag=data["tag"],
            manifest_digest=data["manifest_digest"], media_type=data["media_type"],
            config_digest=data["config_digest"], base=data["base"],
            base_layers=tuple((l["digest"], l["size"]) for l in data["base_layers"]),
            app_layers=tuple(AppLayer.from_json(l) for l in data["app_layers"]),
            source_revision=data["source_revision"], source_date_epoch=data["source_date_epoch"],
            zlib=data["zlib"], layout=data["layout"],
            config=ImageConfigValues.from_json(data["config"]),
        )


def write_record(record: BuildRecord, path: Path) -> None:
    write_json_atomic(path, record.to_json())


def load_record(path: Path) -> BuildRecord:
    try:
        return BuildRecord.from_json(read_json(path))
    except FileNotFoundError:
        raise ConfigError(f"no build record at {path}", hint="run `nox -s build` first") from None


def read_base(source: BaseSource, layout: Layout) -> BaseImage:
    """The base's manifest and config, its layer blobs linked into `layout`."""
    if source.layout is None:
        ref = Reference(source.registry or "", source.repository or source.name, None,
                        source.digest)
        # The base is read anonymously, as anyone rebuilding the image would read it.
        return fetch_base(RegistryClient(ref.registry), ref, layout)
    return base_from_layout(Layout.open(source.layout), source.digest, layout)


def base_from_layout(src: Layout, digest: str, layout: Layout) -> BaseImage:
    """The base `digest` from an OCI image layout (every blob verified on the way)."""
    desc = next((d for d in src.index().manifests if d.digest == digest), None)
    if desc is None:
        raise ConfigError(f"the base {digest} is not in the OCI layout {src.root}",
                          actual=", ".join(d.digest for d in src.index().manifests) or "empty",
                          hint="rebuild the base layout from locks/base.json")
    raw = src.read_blob(desc.digest, size=desc.size)
    manifest = parse_manifest(raw, desc.media_type)
    config_bytes = src.read_blob(manifest.config.digest, size=manifest.config.size)
    layout.put_bytes(config_bytes)
    for layer in manifest.layers:
        if not layout.has_blob(layer.digest):
            layout.put_file(src.blob_path(layer.digest), layer.digest, link=True)
    return BaseImage(manifest=manifest, config_bytes=config_bytes)


def fetch_base(client: RegistryClient, ref: Reference, layout: Layout) -> BaseImage:
    """The base's manifest and config by digest; its layer blobs into `layout`.

    Blobs already in the layout (verified when written) are not fetched again, so a
    no-op rebuild touches the registry for two small documents only.
    """
    if ref.digest is None:
        raise ConfigError(f"base {ref} must be pinned by digest", expected="name@sha256:...",
                          actual=str(ref))
    fetched = client.get_manifest(ref.repository, ref.digest)
    parsed = parse(fetched.raw, fetched.media_type)
    if isinstance(parsed, Index):
        chosen = parsed.select()
        fetched = client.get_manifest(ref.repository, chosen.digest)
        parsed = parse(fetched.raw, fetched.media_type)
        if isinstance(parsed, Index):
            raise UnsupportedPlatform(f"base {ref} index points to another index")
    manifest = parsed
    if layout.has_blob(manifest.config.digest):
        config_bytes = layout.read_blob(manifest.config.digest, size=manifest.config.size)
    else:
        config_bytes = client.get_blob_bytes(ref.repository, manifest.config.digest)
        layout.put_bytes(config_bytes)
    config = parse_config(config_bytes)
    platform = f"{config.os}/{config.architecture}"
    if platform != "linux/amd64":
        raise UnsupportedPlatform(f"base {ref} is not a linux/amd64 image", expected="linux/amd64",
                                  actual=platform, hint="pin the amd64 image (or its index)")
    missing = [l for l in manifest.layers if not layout.has_blob(l.digest)]
    fetch = [l for l in missing if not (BLOB_CACHE / l.digest[7:]).is_file()]
    if fetch:
        BLOB_CACHE.mkdir(parents=True, exist_ok=True)
        progress = Progress(f"fetch base layers of {ref.name}", sum(l.size for l in fetch), unit="B")
        for layer in fetch:
            client.get_blob(ref.repository, layer.digest, BLOB_CACHE / layer.digest[7:],
                            size=layer.size, progress=progress)
        progress.finish()
    for layer in missing:
        # Cached blobs were digest-checked when fetched; a layout gets a hard link (or copy).
        layout.put_file(BLOB_CACHE / layer.digest[7:], layer.digest, link=True)
    return BaseImage(manifest=manifest, config_bytes=config_bytes)


def build(
    cfg: _config.ReleaseConfig,
    *,
    repo: Path,
    base: BaseSource,
    repository: str,
    tag: str,
    source_revision: str,
    source_date_epoch: int,
    vendored: VendoredTaskFile | None = None,
    out: Path,
) -> BuildRecord:
    """Build the derived image into `out/oci` and return its record (not yet written).

    `source_revision` is the image-input commit (`provenance.image_inputs`)."""
    base_source = base
    layout = Layout.init(Path(out) / "oci")
    base_image = read_base(base_source, layout)
    blobs_dir = layout.root / "blobs" / "sha256"
    built_layers: list[AppLayer] = []
    for spec in app_layers(repo, cfg.app_dir, vendored):
        layer = write_layer(spec.entries, blobs_dir, source_date_epoch=source_date_epoch)
        built_layers.append(AppLayer(spec.name, layer.digest, layer.diff_id, layer.size,
                                     tuple(members_of_blob(layer.path))))
    values = image_config(cfg, base_name=base_source.name, base_digest=base_source.digest,
                          revision=source_revision,
                          source_date_epoch=source_date_epoch, vendored=vendored)
    image = derive(base_image, [NewLayer(l.digest, l.diff_id, l.size, f"pipeline.build: {l.name} layer")
                          for l in built_layers],
                   values.changes(), source_date_epoch=source_date_epoch)
    layout.put_bytes(image.config_bytes)
    layout.add_manifest(image.manifest_bytes, image.media_type, ref_name=tag)
    record = BuildRecord(
        repository=repository, tag=tag, manifest_digest=image.manifest_digest,
        media_type=image.media_type, config_digest=image.config_digest,
        base=f"{base_source.name}@{base_source.digest}",
        base_layers=tuple((l.digest, l.size) for l in base_image.manifest.layers),
        app_layers=tuple(built_layers), source_revision=source_revision,
        source_date_epoch=source_date_epoch, zlib=zlib_version(), layout=str(layout.root),
        config=values,
    )
    say(f"built {repository}@{image.manifest_digest}")
    say(f"  base {base_source}; {len(built_layers)} app layers, {record.app_size:,} bytes "
        f"({', '.join(f'{l.name} {l.digest[7:19]}' for l in built_layers)})")
    return record


def vendored_task_file(cfg: _config.ReleaseConfig, profile: _config.Profile,
                       vendor_dir: Path) -> VendoredTaskFile | None:
    """The profile's vendored task module, verified from `vendor_dir` (no network)."""
    name = profile.vendored_source
    if name is None:
        return None
    record = check_vendored(cfg.source(name), vendor_dir)
    return VendoredTaskFile(source=name, file=vendor_dir / record.vendor_path,
                            license_file=vendor_dir / record.license_path)


def push_client(profile: _config.Profile) -> RegistryClient:
    """A client for the profile's registry with push credentials (local registry's own,
    else from the environment)."""
    if profile.local:
        ep = localregistry.endpoint()
        return RegistryClient(ep.address, credentials=Credentials(ep.user, ep.password))
    return RegistryClient(profile.registry, credentials=Credentials.from_env(profile.registry))


def same_registry_repos(client: RegistryClient, base: BaseSource) -> tuple[str, ...]:
    """The base's repository when it lives in the push registry: its blobs are mounted,
    not uploaded again."""
    return (base.repository,) if base.repository and base.registry == client.registry else ()


def pinned_base(profile: _config.Profile) -> tuple[str, str]:
    """The recorded name and digest of the profile's base (release.toml or locks/base.json)."""
    if profile.base != "local":
        ref = Reference.parse(profile.base)
        return ref.name, ref.digest or ""
    record = _base.load_record()
    if record is None:
        raise ConfigError(f"the local base is not built yet (no {_base.BASE_LOCK.name})",
                          hint="run `nox -s base` first")
    return record.name, record.digest


def base_source(profile: _config.Profile, *, registry: str | None = None) -> BaseSource:
    """The base to build on, read from a registry: the profile's pinned digest, or the
    local base lock's from `registry` (default: the local registry)."""
    if profile.base != "local":
        return BaseSource.from_registry(profile.base, name=Reference.parse(profile.base).name)
    name, digest = pinned_base(profile)
    return BaseSource(name=name, digest=digest, repository=name,
                      registry=registry or localregistry.endpoint().address)


def main(argv: list[str]) -> int:
    """`python -m pipeline build`: build the derived image, push it, write dist/build.json."""
    ap = argparse.ArgumentParser(prog="python -m pipeline build",
                                 description="Build the derived image from the base digest and push it.")
    ap.add_argument("--profile", default="local")
    ap.add_argument("--config", type=Path, default=_config.DEFAULT_CONFIG)
    ap.add_argument("--repo", type=Path, default=Path.cwd(), help="the project checkout to build")
    ap.add_argument("--base", default=None,
                    help="override the base: registry/name@sha256:... (read from that registry)")
    ap.add_argument("--base-layout", type=Path, default=None,
                    help="read the profile's base (by its pinned digest) from this OCI layout "
                         "instead of a registry")
    ap.add_argument("--out", type=Path, default=Path("dist"))
    ap.add_argument("--vendor-dir", type=Path, default=Path("vendor"))
    ap.add_argument("--no-push", action="store_true", help="build the layout only")
    ap.add_argument("--allow-dirty", action="store_true",
                    help="build from a checkout with uncommitted changes (recorded)")
    args = ap.parse_args(argv)
    cfg = _config.load(args.config)
    profile = cfg.profile(args.profile)
    repo = args.repo.resolve()
    provenance.project_revision(repo, allow_dirty=args.allow_dirty)
    inputs = provenance.image_inputs(repo)
    sde = provenance.source_date_epoch(repo)
    if args.base:
        source = BaseSource.from_registry(args.base)
    elif args.base_layout:
        source = BaseSource.from_layout(args.base_layout, *pinned_base(profile))
    else:
        source = base_source(profile)
    record = build(
        cfg, repo=repo, base=source, repository=profile.image_name, tag=profile.tag,
        source_revision=inputs.commit, source_date_epoch=sde,
        vendored=vendored_task_file(cfg, profile, args.vendor_dir), out=args.out,
    )
    reference = f"{record.repository}@{record.manifest_digest}"
    if not args.no_push:
        client = push_client(profile)
        # What `nox -s verify -- <reference>` takes: the pushed image, by digest.
        reference = push_layout(client, profile.repository, Path(record.layout),
                                ref_name=record.tag, tag=record.tag,
                                mount_from=same_registry_repos(client, source)).reference
    write_record(record, args.out / "build.json")
    print(reference)
    return 0
