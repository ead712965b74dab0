"""The base stage as the orchestration runs it: make sure a registry holds the local base.

image/base.py builds the base (mmdebstrap + slim runtime) into an OCI layout and pins it
in locks/base.json; it never talks to a registry. `ensure` is handed the registry client
the profile resolved to, and pushes the layout there (building it first when the
inputs changed).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from pipeline.config import load
from pipeline.errors import DigestMismatch, NoSpace, ReleaseError, ToolError
from pipeline.image import rootfscache
from pipeline.image.base import (
    BASE_LOCK,
    REPOSITORY,
    STATE_DIR,
    TAG,
    BaseRecord,
    BaseSpec,
    BuiltBase,
    build,
    builder_sha256,
    changed_debs,
    load_record,
    mmdebstrap_version,
    snapshot_url,
    write_record,
)
from pipeline.image.oci import layer as oci_layer
from pipeline.image.oci.layout import Layout, LayoutError
from pipeline.registry.client import RegistryClient
from pipeline.registry.push import PushResult, push_layout
from pipeline.sources import lock as runtime_lock

# What mmdebstrap's rootfs takes where it is cached: the .debs it fetches, the unpacked
# tree (~90 MB), apt's lists, and the base layout's layers beside it, with room to spare.
ROOTFS_NEED = 600_000_000


def _free(path: Path) -> int:
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free


def check_rootfs_space(tree_dir: Path, need: int = ROOTFS_NEED) -> None:
    """NoSpace before mmdebstrap starts when the cache's file system has less than `need` free."""
    if _free(tree_dir) < need:
        raise NoSpace.at(
            tree_dir,
            need=need,
            what="mmdebstrap's rootfs of the base",
            fix="free space there, or point the cache elsewhere (a symlink for .release/base/rootfs), then run again",
        )


def _layout_has(layout_dir: Path, digest: str) -> bool:
    try:
        return Layout.open(layout_dir).verify_image(f"{REPOSITORY}:{TAG}").descriptor.digest == digest
    except (LayoutError, ReleaseError, FileNotFoundError):
        return False


@dataclass(frozen=True)
class BaseInputs:
    """What the base stage reads and where it keeps its files: the base's spec, the runtime
    lock, the pin (locks/base.json), the interpreter (default: release.toml's), the layout and
    the caches; `force` builds even when the pin is current, `use_cache` reuses the rootfs."""

    spec: BaseSpec = BaseSpec()
    lock_path: Path = runtime_lock.LOCK
    record_path: Path = BASE_LOCK
    python: str | None = None
    state_dir: Path = STATE_DIR
    wheel_cache: Path = runtime_lock.WHEEL_CACHE
    rootfs_cache: Path | None = None
    force: bool = False
    use_cache: bool = True


@dataclass(frozen=True)
class Ensured:
    """The base stage's result: the base the registry holds, and what was done to get it there
    ("up to date", "re-pushed", "rebuilt to the pinned digest" or "built")."""

    record: BaseRecord
    what: str


