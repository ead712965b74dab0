"""`sbom`, `attest` and `key`: the records of a build and the key that signs them."""

from __future__ import annotations

import argparse
import json
import os
from datetime import UTC, datetime
from pathlib import Path

from pipeline import config as config_mod
from pipeline import plan
from pipeline._io import write_atomic
from pipeline.checks import results as results_mod
from pipeline.config import REPO_ROOT
from pipeline.errors import ConfigError, DigestMismatch
from pipeline.image.build import load_record
from pipeline.progress import say
from pipeline.records import attest as attest_mod
from pipeline.records import provenance as provenance_mod
from pipeline.records import sbom as sbom_mod
from pipeline.records import sbom_licenses, signing, trust

BUILD_RECORD = REPO_ROOT / "dist" / "build.json"


def sbom_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "CycloneDX SBOM of the built image"
    p.add_argument(
        "--build-record",
        type=Path,
        default=BUILD_RECORD,
        help="build record naming the image, its layout and ref (default: dist/build.json)",
    )
    p.add_argument("--layout", type=Path, help="OCI image layout (overrides the build record)")
    p.add_argument("--ref", help="ref name of the image in the layout, when it holds several")
    p.add_argument("--name", help="image name (registry/repository)")
    p.add_argument("--profile", default="local")
    p.add_argument("--config", type=Path, default=config_mod.DEFAULT_CONFIG)
    p.add_argument("--lock", type=Path, default=sbom_mod.DEFAULT_LOCK, help="wheel lock giving wheel hashes")
    p.add_argument("--out", type=Path, default=sbom_mod.DEFAULT_OUT)


def sbom(args: argparse.Namespace) -> int:
    cfg = config_mod.load(args.config)
    rp = plan.resolve(cfg, args.profile, trust=False)  # signs nothing
    layout, ref, name, expected = args.layout, args.ref, args.name, None
    if layout is None:
        record = load_record(args.build_record)
        layout, ref, expected = Path(record.layout), ref or record.tag, record.manifest_digest
        name = name or record.repository
    data = sbom_mod.generate(
        layout,
        name=name or rp.target.image_name,
        app_dir=cfg.app_dir,
        ref=ref,
        sources=rp.sources,
        first_party_license=sbom_mod.project_license(),
        lock_text=args.lock.read_text() if args.lock.is_file() else "",
    )
    described = json.loads(data)["metadata"]["component"]["version"]
    if expected is not None and described != expected:
        raise DigestMismatch(
            "the image in the layout is not the one the build record names",
            expected=expected,
            actual=described,
            hint="rebuild (`nox -s build`)",
        )
    write_atomic(args.out, data)
    components = json.loads(data).get("components", [])
    say(f"sbom: {args.out} for {name}@{described}: {sbom_licenses.coverage_line(components)}")
    missing = sbom_licenses.unlicensed_line(components)
    if missing:
        say(f"sbom: {missing}")
    return 0


def attest_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "sign provenance, SBOM and check results about the built image"
    p.add_argument("--config", type=Path, default=config_mod.DEFAULT_CONFIG)
    p.add_argument("--image", help="name@sha256:<hex> of the built image (default: from dist/build.json)")
    p.add_argument("--build-record", type=Path, default=BUILD_RECORD)
    p.add_argument("--provenance", type=Path, default=REPO_ROOT / "provenance.json")
    p.add_argument("--sbom", type=Path, default=attest_mod.DEFAULT_DIR / attest_mod.SBOM_FILE)
    p.add_argument("--checks", type=Path, default=REPO_ROOT / "dist" / "checks.json")
    p.add_argument("--signing", choices=("key", "sigstore"), help="override the profile's signing method")
    p.add_argument("--key", type=Path, help="private key (default: $RELEASE_SIGNING_KEY or .release/keys/)")
    p.add_argument("--out", type=Path, default=attest_mod.DEFAULT_DIR)


def attest(args: argparse.Namespace) -> int:
    started = datetime.now(UTC)
    cfg = config_mod.load(args.config)
    if args.image is None:
        record = load_record(args.build_record)
        args.image = f"{record.repository}@{record.manifest_digest}"
    prov = provenance_mod.load(args.provenance)
    rp = plan.resolve(cfg, prov.profile, signing_kind=args.signing)
    signer = rp.signer(key_path=args.key)
    checks = results_mod.load(args.checks) if args.checks.is_file() else None
    subject = attest_mod.Subject.from_image_ref(args.image)
    files = attest_mod.write_attestations(
        cfg,
        attest_mod.Evidence(
            subject,
            prov,
            lock_text=(REPO_ROOT / provenance_mod.WHEEL_LOCK).read_text(),
            sbom_bytes=args.sbom.read_bytes(),
            checks=checks,
            checks_bytes=args.checks.read_bytes() if checks is not None else None,
        ),
        attest_mod.Invocation(
            rp.parameters, started=started, finished=datetime.now(UTC), invocation_id=os.environ.get("GITHUB_RUN_ID")
        ),
        signer=signer,
        out_dir=args.out,
    )
    attest_mod.write_readme(args.out, subject, signer, files, source_url=cfg.source_url)
    for f in files:
        say(f"attest: {f.path} ({f.predicate_type})")
    return 0


def key_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "show (creating it if missing) the release signing key and its pin; with --public, "
        "print its public key (also written beside it, as .pub.pem)"
    )
    p.add_argument("--key", type=Path, help=f"private key (default: ${signing.KEY_ENV} or {signing.DEFAULT_KEY})")
    p.add_argument("--profile", default="local", help="the profile to pin it for (trust.toml)")
    p.add_argument(
        "--public",
        action="store_true",
        help="print only the public key (PEM), what an auditor's `audit --key` takes; never creates a key",
    )


def _pinned_here(keyid: str, profile: str) -> str:
    """Whether this checkout's trust.toml already pins `keyid` for `profile`."""
    try:
        pinned = trust.pins(config_mod.load(config_mod.DEFAULT_CONFIG), profile).keyids
    except ConfigError as exc:
        return f"unknown ({exc.one_line()})"
    return f"yes, in [trust.{profile}]" if keyid in pinned else f"NO: trust.toml [trust.{profile}] does not pin it"


def key(args: argparse.Namespace) -> int:
    """The release key's keyid and the line that pins it."""
    explicit = args.key or (Path(os.environ[signing.KEY_ENV]) if os.environ.get(signing.KEY_ENV) else None)
    key_path = Path(explicit or signing.DEFAULT_KEY)
    existed = key_path.exists()
    if args.public and not existed and explicit is None:
        # A key made now signed nothing: its public half would verify no release.
        raise ConfigError(
            f"no release key at {key_path}: it is made by the first release", hint="run `nox -s release` first"
        )
    signer = signing.load_or_create_key(args.key)
    pub = signing.public_key_path(key_path)
    pem = signing.public_key_pem(signer.public_key)
    write_atomic(pub, pem)
    if args.public:
        print(pem.decode(), end="")
        return 0
    print(f"release key: {key_path} ({'existing' if existed else 'created now'})")
    print(f"public key:  {pub}")
    print(f"keyid:       {signer.public_key.keyid}")
    print(f"pinned:      {_pinned_here(signer.public_key.keyid, args.profile)}")
    print(
        f"pin it in trust.toml (and commit it; it moves no image digest):\n\n[trust.{args.profile}]\n"
        f'keyids = ["{signer.public_key.keyid}"]'
    )
    return 0
