"""A release profile resolved into the objects the stages take.

A profile in release.toml names things: a registry ("local" or a host), a base
("local" or a pinned reference), a vendored task source, whether external tasks must
verify. The orchestration (release, reproduce, the CLI commands) turns those names into
values here, once; the stages receive the values (a push `Target` and its registry
client, a `BaseSource` to read, a `VendoredTaskFile`) and never find a registry or a
base themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline import config as _config
from pipeline.errors import ConfigError
from pipeline.image import base as _base
from pipeline.registry.basesource import BaseSource
from pipeline.image.payload import VendoredTaskFile
from pipeline.registry import local as localregistry
from pipeline.registry.client import Credentials, Reference, RegistryClient
from pipeline.sources.vendor import check_vendored


@dataclass(frozen=True)
class Target:
    """Where the built image is pushed, and the name the records give it."""

    registry: str  # host[:port]; for the local profile the loopback registry's address
    repository: str
    tag: str
    image_name: str
    local: bool

    def client(self) -> RegistryClient:
        """A client with push credentials (the local registry's own, else from the
        environment)."""
        if self.local:
            ep = localregistry.endpoint()
            return RegistryClient(ep.address, credentials=Credentials(ep.user, ep.password))
        return RegistryClient(self.registry, credentials=Credentials.from_env(self.registry))


def target(profile: _config.Profile) -> Target:
    """The profile's push target. The local registry's address is read when the client is
    made (it changes between runs), not here."""
    return Target(registry=profile.registry, repository=profile.repository, tag=profile.tag,
                  image_name=profile.image_name, local=profile.local)


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


def base_source(profile: _config.Profile, *, registry: str | None = None,
                layout: Path | None = None) -> BaseSource:
    """The base to build on: the profile's pinned digest read from its registry, or the
    local base lock's from `registry` (default: the local registry); with `layout`, the
    pinned digest read from that OCI layout instead."""
    if layout is not None:
        return BaseSource.from_layout(layout, *pinned_base(profile))
    if profile.base != "local":
        return BaseSource.from_registry(profile.base, name=Reference.parse(profile.base).name)
    name, digest = pinned_base(profile)
    return BaseSource(name=name, digest=digest, repository=name,
                      registry=registry or localregistry.endpoint().address)


def task_source(cfg: _config.ReleaseConfig, profile: _config.Profile,
                vendor_dir: Path) -> VendoredTaskFile | None:
    """The profile's vendored task module, verified from `vendor_dir` (no network)."""
    name = profile.vendored_source
    if name is None:
        return None
    record = check_vendored(cfg.source(name), vendor_dir)
    return VendoredTaskFile(source=name, file=vendor_dir / record.vendor_path,
                            license_file=vendor_dir / record.license_path)