def ensure(client: RegistryClient, inputs: BaseInputs = BaseInputs()) -> Ensured:
    """Make sure the registry holds the base the inputs describe; return it and what was done.

    Up to date (the record's digest is in this registry) -> nothing; record current
    but the registry lost it -> re-push from the layout; otherwise build and push.
    """
    spec, record_path, state_dir = inputs.spec, inputs.record_path, Path(inputs.state_dir)
    python = inputs.python or load().python
    lock = runtime_lock.load_lock(inputs.lock_path)
    # The record names the repository only: the local registry's loopback address
    # differs between machines and runs, the digest does not.
    name = REPOSITORY
    pinned = load_record(record_path)
    # The pin, when it describes these inputs (and no rebuild is forced).
    current = (
        pinned if pinned is not None and pinned.built_from(spec, lock.sha256, python) and not inputs.force else None
    )
    if (
        current is not None
        and current.name == name
        and client.head_manifest(REPOSITORY, current.digest) == current.digest
        and all(client.has_blob(REPOSITORY, layer.digest) for layer in current.layers)
    ):
        return Ensured(current, "up to date")
    layout_dir = state_dir / "oci"
    if current is not None and _layout_has(layout_dir, current.digest):
        push_layout(client, REPOSITORY, layout_dir, ref_name=f"{REPOSITORY}:{TAG}", tag=TAG)
        record = replace(current, name=name)
        write_record(record, record_path)
        return Ensured(record, "re-pushed")
    # The cached rootfs is checked against its recorded content digest before it is reused.
    tree_dir = Path(inputs.rootfs_cache or state_dir / "rootfs")
    key = spec.cache_key(mmdebstrap_version())
    tree = rootfscache.check(tree_dir, key) if inputs.use_cache else rootfscache.ABSENT

    def build_and_push() -> tuple[BuiltBase, PushResult]:
        if tree != rootfscache.VERIFIED:  # mmdebstrap runs
            check_rootfs_space(tree_dir)
        try:
            built = build(
                spec,
                lock,
                python=python,
                state_dir=state_dir,
                wheel_cache=inputs.wheel_cache,
                rootfs_cache=inputs.rootfs_cache,
                use_cache=inputs.use_cache,
            )
        except ToolError as exc:
            # mmdebstrap's own words rarely say it: "mmdebstrap failed to run".
            text = f"{exc.one_line()} {exc.hint or ''}"
            if "No space left" in text or _free(tree_dir) < ROOTFS_NEED // 10:
                raise NoSpace.at(tree_dir, need=ROOTFS_NEED, what=f"building the base ({exc.what})") from None
            raise
        return built, push_layout(client, REPOSITORY, built.layout, ref_name=built.ref_name, tag=TAG)

    built, result = build_and_push()
    if current is not None and result.manifest_digest != current.digest and tree == rootfscache.UNVERIFIED:
        # A tree cached before digests were recorded, which gave another base: made again.
        rootfscache.discard(
            tree_dir,
            key,
            f"gave the base {result.manifest_digest}, not the pinned "
            f"{current.digest}, and has no recorded content digest",
        )
        built, result = build_and_push()
    if inputs.use_cache and (current is None or result.manifest_digest == current.digest):
        rootfscache.record(tree_dir, key)
    if current is not None and result.manifest_digest == current.digest:
        # Rebuilt to the pinned digest (a new machine, a cleared cache): the same bytes, so
        # the committed lock stays as it is, whichever mirror served the .debs this time;
        # rewriting it would leave the checkout dirty and the release would refuse it.
        record = current
        if record.name != name:
            record = replace(record, name=name)
            write_record(record, record_path)
        return Ensured(record, "rebuilt to the pinned digest")
    if current is not None:
        # The lock describes these inputs, yet the bytes differ: never re-pinned silently
        # (the release would then refuse the checkout it dirtied itself).
        debs = changed_debs(current.debs, built.debs)
        cause = (
            f"the mirror {spec.mirror} served other .debs ({len(debs)}: {', '.join(debs[:3])})"
            if debs
            else "the same .debs gave other bytes: a corrupt rootfs cache (.release/base/rootfs) or a changed build"
        )
        raise DigestMismatch(
            f"the base rebuilt from {record_path} is not the base it pins ({cause})",
            expected=current.digest,
            actual=result.manifest_digest,
            hint="use a mirror that serves the pinned .debs (RELEASE_DEBIAN_MIRROR), or remove the rootfs "
            "cache and run again; to pin the new base on purpose: `nox -s base -- --force`, then "
            "commit locks/base.json",
        )
    record = BaseRecord(
        name=name,
        digest=result.manifest_digest,
        media_type=built.media_type,
        config_digest=built.config_digest,
        layers=built.layers,
        runtime_lock_sha256=lock.sha256,
        python=python,
        python_version=built.python_version,
        debian_suite=spec.suite,
        debian_snapshot=spec.snapshot,
        debian_snapshot_url=snapshot_url(spec.snapshot),
        packages=spec.packages,
        debs=built.debs,
        source_date_epoch=spec.source_date_epoch,
        mmdebstrap_version=mmdebstrap_version(),
        zlib_version=oci_layer.zlib_version(),
        builder_sha256=builder_sha256(),
        debian_mirror=spec.mirror,
    )
    write_record(record, record_path)
    return Ensured(record, "built")
