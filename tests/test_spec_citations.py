"""Every citation of a specification file names a file of this repository.

Code, tests, configuration, documents and the statements the record writers sign cite the
contracts of docs/spec/ (docs/spec/README.md) by path, sometimes with a section:
`docs/spec/mimo.md, "The records"`. A citation is a path ending in one of the spec's file
names (`verification.md`, `mimo.md`, ...) or any `.../spec/NAME.md` or `.../spec/` path. It
must name a tracked file or directory: from the repository root, or, in a Markdown document,
also from the document's own directory (as its links resolve). A bare `verification.md`
in code names no file. A quoted section right after a citation (`, "..."` or ` "..."`,
possibly wrapped over comment lines) must be a heading of the cited document.

Scanned: every tracked text file except the committed records (provenance.json,
submission.json, attestations/), which the next release regenerates from the writers
scanned here, and this file, whose teeth cases cite missing files on purpose."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path, PurePosixPath

from pipeline.checks.results import CheckResult, SuiteResult
from pipeline.records import attest

REPO = Path(__file__).resolve().parents[1]
THIS = Path(__file__).resolve().relative_to(REPO).as_posix()

SPEC_NAMES = ("environment", "families", "verification", "mimo", "pipeline", "style")
# Not preceded by a path character, so the tail of a URL or of a longer path never matches.
CITATION = re.compile(
    r"(?<![\w./:-])(?P<path>(?:[\w.-]+/)*(?:spec/[\w.-]+\.md|(?:"
    + "|".join(SPEC_NAMES)
    + r")\.md)|(?:[\w.-]+/)+spec\b/?)"
)
SECTION = re.compile(r'(?:,[ \t]*|[ \t]+|,?[ \t]*\n[ \t]*(?:#+|//|\*)?[ \t]*)"(?P<section>[^"]{1,200})"')
WRAP = re.compile(r"\s*\n\s*(?:#+|//|\*)?\s*")  # a line break inside a comment or docstring
HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(?P<text>.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
RECORDS = ("provenance.json", "submission.json", "attestations/")


def tracked(repo: Path) -> list[str]:
    """The repository's tracked files (git ls-files), relative, POSIX-style."""
    out = subprocess.run(["git", "ls-files", "-z"], cwd=repo, check=True, capture_output=True).stdout
    return sorted(p for p in out.decode().split("\0") if p)


def scanned(files: list[str]) -> list[str]:
    return [f for f in files if f != THIS and not f.startswith(RECORDS)]


def headings(text: str) -> set[str]:
    """A Markdown document's heading texts, code spans unwrapped, fenced blocks skipped."""
    found: set[str] = set()
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (m := HEADING.match(line)):
            found.add(m["text"].replace("`", ""))
    return found


def _resolve(citing: str, path: str, existing: set[str]) -> str | None:
    """The tracked path a citation names, or None."""
    bases = [PurePosixPath(".")]
    if citing.endswith(".md"):
        bases.append(PurePosixPath(citing).parent)
    for base in bases:
        parts: list[str] = []
        for part in (base / path.rstrip("/")).parts:
            if part == "..":
                if not parts:
                    break
                parts.pop()
            elif part != ".":
                parts.append(part)
        else:
            if (target := "/".join(parts)) in existing:
                return target
    return None


