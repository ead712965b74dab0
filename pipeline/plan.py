"""A release profile resolved once into the objects the stages take.

A profile in release.toml names things: a registry ("local" or a host), a base
("local" or a pinned reference), a vendored task source, a signing method, whether
external tasks must verify. `resolve` turns the name into a `ReleasePlan` at the start
of a command (release, reproduce, audit, the CLI commands); the stages receive its
values (a push `Target` and its registry client, a `BaseSource` to read, the sources
to vendor, a `VendoredTaskFile`, a signer, an `ExternalPolicy`) and never look a
profile up by name, find a registry or pick a base themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from pipeline import config as _config
from pipeline.config import ExternalPolicy, RequestIdentity, Source
from pipeline.errors import ConfigError
from pipeline.image import base as _base
from pipeline.image.payload import VendoredTaskFile
from pipeline.imageref import ImageRef
from pipeline.records.hub import HubTarget
from pipeline.registry import local as localregistry
from pipeline.registry.basesource import BaseSource
from pipeline.registry.client import Credentials, RegistryClient
from pipeline.sources.vendor import check_vendored

if TYPE_CHECKING:  # the signing libraries load only for the commands that sign or check signers
    from pipeline.records import trust
    from pipeline.records.signing import KeySigner, SigstoreSigner


@dataclass(frozen=True)
class Target:
    """Where the built image is pushed, and the name the records give it."""

    registry: str  # host[:port]; "local" = the loopback registry (its address is read when a client is made)
    repository: str
    tag: str
    image_name: str
    local: bool

    def client(self) -> RegistryClient:
        """A client with push credentials (the local registry's own, else from the
        environment)."""
        if self.local:
            return localregistry.endpoint().client()
        return RegistryClient(self.registry, credentials=Credentials.from_env(self.registry))


@dataclass(frozen=True)
class BaseChoice:
    """The base a profile builds on: an image pinned by digest in release.toml, or (when
    `pinned` is None) the locally built base that locks/base.json pins."""

    pinned: str | None

    @property
    def local(self) -> bool:
        return self.pinned is None

    def pin(self) -> tuple[str, str]:
        """The recorded name and digest of the base (release.toml's pin or locks/base.json)."""
        if self.pinned is not None:
            ref = ImageRef.parse(self.pinned, registry=True)
            return ref.name, ref.digest or ""
        record = _base.load_record()
        if record is None:
            raise ConfigError(
                f"the local base is not built yet (no {_base.BASE_LOCK.name})", hint="run `nox -s base` first"
            )
        return record.name, record.digest

    def source(self, *, registry: str | None = None, layout: Path | None = None) -> BaseSource:
        """Where to read the base: the pinned digest from its own registry, or the local
        base's from `registry` (default: the local registry); with `layout`, the pinned
        digest read from that OCI layout instead."""
        if layout is not None:
            return BaseSource.from_layout(layout, *self.pin())
        if self.pinned is not None:
            return BaseSource.from_registry(self.pinned, name=ImageRef.parse(self.pinned, registry=True).name)
        name, digest = self.pin()
        return BaseSource(
            name=name, digest=digest, repository=name, registry=registry or localregistry.endpoint().address
        )


@dataclass(frozen=True)
class ReleasePlan:
    """One profile, resolved: every value a stage needs, and nothing to look up later."""

    profile: str  # the name the records carry
    parameters: Mapping[str, Any]  # the profile's release.toml table, as the SLSA externalParameters
    target: Target
    base: BaseChoice
    sources: tuple[Source, ...]  # the upstream files this profile vendors, in release.toml order
    task_source: Source | None  # the one whose file the image serves (None: first-party tasks)
    signing: str  # "key" or "sigstore"
    external: ExternalPolicy
    dataset: HubTarget  # the dataset the request names, and whether this profile publishes it
    request: RequestIdentity  # the request's submission_id and dataset
    # trust.toml's [trust.<profile>] (beside its release.toml), validated with the whole file by
    # `resolve`; None when the command trusts no key (reproduce).
    pins: _config.TrustPins | None
    config: _config.ReleaseConfig = field(repr=False, compare=False)

    def signer(self, *, key_path: Path | None = None) -> KeySigner | SigstoreSigner:
        """The signer (loads the release key, or prepares keyless signing)."""
        from pipeline.records import signing

        return signing.signer_for(self.signing, key_path=key_path)

    def trust(self) -> trust.TrustRoot:
        """trust.toml's pins for this profile, as `resolve` validated them."""
        from pipeline.records import trust

        pins = self.pins
        if pins is None:
            pins = _config.load_trust(self.config.trust_path).pins(self.profile)
        return trust.root(pins, f"[trust.{self.profile}] of {self.config.trust_path.name}")

    def task_file(self, vendor_dir: Path) -> VendoredTaskFile | None:
        """The served task module, verified in `vendor_dir` (no network)."""
        if self.task_source is None:
            return None
        record = check_vendored(self.task_source, vendor_dir)
        return VendoredTaskFile(
            source=self.task_source.name,
            file=vendor_dir / record.vendor_path,
            license_file=vendor_dir / record.license_path,
        )

    def unpinned_warning(self, signer: KeySigner | SigstoreSigner) -> str | None:
        """A loud warning when `signer` is not the one trust.toml pins for this profile."""
        from pipeline.records import signing, trust

        if isinstance(signer, signing.KeySigner):
            return trust.unpinned_warning(self.trust(), signer.keyid)
        return trust.unpinned_identity_warning(self.trust(), signer.policy())


def resolve(
    cfg: _config.ReleaseConfig, name: str, *, signing_kind: str | None = None, trust: bool = True
) -> ReleasePlan:
    """The plan of profile `name` (ConfigError names the known profiles); `signing_kind`
    overrides the profile's signing method. With `trust` (the commands that check a signer
    against the pins: release, attest, the audit), trust.toml beside release.toml is validated
    whole here, before any stage runs: a missing file or a malformed table stops the command at
    once, naming the file and the key, instead of reading as "nothing pinned". The commands
    that read no pin (vendor, build, sbom, verify, checks, submission, reproduce) pass
    trust=False."""
    profile = cfg.profile(name)
    kind = signing_kind or profile.signing
    if kind not in ("key", "sigstore"):
        raise ConfigError(
            "unknown signing method",
            expected="key or sigstore",
            actual=kind,
            hint="pass --signing key or --signing sigstore",
        )
    pins = _config.load_trust(cfg.trust_path).pins(profile.name) if trust else None
    # The profile's table as the file wrote it (no defaults filled in): the SLSA externalParameters.
    table = profile.model_dump(by_alias=True, exclude_unset=True)
    return ReleasePlan(
        profile=profile.name,
        parameters=MappingProxyType(dict(sorted(table.items()))),
        target=Target(
            registry=profile.registry,
            repository=profile.repository,
            tag=profile.tag,
            image_name=profile.image_name,
            local=profile.local,
        ),
        base=BaseChoice(None if profile.base == "local" else profile.base),
        sources=cfg.sources_for(profile),
        task_source=cfg.source(profile.vendored_source) if profile.vendored_source else None,
        signing=kind,
        external=ExternalPolicy(required=profile.external_tasks_required, profile=profile.name),
        dataset=HubTarget.of(
            profile.dataset, cfg.dataset.hub_url, publish=profile.publish_dataset, profile=profile.name
        ),
        request=RequestIdentity(submission_id=profile.submission_id, dataset=profile.dataset),
        pins=pins,
        config=cfg,
    )


def same_registry_repos(client: RegistryClient, base: BaseSource) -> tuple[str, ...]:
    """The base's repository when it lives in the push registry: its blobs are mounted,
    not uploaded again."""
    return (base.repository,) if base.repository and base.registry == client.registry else ()
