"""`release`, `reproduce` and `audit`: the orchestration commands."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from pipeline import audit as audit_mod, config as config_mod, plan
from pipeline import release as release_mod, reproduce as reproduce_mod
from pipeline.errors import ReleaseError, VerificationError
from pipeline.image import base as base_mod
from pipeline.progress import say
from pipeline.records import trust, vsa


def release_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "The whole release, from sources to signed records."
    p.add_argument("--profile", default="local", help="release.toml profile (default: local)")
    p.add_argument("--config", type=Path, default=config_mod.DEFAULT_CONFIG)
    p.add_argument("--repo", type=Path, default=config_mod.REPO_ROOT, help="the project checkout")
    p.add_argument("--allow-dirty", action="store_true",
                   help="release from a checkout with uncommitted changes (recorded)")
    p.add_argument("--mirror", type=Path, default=None,
                   help="local mirror directory for git sources and external records")
    p.add_argument("--parallel", type=int, default=2, help="containers for the check suite")
    p.add_argument("--signing", choices=("key", "sigstore"), default=None,
                   help="override the profile's signer")


def release(args: argparse.Namespace) -> int:
    cfg = config_mod.load(args.config)
    rp = plan.resolve(cfg, args.profile, signing_kind=args.signing)
    try:
        outcome = release_mod.release(
            cfg, rp, repo=args.repo, allow_dirty=args.allow_dirty, mirror=args.mirror,
            parallel=args.parallel,
            command=("python", "-m", "pipeline", "release", *args.argv))
    except ReleaseError:
        say(f"release stopped; the previous records are untouched ({', '.join(release_mod.RECORDS)})")
        raise
    print(f"released {outcome.image}")
    for path in outcome.records:
        print(f"  wrote {path.relative_to(args.repo.resolve())}")
    print(f"  dataset {outcome.dataset.relative_to(args.repo.resolve())}/")
    print(f"  report {outcome.report}")
    return 0


def reproduce_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Rebuild the recorded commit and compare every digest."
    p.add_argument("--repo", type=Path, default=config_mod.REPO_ROOT,
                   help="the git clone holding the recorded commit (default: this one)")
    p.add_argument("--records", type=Path, default=None,
                   help="directory holding provenance.json (default: the clone)")
    p.add_argument("--layers-only", action="store_true",
                   help="compare the application layers only (a PARTIAL result)")
    p.add_argument("--base-registry", default=None,
                   help="read the base (and recorded blobs) from this registry (host:port)")
    p.add_argument("--mirror", default=os.environ.get("RELEASE_DEBIAN_MIRROR", base_mod.MIRROR),
                   help="Debian mirror serving the lock's snapshot (not an image input)")
    p.add_argument("--vendor-dir", type=Path, default=None,
                   help="verified vendored sources (default: <repo>/vendor)")
    p.add_argument("--keep", type=Path, default=None, metavar="DIR",
                   help="the OCI layout the reproduced image is added to (default: dist/oci beside the "
                        "records, where `audit` checks the SBOM against its layers)")


def reproduce(args: argparse.Namespace) -> int:
    repo = args.repo.resolve()
    records = (args.records or repo).resolve()
    result = reproduce_mod.reproduce(
        repo, records, layers_only=args.layers_only,
        registry=args.base_registry, mirror=args.mirror, vendor_dir=args.vendor_dir,
        keep=(args.keep or records / "dist" / "oci").resolve())
    print(reproduce_mod.render(result))
    if not result.ok:
        bad = [l.name for l in result.layers if not l.same]
        raise VerificationError(
            "the rebuild does not reproduce the recorded digests",
            expected=f"image {result.image_recorded}",
            actual=(f"image {result.image_rebuilt or 'not rebuilt'}; differing layers: "
                    f"{', '.join(bad) or 'none'}"),
            hint="the lines above name each differing file, config field or .deb")
    if result.partial:
        print("PARTIAL: the application layers are identical, but --layers-only compared neither "
              "the base nor the image digest; run without it for the whole image")
        return 0
    print(f"reproduced: image {result.image_recorded} is bit-identical")
    return 0


def audit_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "verify a release's records offline against a trust root"
    p.add_argument("--records", type=Path, default=config_mod.REPO_ROOT,
                   help="directory holding release.toml, provenance.json, submission.json, locks/, "
                        "vendor/, attestations/ (default: this checkout)")
    p.add_argument("--key", type=Path, help="trust this public key (PEM) instead of release.toml's pinned keyids")
    p.add_argument("--identity", help="trust this sigstore certificate identity (exact, or a prefix ending in *)")
    p.add_argument("--issuer", help="the OIDC issuer that goes with --identity")
    p.add_argument("--registry", action="store_true",
                   help="also fetch the pushed manifest, the .att/.sbom tags and the layer blobs anonymously")
    p.add_argument("--skip", action="append", default=[], metavar="ID",
                   help="do not run this check (reported as skipped; the VSA says it was not verified)")
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of the table")
    p.add_argument("--verbose", "-v", action="store_true", help="one table row per check instead of per area")
    p.add_argument("--vsa", type=Path, help="where to write the verification summary (default: "
                                            "<records>/dist/vsa.dsse.json with --vsa-key, else dist/vsa.json)")
    p.add_argument("--vsa-key", type=Path, help="sign the verification summary with this private key (PEM)")


def audit(args: argparse.Namespace) -> int:
    auditor = trust.from_auditor(key_file=args.key, identity=args.identity, issuer=args.issuer)
    rows = audit_mod.audit(args.records, trust_root=auditor, registry=args.registry,
                           skip=frozenset(args.skip))
    image = audit_mod.image_ref(args.records)
    out = args.vsa or Path(args.records) / "dist" / ("vsa.dsse.json" if args.vsa_key else "vsa.json")
    written = vsa.write(out, rows, records=Path(args.records), image=image, key_path=args.vsa_key)
    verdict = audit_mod.verdict(rows)
    if args.json:
        print(json.dumps({"result": verdict, "image": image, "vsa": str(written),
                          "checks": [c.to_json() for c in rows]}, indent=2, sort_keys=True))
    else:
        print(audit_mod.render_table(rows, image=image, verbose=args.verbose))
        print(f"verification summary: {written}")
    if verdict != "PASSED":
        # The first failure is the cause of those after it (which say "not checked: ...").
        first = next(c for c in rows if not c.ok)
        print(f"audit: FAILED ({sum(not c.ok for c in rows)} check(s)); first {first.id}: {first.detail}",
              file=sys.stderr)
        return 1
    return 0
