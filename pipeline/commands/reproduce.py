"""`reproduce`: rebuild the recorded commit and compare every digest."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from pipeline import config as config_mod
from pipeline import reproduce as reproduce_mod
from pipeline.errors import VerificationError
from pipeline.image import base as base_mod


def reproduce_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Rebuild the recorded commit and compare every digest."
    p.add_argument(
        "--repo",
        type=Path,
        default=config_mod.REPO_ROOT,
        help="the git clone holding the recorded commit (default: this one)",
    )
    p.add_argument("--records", type=Path, default=None, help="directory holding provenance.json (default: the clone)")
    p.add_argument("--layers-only", action="store_true", help="compare the application layers only (a PARTIAL result)")
    p.add_argument(
        "--base-registry", default=None, help="read the base (and recorded blobs) from this registry (host:port)"
    )
    p.add_argument(
        "--mirror",
        default=os.environ.get("RELEASE_DEBIAN_MIRROR", base_mod.MIRROR),
        help="Debian mirror to fetch the lock's .debs from (the image does not name it)",
    )
    p.add_argument("--vendor-dir", type=Path, default=None, help="verified vendored sources (default: <repo>/vendor)")
    p.add_argument(
        "--keep",
        type=Path,
        default=None,
        metavar="DIR",
        help="the OCI layout the reproduced image is added to (default: dist/oci beside the "
        "records, where `audit` checks the SBOM against its layers)",
    )


def reproduce(args: argparse.Namespace) -> int:
    repo = args.repo.resolve()
    records = (args.records or repo).resolve()
    result = reproduce_mod.reproduce(
        repo,
        records,
        layers_only=args.layers_only,
        registry=args.base_registry,
        mirror=args.mirror,
        vendor_dir=args.vendor_dir,
        keep=(args.keep or records / "dist" / "oci").resolve(),
    )
    print(reproduce_mod.render(result))
    if not result.ok:
        bad = [l.name for l in result.layers if not l.same]
        raise VerificationError(
            "the rebuild does not reproduce the recorded digests",
            expected=f"image {result.image_recorded}",
            actual=(f"image {result.image_rebuilt or 'not rebuilt'}; differing layers: {', '.join(bad) or 'none'}"),
            hint="the lines above name each differing file, config field or .deb",
        )
    if result.partial:
        print(
            "PARTIAL: the application layers are identical, but --layers-only compared neither "
            "the base nor the image digest; run without it for the whole image"
        )
        return 0
    print(f"reproduced: image {result.image_recorded} is bit-identical")
    return 0
