"""`audit`: verify a release's records offline against a trust root."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pipeline import audit as audit_mod
from pipeline import config as config_mod
from pipeline.records import trust, vsa


def audit_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "verify a release's records offline against a trust root"
    p.add_argument(
        "--records",
        type=Path,
        default=config_mod.REPO_ROOT,
        help="directory holding release.toml, provenance.json, submission.json, locks/, "
        "vendor/, attestations/ (default: this checkout)",
    )
    p.add_argument("--key", type=Path, help="trust this public key (PEM) instead of release.toml's pinned keyids")
    p.add_argument("--identity", help="trust this sigstore certificate identity (exact, or a prefix ending in *)")
    p.add_argument("--issuer", help="the OIDC issuer that goes with --identity")
    p.add_argument(
        "--registry",
        action="store_true",
        help="also read the image, its Sigstore bundle referrers and its layer blobs from the registry, "
        "anonymously (a name without a registry: the running local registry)",
    )
    p.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="ID",
        help="do not run this check (reported as skipped; the VSA says it was not verified)",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of the table")
    p.add_argument("--verbose", "-v", action="store_true", help="one table row per check instead of per area")
    p.add_argument(
        "--vsa",
        type=Path,
        help="where to write the verification summary (default: "
        "<records>/dist/vsa.dsse.json with --vsa-key, else dist/vsa.json)",
    )
    p.add_argument("--vsa-key", type=Path, help="sign the verification summary with this private key (PEM)")


def audit(args: argparse.Namespace) -> int:
    auditor = trust.from_auditor(key_file=args.key, identity=args.identity, issuer=args.issuer)
    if auditor is None:
        # The trust root is trust.toml's: validated whole before any check, so a malformed table
        # (a misspelt key in any profile's) stops the audit at once, naming the file and the key.
        trust.load(Path(args.records) / config_mod.TRUST_FILE)
    rows = audit_mod.audit(args.records, trust_root=auditor, registry=args.registry, skip=frozenset(args.skip))
    image = audit_mod.image_ref(args.records)
    out = args.vsa or Path(args.records) / "dist" / ("vsa.dsse.json" if args.vsa_key else "vsa.json")
    written = vsa.write(out, rows, records=Path(args.records), image=image, key_path=args.vsa_key)
    verdict = audit_mod.verdict(rows)
    if args.json:
        print(
            json.dumps(
                {"result": verdict, "image": image, "vsa": str(written), "checks": [c.to_json() for c in rows]},
                indent=2,
                sort_keys=True,
            )
        )
    else:
        print(audit_mod.render_table(rows, image=image, verbose=args.verbose))
        print(f"verification summary: {written}")
    if verdict != "PASSED":
        # The first failure is the cause of those after it (which say "not checked: ...").
        first = next(c for c in rows if not c.ok)
        print(
            f"audit: FAILED ({sum(not c.ok for c in rows)} check(s)); first {first.id}: {first.detail}", file=sys.stderr
        )
        return 1
    return 0