def broken_citations(repo: Path, files: list[str]) -> list[str]:
    """Each citation among `files` (relative to `repo`) that names no tracked file, or a
    section its document lacks, as `FILE:LINE: CITATION: why`."""
    existing = set(files) | {str(p) for f in files for p in PurePosixPath(f).parents}
    broken = []
    for name in scanned(files):
        try:
            text = (repo / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        for m in CITATION.finditer(text):
            where = f"{name}:{text.count(chr(10), 0, m.start()) + 1}: {m['path']}"
            target = _resolve(name, m["path"], existing)
            if target is None:
                broken.append(f"{where}: no such file or directory in the repository")
                continue
            if (s := SECTION.match(text, m.end())) and target.endswith(".md"):
                section = WRAP.sub(" ", s["section"].strip())
                if section not in headings((repo / target).read_text(encoding="utf-8")):
                    broken.append(f'{where}: no heading "{section}" in {target}')
    return broken


def test_every_spec_citation_in_the_tree_names_a_file_and_heading_that_exist():
    files = tracked(REPO)
    assert "docs/spec/verification.md" in files and len(scanned(files)) > 100
    assert broken_citations(REPO, files) == []


def test_the_checks_statement_names_the_suite_s_spec_by_its_path():
    """The signed test-result statement carries the suite it ran ("suite"): a file here."""
    suite = SuiteResult(
        image="registry.example/env@sha256:" + "0" * 64,
        targets=("t",),
        checks=(CheckResult(id="image/health", passed=True, seconds=0.1),),
        seconds=0.1,
    )
    [conf] = attest.checks_predicate(suite, checks_sha256="0" * 64)["configuration"]
    assert conf["annotations"]["suite"] == attest.CHECK_SUITE_SPEC == "docs/spec/verification.md"
    assert "docs/spec/verification.md" in tracked(REPO)


# ------------------------------------------------------------ the checker has teeth


def test_missing_files_and_headings_are_found_and_urls_are_not_citations(tmp_path):
    spec = tmp_path / "docs" / "spec"
    spec.mkdir(parents=True)
    (spec / "mimo.md").write_text("# MiMo\n\n## The records\n\n```\n# Fenced\n```\n### What `is` inside\n")
    (tmp_path / "pipeline").mkdir()
    (tmp_path / "pipeline" / "a.py").write_text(
        '"""The rows of docs/spec/mimo.md, "The records"; of docs/spec/mimo.md "What is inside".\n\n'
        'Wrapped: (docs/spec/mimo.md, "The\n    records") and the spec docs/spec/ itself."""\n'
        '# (docs/spec/mimo.md, "Fenced"); see https://example.com/x/spec/mimo.md "Nowhere"\n'
        'SUITE = {"suite": "verification.md", "next": "docs/spec/mimo.md", "x": "y"}\n'
        "# bare mimo.md, the old shared/spec/mimo.md, the gone docs/spec/gone.md, and shared/spec\n"
        '# (docs/spec/mimo.md, "The\n# record")\n'
    )
    (tmp_path / "docs" / "a.md").write_text(
        "[facts](spec/mimo.md#the-records), `docs/spec/mimo.md`, [up](../docs/spec/mimo.md) and "
        "../../docs/spec/mimo.md\n"
    )
    files = ["docs/a.md", "docs/spec/mimo.md", "pipeline/a.py"]
    assert broken_citations(tmp_path, files) == [
        "docs/a.md:1: ../../docs/spec/mimo.md: no such file or directory in the repository",
        'pipeline/a.py:5: docs/spec/mimo.md: no heading "Fenced" in docs/spec/mimo.md',
        "pipeline/a.py:6: verification.md: no such file or directory in the repository",
        "pipeline/a.py:7: mimo.md: no such file or directory in the repository",
        "pipeline/a.py:7: shared/spec/mimo.md: no such file or directory in the repository",
        "pipeline/a.py:7: docs/spec/gone.md: no such file or directory in the repository",
        "pipeline/a.py:7: shared/spec: no such file or directory in the repository",
        'pipeline/a.py:8: docs/spec/mimo.md: no heading "The record" in docs/spec/mimo.md',
    ]


def test_the_committed_records_and_untracked_files_are_not_scanned(tmp_path):
    for name in ("provenance.json", "attestations/checks.dsse.json", "notes.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text('{"suite": "verification.md"}\n')
    assert broken_citations(tmp_path, ["provenance.json", "attestations/checks.dsse.json"]) == []
    assert broken_citations(tmp_path, ["notes.py"]) == [
        "notes.py:1: verification.md: no such file or directory in the repository"
    ]
