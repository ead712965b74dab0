"""`setup`: install the host tools a release needs (apt, as root) and prepare the engines."""

from __future__ import annotations

import argparse

from pipeline.runtime import hosttools


def setup_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Install the host tools the release needs."
    p.add_argument("--check", action="store_true", help="only report what is missing")


def setup(args: argparse.Namespace) -> int:
    if args.check:
        missing = hosttools.missing_packages()
        print("missing: " + (" ".join(missing) if missing else "nothing"))
        return 1 if missing else 0
    installed = hosttools.ensure_tools()
    print("setup: " + ("installed " + " ".join(installed) if installed else "all tools present"))
    for step in hosttools.prepare_engine():
        print(f"setup: {step}")
    return 0
