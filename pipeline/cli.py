"""`python -m pipeline <command> [args]`: one entry point for every stage.

Each command lives in its own module as `main(argv) -> int` and parses its own
arguments; this module only dispatches and turns a ReleaseError into one line and an
exit code.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys

from pipeline.errors import ReleaseError

COMMANDS: dict[str, tuple[str, str]] = {
    # name: ("module:function", one-line description)
    "lock": ("pipeline.sources.lock:main", "regenerate the hash-pinned runtime wheel lock from locks/runtime.in"),
    "base": ("pipeline.image.base:main", "build, push and pin the local base image (mmdebstrap + slim runtime)"),
    "verify": ("pipeline.checks.commands:verify_main", "pull an image anonymously, start it and run every check of verification.md"),
    "serve": ("pipeline.verify.serve:main", "serve the built image in a container (or, with --host-mode, on this host)"),
    "checks": ("pipeline.checks.commands:checks_main", "the check suite against running servers (--url), one shard of it (--shard I/N), or `checks merge` of the shards"),
    "submission": ("pipeline.checks.commands:submission_main", "write submission.json from passing check results"),
    "build": ("pipeline.image.build:main", "build the derived image daemonlessly from the base digest and push it"),
    "release": ("pipeline.release:main", "the whole release: sources, base, build, SBOM, push, verify, signed records"),
    "reproduce": ("pipeline.reproduce:main", "rebuild and compare with the recorded digests, explaining differences"),
    "setup": ("pipeline.verify.hosttools:main", "install the host tools a release needs (apt, as root)"),
    "registry": ("pipeline.registry.local:main", "start, stop or show the local loopback registry"),
    "sbom": ("pipeline.records.sbom:main", "CycloneDX 1.6 SBOM of the built image, read from its layers"),
    "attest": ("pipeline.records.attest:main", "sign provenance, SBOM and check-result statements into attestations/"),
    "audit": ("pipeline.audit:main", "verify a release's records offline against a pinned trust root; writes a VSA"),
    "key": ("pipeline.records.signing:main", "show (creating if missing) the release key, its keyid and the release.toml pin"),
    "vendor": ("pipeline.sources.vendor:main", "fetch, verify and vendor pinned upstream files and external task records"),
}


def _usage() -> str:
    width = max((len(n) for n in COMMANDS), default=8)
    lines = ["usage: python -m pipeline <command> [args]", "", "commands:"]
    lines += [f"  {n:<{width}}  {d}" for n, (_, d) in sorted(COMMANDS.items())]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=os.environ.get("PIPELINE_LOG", "WARNING").upper(),
        format="%(name)s: %(message)s",
    )
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"pipeline: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    target, _ = COMMANDS[name]
    module_name, func_name = target.split(":")
    func = getattr(importlib.import_module(module_name), func_name)
    try:
        return int(func(rest) or 0)
    except ReleaseError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
