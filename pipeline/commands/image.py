"""`base` and `build`: the local base image and the derived image."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from pipeline import basestage, plan
from pipeline import config as config_mod
from pipeline import inputs as image_inputs
from pipeline.image import base as base_mod
from pipeline.image import build as build_mod
from pipeline.image import rootfscache
from pipeline.records import provenance
from pipeline.registry import local as localregistry
from pipeline.registry.basesource import BaseSource
from pipeline.registry.client import Credentials, RegistryClient
from pipeline.registry.push import push_layout
from pipeline.sources import lock as runtime_lock


def base_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Build, push and pin the local base image."
    p.add_argument("--force", action="store_true", help="rebuild even if the base is current")
    p.add_argument("--no-cache", action="store_true", help="run mmdebstrap even if cached")
    p.add_argument("--mirror", default=os.environ.get("RELEASE_DEBIAN_MIRROR", base_mod.MIRROR))
    p.add_argument("--source-date-epoch", type=int, default=base_mod.SOURCE_DATE_EPOCH)
    p.add_argument("--registry", default=None, help="push to this registry (host:port) instead of the local one")
    p.add_argument(
        "--oci-layout",
        type=Path,
        default=None,
        help="only build the base into this directory's oci/ (no registry, "
        "locks/base.json untouched) and print its digest",
    )
    p.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="rootfs and wheel caches (default: .release/base/rootfs, .release/wheels)",
    )


def base(args: argparse.Namespace) -> int:
    spec = base_mod.BaseSpec(mirror=args.mirror, source_date_epoch=args.source_date_epoch)
    if args.oci_layout:
        rootfs_cache = args.cache_dir / "rootfs" if args.cache_dir else Path(args.oci_layout) / "rootfs"
        key = spec.cache_key(base_mod.mmdebstrap_version())
        if not args.no_cache:  # as basestage.ensure does: a cached tree is checked before it is reused
            rootfscache.check(rootfs_cache, key)
        built = base_mod.build(
            spec,
            runtime_lock.load_lock(),
            python=config_mod.load().python,
            state_dir=args.oci_layout,
            use_cache=not args.no_cache,
            rootfs_cache=rootfs_cache,
            wheel_cache=args.cache_dir / "wheels" if args.cache_dir else runtime_lock.WHEEL_CACHE,
        )
        pinned = base_mod.load_record()
        if not args.no_cache and pinned is not None and built.manifest_digest == pinned.digest:
            rootfscache.record(rootfs_cache, key)
        print(f"{base_mod.REPOSITORY}@{built.manifest_digest}")
        return 0
    if args.registry:
        client = RegistryClient(args.registry, credentials=Credentials.from_env(args.registry))
    else:
        client = localregistry.endpoint().client()
    ensured = basestage.ensure(client, basestage.BaseInputs(spec=spec, force=args.force, use_cache=not args.no_cache))
    record, what = ensured.record, ensured.what
    if what == "up to date":
        print(f"base is up to date: {record.reference}")
    else:
        print(f"base {what}: {record.reference}")
        for layer in record.layers:
            print(f"  {layer.role:<15} {layer.digest}  {layer.size / 1e6:6.1f} MB")
        print(f"  compressed total {record.compressed_size / 1e6:.1f} MB -> {base_mod.BASE_LOCK.name}")
    return 0


def build_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Build the derived image from the base digest and push it."
    p.add_argument("--profile", default="local")
    p.add_argument("--config", type=Path, default=config_mod.DEFAULT_CONFIG)
    p.add_argument("--repo", type=Path, default=Path.cwd(), help="the project checkout to build")
    p.add_argument("--base", default=None, help="override the base: registry/name@sha256:... (read from that registry)")
    p.add_argument(
        "--base-layout",
        type=Path,
        default=None,
        help="read the profile's base (by its pinned digest) from this OCI layout instead of a registry",
    )
    p.add_argument("--out", type=Path, default=Path("dist"))
    p.add_argument("--vendor-dir", type=Path, default=Path("vendor"))
    p.add_argument("--no-push", action="store_true", help="build the layout only")
    p.add_argument(
        "--allow-dirty", action="store_true", help="build from a checkout with uncommitted changes (recorded)"
    )


def build(args: argparse.Namespace) -> int:
    """Build the derived image, push it, write dist/build.json."""
    cfg = config_mod.load(args.config)
    rp = plan.resolve(cfg, args.profile, trust=False)  # signs nothing
    target = rp.target
    repo = args.repo.resolve()
    provenance.project_revision(repo, allow_dirty=args.allow_dirty)
    inputs = image_inputs.image_inputs(repo, rp.profile)
    sde = provenance.source_date_epoch(inputs)
    source = BaseSource.from_registry(args.base) if args.base else rp.base.source(layout=args.base_layout)
    record = build_mod.build(
        cfg,
        repo=repo,
        base=source,
        repository=target.image_name,
        tag=target.tag,
        source_revision=inputs.commit,
        source_date_epoch=sde,
        vendored=rp.task_file(args.vendor_dir),
        out=args.out,
    )
    reference = f"{record.repository}@{record.manifest_digest}"
    if not args.no_push:
        client = target.client()
        # What `nox -s verify -- <reference>` takes: the pushed image, by digest.
        reference = push_layout(
            client,
            target.repository,
            Path(record.layout),
            ref_name=record.tag,
            tag=record.tag,
            mount_from=plan.same_registry_repos(client, source),
        ).reference
    build_mod.write_record(record, args.out / "build.json")
    print(reference)
    return 0
