"""SBOM generation, signing and audit times.

Measures the built image in `dist/oci` when there is one (after `nox -s build`);
otherwise a synthetic image of a similar shape (a 400-package dpkg status, 120
dist-infos, 60 app files, a 30 MB filler layer) built here, and says which one it
measured. The audit is timed on records made from that image in a temp directory.

    python benchmarks/bench_attest.py [--layout DIR] [--runs N]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline import audit, config, plan
from pipeline.checks.results import CheckResult, SuiteResult
from pipeline.image.oci.files import open_image
from pipeline.image.oci.image import OCI_CONFIG, OCI_LAYER_GZIP, OCI_MANIFEST
from pipeline.image.oci.layer import FileEntry, parents_of, write_layer
from pipeline.image.oci.layout import Layout
from pipeline.records import attest, provenance, sbom, signing

EPOCH = 1_700_000_000
SITE = "opt/arena-python/lib/python3.11/site-packages"


def synthetic_image(root: Path) -> Path:
    """An OCI layout shaped like the real image (package counts, app files, a big layer)."""
    status = "\n".join(
        f"Package: pkg{i}\nStatus: install ok installed\nArchitecture: amd64\nVersion: 1.{i}-1\n"
        f"Description: synthetic\n continuation line\n"
        for i in range(400)
    )
    base = {"var/lib/dpkg/status": status.encode(), "usr/lib/os-release": b'ID=debian\nVERSION_ID="12"\n'}
    base.update({f"usr/share/filler/{i:04d}.bin": os.urandom(30_000) for i in range(1000)})
    dists = {}
    for i in range(120):
        d = f"{SITE}/dist{i}-1.0.dist-info"
        dists[f"{d}/METADATA"] = f"Metadata-Version: 2.1\nName: dist{i}\nVersion: 1.0\nLicense: MIT\n".encode()
        dists[f"{d}/RECORD"] = "".join(f"dist{i}/m{j}.py,sha256=x,1\n" for j in range(50)).encode()
    app = {f"opt/arena/env/families/f{i}.py": os.urandom(2000).hex().encode() for i in range(60)}
    layout = Layout.init(root)
    blobs = root / "blobs" / "sha256"
    layers = []
    for files in (base, dists, app):
        entries = [FileEntry(path=p, type="file", mode=0o644, source=d) for p, d in files.items()]
        layers.append(write_layer(parents_of(files) + entries, blobs, source_date_epoch=EPOCH))
    cfg = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "created": "2023-11-14T22:13:20Z",
            "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
        }
    ).encode()
    cfg_digest = layout.put_bytes(cfg)
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": cfg_digest, "size": len(cfg)},
            "layers": [{"mediaType": OCI_LAYER_GZIP, "digest": layer.digest, "size": layer.size} for layer in layers],
        }
    ).encode()
    layout.add_manifest(manifest, OCI_MANIFEST, ref_name="bench")
    return root


def timed(fn, runs: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(runs):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layout", type=Path, default=config.REPO_ROOT / "dist" / "oci")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    os.environ.setdefault("SOURCE_DATE_EPOCH", str(EPOCH))
    cfg = config.load()
    with tempfile.TemporaryDirectory(prefix="bench-attest-") as tmp:
        tmp_path = Path(tmp)
        if (args.layout / "index.json").is_file():
            layout, what = args.layout, f"built image in {args.layout}"
        else:
            layout, what = synthetic_image(tmp_path / "oci"), "synthetic image (no dist/oci: run `nox -s build`)"
        image = open_image(layout)
        size = sum(p.stat().st_size for _, p in image.layers)
        print(f"image: {what}: {image.digest}, {len(image.layers)} layers, {size / 1e6:.1f} MB compressed")

        lock = config.REPO_ROOT / "locks" / "runtime.txt"
        lock_text = lock.read_text() if lock.is_file() else ""
        secs, data = timed(
            lambda: sbom.generate(layout, name="bench/image", app_dir=cfg.app_dir, lock_text=lock_text), args.runs
        )
        doc = json.loads(data)
        print(
            f"sbom: {secs:.3f} s median of {args.runs} ({len(doc['components'])} components, "
            f"{len(data) / 1e3:.0f} kB, {size / 1e6 / secs:.0f} MB/s of layers)"
        )
        vsecs, _ = timed(lambda: sbom.validate(data), args.runs)
        print(f"sbom strict validation: {vsecs:.3f} s")

        # Records for the audit: the repository's own release.toml profile, no vendored sources.
        records = tmp_path / "records"
        (records / "locks").mkdir(parents=True)
        (records / "locks" / "runtime.txt").write_text(lock_text)
        # The local profile, with its base pinned by digest in release.toml (no locks/base.json needed).
        base = f"bench.invalid/base@sha256:{'5' * 64}"
        (records / "release.toml").write_text(cfg.path.read_text().replace('base = "local"', f'base = "{base}"', 1))
        prov = provenance.Provenance(
            schema=provenance.SCHEMA,
            profile="local",
            source_date_epoch=EPOCH,
            project=provenance.ProjectRevision("1" * 40, "2" * 40, False, (), False),
            base=provenance.Base(*base.split("@")),
            wheel_lock=provenance.WheelLock("locks/runtime.txt", hashlib.sha256(lock_text.encode()).hexdigest()),
            builder=provenance.builder(),
            sources=(),
            external=(),
        )
        provenance.write(records / "provenance.json", prov)
        (records / "submission.json").write_text(json.dumps({"image": f"bench/image@{image.digest}"}))
        signer = signing.KeySigner(signing.CryptoSigner.generate_ed25519())
        now = datetime.now(UTC)
        checks = SuiteResult(
            image=f"bench/image@{image.digest}",
            targets=("bench",),
            seconds=0.0,
            checks=tuple(CheckResult(f"case-{i}/correct", True, 0.1) for i in range(600)),
        )
        ssecs, _ = timed(
            lambda: attest.write_attestations(
                cfg,
                attest.Evidence(
                    attest.Subject("bench/image", image.digest),
                    prov,
                    lock_text=lock_text,
                    sbom_bytes=data,
                    checks=checks,
                    checks_bytes=json.dumps(checks.to_json()).encode(),
                ),
                attest.Invocation(plan.resolve(cfg, prov.profile).parameters, started=now, finished=now),
                signer=signer,
                out_dir=records / "attestations",
            ),
            args.runs,
        )
        print(f"attest + sign (3 statements, Ed25519): {ssecs:.3f} s")
        asecs, rows = timed(lambda: audit.audit(records), args.runs)
        failed = [c for c in rows if not c.ok]
        print(f"audit: {asecs:.3f} s median of {args.runs} ({len(rows)} checks, {len(failed)} failed)")
        # These records have no release statement, links or submission tasks (timing only): the
        # audit fails those checks, and says so.
        for c in failed:
            print(f"  FAIL {c.id}: {c.detail[:160]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
