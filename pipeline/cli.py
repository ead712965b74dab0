"""`python -m pipeline <command> [args]`: every command, registered in one table.

Each command is an argparse sub-command whose arguments and body live in
`pipeline.commands.<stage>` as `<name>_arguments(parser)` and `<name>(args) -> int`
(a `-` in the command's name is a `_` in the functions').
Only the chosen command's module is imported (so `--help` and quick commands do not
load the signing and SBOM libraries). A ReleaseError becomes one line and an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from dataclasses import dataclass

from pipeline.errors import ReleaseError


@dataclass(frozen=True)
class Command:
    name: str
    stage: str  # the module pipeline.commands.<stage> that defines it
    summary: str


COMMANDS: tuple[Command, ...] = (
    Command("setup", "setup", "install the host tools a release needs (apt, as root)"),
    Command("registry", "registry", "start, stop or show the local loopback registry"),
    Command("docker-engine", "engine", "start, stop or show the pipeline's private Docker engine"),
    Command("lock", "sources", "regenerate the hash-pinned runtime wheel lock from locks/runtime.in"),
    Command(
        "lock-toolchain",
        "sources",
        "re-lock the pipeline's own toolchain (uv.lock) and export each "
        "dependency group hash-pinned (locks/<group>.txt)",
    ),
    Command("vendor", "sources", "fetch, verify and vendor pinned upstream files and external task records"),
    Command("base", "image", "build, push and pin the local base image (mmdebstrap + slim runtime)"),
    Command("build", "image", "build the derived image daemonlessly from the base digest and push it"),
    Command("serve", "serve", "serve the built image in a container (or, with --host-mode, on this host)"),
    Command("verify", "verify", "pull an image anonymously, start it and run every check of docs/spec/verification.md"),
    Command(
        "repair-checks",
        "repair",
        "pull any MiMo repair image anonymously, start it under the external "
        "budget and run the seed's twelve repair checks and ours",
    ),
    Command(
        "checks",
        "verify",
        "the check suite against running servers (--url), one shard of it "
        "(--shard I/N), or `checks merge` of the shards",
    ),
    Command("submission", "submission", "write submission.json from passing check results"),
    Command("preflight", "preflight", "the platform's admission checks on a request (default submission.json)"),
    Command("sbom", "records", "CycloneDX 1.6 SBOM of the built image, read from its layers"),
    Command("attest", "records", "sign provenance, SBOM and check-result statements into attestations/"),
    Command("key", "records", "show (creating if missing) the release key, its keyid and the trust.toml pin"),
    Command("release", "release", "the whole release: sources, base, build, SBOM, push, verify, signed records"),
    Command("reproduce", "reproduce", "rebuild and compare with the recorded digests, explaining differences"),
    Command("audit", "audit", "verify a release's records offline against a pinned trust root; writes a VSA"),
    Command("diff", "diff", "what changed between two releases (records directories or git revisions)"),
)


def parser(chosen: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser; only `chosen`'s sub-parser gets its arguments (and its module)."""
    top = argparse.ArgumentParser(
        prog="python -m pipeline", description="The release machinery of the OpenEnv environment image."
    )
    sub = top.add_subparsers(dest="command", metavar="<command>", title="commands")
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.summary, description=command.summary)
        if command.name == chosen:
            module = importlib.import_module(f"pipeline.commands.{command.stage}")
            function = command.name.replace("-", "_")
            getattr(module, f"{function}_arguments")(p)
            p.set_defaults(run=getattr(module, function))
    return top


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=os.environ.get("PIPELINE_LOG", "WARNING").upper(),
        format="%(name)s: %(message)s",
    )
    names = {c.name for c in COMMANDS}
    chosen = next((a for a in argv if not a.startswith("-")), None)
    top = parser(chosen if chosen in names else None)
    if not argv or argv[0] == "help":
        top.print_help()
        return 0
    try:
        args = top.parse_args(argv)
        args.argv = tuple(argv[1:])
        return int(args.run(args) or 0)
    except ReleaseError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
