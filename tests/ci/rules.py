"""The project's own rules for GitHub Actions workflows, checked on the parsed YAML.

Each rule returns messages naming the file, job and step that break it, so a test
can assert both that the real workflows are clean and that a broken copy is caught.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

# owner/repo[/path]@<full commit sha>  # v<version>
PINNED = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+(/[A-Za-z0-9_./-]+)?@[0-9a-f]{40}$")
VERSION_COMMENT = re.compile(r"#\s*v\d+(\.\d+)*\s*$")
WRITE_ALL = ("write-all", "read-all")


def load(text: str) -> dict[str, Any]:
    doc = yaml.safe_load(text)
    # YAML 1.1 reads the key `on` as the boolean True.
    if True in doc and "on" not in doc:
        doc["on"] = doc.pop(True)
    return doc


def _steps(doc: dict[str, Any]):
    for job_id, job in (doc.get("jobs") or {}).items():
        for n, step in enumerate(job.get("steps") or []):
            yield job_id, n, step


def _uses_lines(text: str) -> dict[str, str]:
    """Each `uses:` value -> the raw line it is on (for its version comment)."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^\s*(-\s+)?uses:\s*(\S+)(.*)$", line)
        if m:
            out.setdefault(m.group(2), line)
    return out


def violations(name: str, text: str) -> list[str]:
    """Every break of the rules in one workflow file."""
    doc = load(text)
    found: list[str] = []
    if doc.get("permissions") != {}:
        found.append(
            f"{name}: top-level permissions must be {{}} (each job asks for its own), got {doc.get('permissions')!r}"
        )
    lines = _uses_lines(text)
    for job_id, job in (doc.get("jobs") or {}).items():
        where = f"{name}: job {job_id}"
        if "permissions" not in job:
            found.append(f"{where}: no explicit permissions")
        elif job["permissions"] in WRITE_ALL or not isinstance(job["permissions"], dict):
            found.append(f"{where}: permissions must be a mapping of scopes, got {job['permissions']!r}")
        if "uses" in job:
            found += _pin(f"{where} (reusable workflow)", job["uses"], lines)
        elif "timeout-minutes" not in job:
            # A hung job would otherwise hold its runner (and any token it has) for 6 hours.
            found.append(f"{where}: no timeout-minutes")
    for job_id, n, step in _steps(doc):
        where = f"{name}: job {job_id} step {n + 1} ({step.get('name') or step.get('uses') or 'run'})"
        if "uses" in step:
            found += _pin(where, step["uses"], lines)
            if (
                step["uses"].startswith("actions/checkout@")
                and (step.get("with") or {}).get("persist-credentials") is not False
            ):
                found.append(f"{where}: checkout must set persist-credentials: false")
        if "${{" in str(step.get("run", "")):
            found.append(f"{where}: an expression in run: (pass it through env: instead)")
    return found


def _pin(where: str, uses: str, lines: dict[str, str]) -> list[str]:
    if uses.startswith("./"):
        return []
    if not PINNED.match(uses):
        return [f"{where}: {uses} is not pinned by a full commit SHA"]
    if not VERSION_COMMENT.search(lines.get(uses, "")):
        return [f"{where}: {uses} has no `# vX.Y.Z` comment naming the release it pins"]
    return []


def workflows(root: Path) -> dict[str, str]:
    """name -> text of every workflow in `root`/.github/workflows."""
    folder = root / ".github" / "workflows"
    return {p.name: p.read_text() for p in sorted(folder.glob("*.y*ml"))}
