"""Every relative link in README.md, CONTRIBUTING.md and docs/**/*.md resolves: the file (or
directory) it names exists in the checkout, and an `#anchor` names a heading of the document
it points at (GitHub's heading ids). Links to other sites are not followed (no network).

Links inside fenced blocks and `code spans` are text, not links, and are not checked."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+).*?\1")
INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?(?P<target>[^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(?P<target>\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(?P<text>.*?)\s*#*\s*$")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def documents(repo: Path) -> list[Path]:
    return [p for p in (repo / "README.md", repo / "CONTRIBUTING.md") if p.exists()] + sorted(
        (repo / "docs").rglob("*.md")
    )


def _prose_lines(text: str):
    """(line number, line) outside fenced blocks, with code spans blanked out."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, CODE_SPAN.sub("", line)


def slug(heading: str) -> str:
    """GitHub's id for a heading: lower case, punctuation dropped (hyphens and underscores
    kept), each space a hyphen."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The ids of a document's headings; a repeated one gets -1, -2, ... as GitHub numbers them."""
    seen: dict[str, int] = {}
    ids: set[str] = set()
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced or not (m := HEADING.match(line)):
            continue
        base = slug(m["text"])
        n = seen.get(base, 0)
        seen[base] = n + 1
        ids.add(base if n == 0 else f"{base}-{n}")
    return ids


def links(text: str) -> list[tuple[int, str]]:
    found = []
    for number, line in _prose_lines(text):
        found += [(number, m["target"]) for m in INLINE_LINK.finditer(line)]
        if m := REFERENCE_DEFINITION.match(line):
            found.append((number, m["target"]))
    return found


def broken_links(repo: Path) -> list[str]:
    """Each relative link of the documents that does not resolve, as `FILE:LINE: TARGET: why`."""
    broken = []
    for doc in documents(repo):
        name = doc.relative_to(repo).as_posix()
        for number, target in links(doc.read_text()):
            if SCHEME.match(target):
                continue
            path, _, anchor = target.partition("#")
            dest = (doc.parent / path).resolve() if path else doc
            where = f"{name}:{number}: {target}"
            if repo.resolve() not in (dest, *dest.parents):
                broken.append(f"{where}: outside the repository")
            elif not dest.exists():
                broken.append(f"{where}: no such file")
            elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest.read_text())):
                broken.append(f"{where}: no heading with the id #{anchor}")
    return broken


def test_every_relative_link_of_the_readme_and_docs_resolves():
    assert (REPO / "docs").is_dir() and len(documents(REPO)) > 2
    assert broken_links(REPO) == []


# ------------------------------------------------------------ the checker has teeth


@pytest.mark.parametrize(
    "heading, expected",
    [
        ("The environment's contract", "the-environments-contract"),
        ("The two profiles of `release.toml`", "the-two-profiles-of-releasetoml"),
        ("Releasing: records, then CI reproduces", "releasing-records-then-ci-reproduces"),
        ("SLSA level", "slsa-level"),
        ("Set-up (once)", "set-up-once"),
    ],
)
def test_heading_ids_are_github_s(heading, expected):
    assert slug(heading) == expected


def test_broken_files_and_anchors_are_found_and_code_is_not_a_link(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(
        "# Title\n\n## Set-up\n\n## Set-up\n\n"
        "[ok](docs/a.md#part-two) [ok](#set-up-1) [ok](docs/) [web](https://example.com/x#y)\n"
        "[gone](docs/missing.md) [no anchor](docs/a.md#part-three)\n"
        "`[code](docs/missing.md)`\n\n```md\n[fenced](docs/missing.md)\n```\n\n"
        "[ref]: docs/a.md#nowhere\n"
    )
    (tmp_path / "docs" / "a.md").write_text("# A\n\n## Part two\n\n[up](../README.md#title) [out](../../x.md)\n")
    assert broken_links(tmp_path) == [
        "README.md:8: docs/missing.md: no such file",
        "README.md:8: docs/a.md#part-three: no heading with the id #part-three",
        "README.md:15: docs/a.md#nowhere: no heading with the id #nowhere",
        "docs/a.md:5: ../../x.md: outside the repository",
    ]
