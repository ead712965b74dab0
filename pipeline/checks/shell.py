"""Shell snippets the checks send (run by the server as UID 2000 in the workspace)."""

from __future__ import annotations

import base64
import json
import secrets
import shlex
from typing import Any

PROBE_SPLIT = "--arena-probe--"


def token() -> str:
    """A fresh marker that no honest output contains by accident."""
    return secrets.token_hex(6)


def probe(files: tuple[str, ...]) -> str:
    """List the workspace (numeric owner, type, name), then hash the input files."""
    names = " ".join(shlex.quote(f) for f in files)
    return (
        f"find . -mindepth 1 -maxdepth 1 -printf '%U %G %y %P\\n' | LC_ALL=C sort; "
        f"echo {PROBE_SPLIT}; sha256sum -- {names}"
    )


def parse_probe(output: str) -> tuple[list[str], dict[str, str]]:
    """(listing lines, {file: sha256}) from the output of `probe`."""
    head, _, tail = output.partition(PROBE_SPLIT)
    listing = [line for line in head.splitlines() if line.strip()]
    hashes = {}
    for line in tail.splitlines():
        parts = line.split()
        if len(parts) == 2 and len(parts[0]) == 64:
            hashes[parts[1]] = parts[0]
    return listing, hashes


def hashes_only(files: tuple[str, ...]) -> str:
    names = " ".join(shlex.quote(f) for f in files)
    return f"echo {PROBE_SPLIT}; sha256sum -- {names}"


def write_bytes(name: str, data: bytes) -> str:
    """Write exact bytes to `name` without shell quoting pitfalls."""
    encoded = base64.b64encode(data).decode()
    return f"printf '%s' {encoded} | base64 -d > {shlex.quote(name)}"


def answer_bytes(answer: Any) -> bytes:
    return json.dumps(answer, sort_keys=True, separators=(",", ":")).encode()


def last_json_line(output: str) -> Any:
    """The last line of `output` that parses as a JSON object (a solver's answer)."""
    for line in reversed(output.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def pattern(marker: str) -> str:
    """A grep pattern matching `marker` but not grep's own command line."""
    return f"{marker[:-1]}[{marker[-1]}]"


def count_processes(marker: str) -> str:
    """Count processes whose command line holds `marker`."""
    return f"grep -las -- {shlex.quote(pattern(marker))} /proc/[0-9]*/cmdline | wc -l"
