"""Daemonless derived-image build: base@digest + application layers + config.

The image is a pure function of the base's manifest and config (fetched by digest),
the application layers (`pipeline.payload`) and SOURCE_DATE_EPOCH. Output: a complete
OCI image layout under `dist/oci/` (base blobs included, so later stages never need
the registry) and the build record `dist/build.json`.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from pathlib import Path

from . import config as _config
from . import localregistry, provenance
from ._io import read_json, write_json_atomic
from .errors import ConfigError
from .layerdiff import AppLayer, members_of_blob
from .oci.image import (BaseImage, ConfigChanges, Index, NewLayer, UnsupportedPlatform, derive,
                        parse, parse_config, rfc3339)
from .oci.layer import write_layer, zlib_version
from .oci.layout import Layout
from . import base as _base
from .oci.registry import Credentials, Reference, RegistryClient
from .payload import VendoredTaskFile, app_layers, tasks_file_in_image
from .progress import Progress, say
from .publish import push_layout
from .sources import check_vendored

RECORD_VERSION = 1
# Base layer blobs, content-addressed and shared by every build of this checkout.
BLOB_CACHE = _config.REPO_ROOT / ".release" / "cache" / "blobs"


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
        )


def write_record(record: BuildRecord, path: Path) -> None:
    write_json_atomic(path, record.to_json())


def load_record(path: Path) -> BuildRecord:
    try:
        return BuildRecord.from_json(read_json(path))
    except FileNotFoundError:
        raise ConfigError(f"no build record at {path}", hint="run `nox -s build` first") from None


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
    base_ref: str,
    repository: str,
    tag: str,
    source_revision: str,
    source_date_epoch: int,
    vendored: VendoredTaskFile | None = None,
    out: Path,
) -> BuildRecord:
    """Build the derived image into `out/oci` and return its record (not yet written)."""
    ref = Reference.parse(base_ref)
    layout = Layout.init(Path(out) / "oci")
    # The base is read anonymously, as anyone rebuilding the image would read it.
    base = fetch_base(RegistryClient(ref.registry), ref, layout)
    blobs_dir = layout.root / "blobs" / "sha256"
    built_layers: list[AppLayer] = []
    for spec in app_layers(repo, cfg.app_dir, vendored):
        layer = write_layer(spec.entries, blobs_dir, source_date_epoch=source_date_epoch)
        built_layers.append(AppLayer(spec.name, layer.digest, layer.diff_id, layer.size,
                                     tuple(members_of_blob(layer.path))))
    env = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
    tasks_file = tasks_file_in_image(cfg.app_dir, vendored)
    if tasks_file:
        env["ARENA_TASKS_FILE"] = tasks_file
    changes = ConfigChanges(
        cmd=(cfg.python, "-m", "uvicorn", "env.server.app:app",
             "--host", "0.0.0.0", "--port", str(cfg.port)),
        entrypoint=(),
        env=env,
        working_dir=cfg.app_dir,
        exposed_ports=(f"{cfg.port}/tcp",),
        user="0",
        labels={
            "org.opencontainers.image.source": cfg.source_url,
            "org.opencontainers.image.revision": source_revision,
            "org.opencontainers.image.created": rfc3339(source_date_epoch),
            "org.opencontainers.image.base.digest": ref.digest or "",
            "org.opencontainers.image.base.name": ref.name,
            "org.opencontainers.image.title": cfg.name,
        },
    )
    image = derive(base, [NewLayer(l.digest, l.diff_id, l.size, f"pipeline.build: {l.name} layer")
                          for l in built_layers],
                   changes, source_date_epoch=source_date_epoch)
    layout.put_bytes(image.config_bytes)
    layout.add_manifest(image.manifest_bytes, image.media_type, ref_name=tag)
    record = BuildRecord(
        repository=repository, tag=tag, manifest_digest=image.manifest_digest,
        media_type=image.media_type, config_digest=image.config_digest,
        base=f"{ref.name}@{ref.digest}",
        base_layers=tuple((l.digest, l.size) for l in base.manifest.layers),
        app_layers=tuple(built_layers), source_revision=source_revision,
        source_date_epoch=source_date_epoch, zlib=zlib_version(), layout=str(layout.root),
    )
    say(f"built {repository}@{image.manifest_digest}")
    say(f"  base {record.base}; {len(built_layers)} app layers, {record.app_size:,} bytes "
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


def same_registry_repos(client: RegistryClient, base_ref: str) -> tuple[str, ...]:
    """The base's repository when it lives in the push registry: its blobs are mounted,
    not uploaded again."""
    ref = Reference.parse(base_ref)
    return (ref.repository,) if ref.registry == client.registry else ()


def base_reference(profile: _config.Profile) -> str:
    """The base to build on: the profile's pinned digest, or the local base lock's."""
    if profile.base != "local":
        return profile.base
    record = _base.load_record()
    if record is None:
        raise ConfigError(f"the local base is not built yet (no {_base.BASE_LOCK.name})",
                          hint="run `nox -s base` first")
    return record.pull_reference(localregistry.endpoint().address)


def main(argv: list[str]) -> int:
    """`python -m pipeline build`: build the derived image, push it, write dist/build.json."""
    ap = argparse.ArgumentParser(prog="python -m pipeline build",
                                 description="Build the derived image from the base digest and push it.")
    ap.add_argument("--profile", default="local")
    ap.add_argument("--config", type=Path, default=_config.DEFAULT_CONFIG)
    ap.add_argument("--repo", type=Path, default=Path.cwd(), help="the project checkout to build")
    ap.add_argument("--base", default=None, help="override the base (name@sha256:...)")
    ap.add_argument("--out", type=Path, default=Path("dist"))
    ap.add_argument("--vendor-dir", type=Path, default=Path("vendor"))
    ap.add_argument("--no-push", action="store_true", help="build the layout only")
    ap.add_argument("--allow-dirty", action="store_true",
                    help="build from a checkout with uncommitted changes (recorded)")
    args = ap.parse_args(argv)
    cfg = _config.load(args.config)
    profile = cfg.profile(args.profile)
    repo = args.repo.resolve()
    revision = provenance.project_revision(repo, allow_dirty=args.allow_dirty)
    sde = provenance.source_date_epoch(repo)
    client = push_client(profile)
    record = build(
        cfg, repo=repo, base_ref=args.base or base_reference(profile),
        repository=profile.image_name, tag=profile.tag,
        source_revision=revision.commit, source_date_epoch=sde,
        vendored=vendored_task_file(cfg, profile, args.vendor_dir), out=args.out,
    )
    reference = f"{record.repository}@{record.manifest_digest}"
    if not args.no_push:
        # What `nox -s verify -- <reference>` takes: the pushed image, by digest.
        reference = push_layout(client, profile.repository, Path(record.layout),
                                ref_name=record.tag, tag=record.tag,
                                mount_from=same_registry_repos(client, record.base)).reference
    write_record(record, args.out / "build.json")
    print(reference)
    return 0
