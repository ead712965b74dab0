"""The licences the SBOM gives its components, each read from what the image itself says.

- A Python distribution: its core metadata: `License-Expression`; else the `License` field
  when the library's factory reads it as an SPDX id or expression; else the licence its
  `License :: ...` classifiers name when they map to one SPDX id unambiguously; else the
  `License` field as a name, else the classifier's name. A distribution whose metadata names
  no licence at all: its licence file (`License-File`) when the reviewed table has it.
- A Debian package: its copyright file, `/usr/share/doc/<package>/copyright`, when that
  file is machine-readable (DEP-5, Debian's copyright-format 1.0), read with
  python-debian's own parser: the licence of its header and of every `Files` paragraph,
  in order. A free-form copyright file gives a licence only from the reviewed table
  (reviewed_licenses.toml): an entry a person wrote after reading the file, keyed by the
  package and the file's sha256, so a changed file is never labelled by an old reading.
- A file of the application: the licence its source pins (release.toml, pyproject.toml).

Every value goes through cyclonedx-python-lib's own licence factory and comes out as
that decides: an SPDX licence id, a valid SPDX expression, or a named licence. Debian's
`GPL-2+` stays the name `GPL-2+`. An expression with `LicenseRef-` references, which the
factory does not take for an expression, stays one when license-expression parses it.
"""

from __future__ import annotations

import hashlib
import logging
import re
import tomllib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from email.message import Message
from functools import cache
from pathlib import Path
from typing import cast

from packaging.utils import canonicalize_name

from pipeline.config import REPO_ROOT
from pipeline.errors import ConfigError
from pipeline.imageref import is_sha256

# The copyright file of an installed package, relative to the image root.
COPYRIGHT = "usr/share/doc/{package}/copyright"
# Licences a person read from files no parser reads reliably (the module's docstring).
REVIEWED = Path(__file__).with_name("reviewed_licenses.toml")
_LICENSE_CLASSIFIER = "License :: "
# Trove licence classifiers that name one SPDX licence (by the classifier's own text). Those
# that name a family (`BSD License`, `Apache Software License`, `GNU General Public License
# (GPL)`) are not here: which licence of the family is meant cannot be read from them.
CLASSIFIER_SPDX = {
    "License :: OSI Approved :: MIT License": "MIT",
    "License :: OSI Approved :: MIT No Attribution License (MIT-0)": "MIT-0",
    "License :: OSI Approved :: ISC License (ISCL)": "ISC",
    "License :: OSI Approved :: Python Software Foundation License": "PSF-2.0",
    "License :: OSI Approved :: Mozilla Public License 2.0 (MPL 2.0)": "MPL-2.0",
    "License :: OSI Approved :: The Unlicense (Unlicense)": "Unlicense",
    "License :: OSI Approved :: Zero-Clause BSD (0BSD)": "0BSD",
    "License :: OSI Approved :: zlib/libpng License": "Zlib",
    "License :: OSI Approved :: Boost Software License 1.0 (BSL-1.0)": "BSL-1.0",
    "License :: OSI Approved :: Universal Permissive License (UPL)": "UPL-1.0",
    "License :: OSI Approved :: GNU General Public License v2 or later (GPLv2+)": "GPL-2.0-or-later",
    "License :: OSI Approved :: GNU General Public License v3 or later (GPLv3+)": "GPL-3.0-or-later",
    "License :: OSI Approved :: GNU Lesser General Public License v2 or later (LGPLv2+)": "LGPL-2.0-or-later",
    "License :: OSI Approved :: GNU Lesser General Public License v3 or later (LGPLv3+)": "LGPL-3.0-or-later",
    "License :: CC0 1.0 Universal (CC0 1.0) Public Domain Dedication": "CC0-1.0",
}
# SPDX's references to licences outside its list (SPDX 2.3, annex D).
_LICENSE_REF = re.compile(r"(?:DocumentRef-[A-Za-z0-9.-]+:)?LicenseRef-[A-Za-z0-9.-]+")
# A reviewed quote is a short passage, not a licence text.
QUOTE_MAX = 240


def python_license(meta: Message) -> str | None:
    """The licence a distribution's core metadata declares, or None (module docstring)."""
    expr = (meta.get("License-Expression") or "").strip()
    if expr:
        return expr
    text = (meta.get("License") or "").strip()
    # The free-text field is sometimes a whole licence text; only a short name is useful.
    if "\n" in text or len(text) > 80 or text.upper() == "UNKNOWN":
        text = ""
    if text and _is_spdx(text):
        return text
    classifiers = [c.strip() for c in meta.get_all("Classifier") or [] if c.strip().startswith(_LICENSE_CLASSIFIER)]
    mapped = {CLASSIFIER_SPDX.get(c) for c in classifiers}
    if len(mapped) == 1 and None not in mapped:
        return mapped.pop()
    if text:
        return text
    for classifier in classifiers:
        if classifier.startswith(_LICENSE_CLASSIFIER + "OSI Approved :: "):
            return classifier.rsplit(" :: ", 1)[1]
    return None


def license_files(meta: Message) -> list[str]:
    """The licence files a distribution's metadata names (`License-File`), relative to its
    dist-info directory: under `licenses/` (metadata 2.4) and, as older tools put them, at
    its top."""
    found = []
    for name in meta.get_all("License-File") or []:
        name = name.strip()
        if name and not name.startswith("/") and ".." not in name.split("/"):
            found += [f"licenses/{name}", name]
    return found


def _is_spdx(value: str) -> bool:
    """Whether cyclonedx-python-lib's factory reads `value` as an SPDX id or expression."""
    from cyclonedx.contrib.license.factories import LicenseFactory
    from cyclonedx.model.license import LicenseExpression

    made = LicenseFactory().make_from_string(value)
    return isinstance(made, LicenseExpression) or made.id is not None


def debian_licenses(data: bytes) -> tuple[str, ...]:
    """The licences a machine-readable Debian copyright file names (its header's, then each
    `Files` paragraph's, each once, in order); () for a free-form or unreadable file."""
    from debian import copyright as dep5

    # The parser logs a warning when it upgrades an http:// Format URL to the https:// one
    # the format names (as several of Debian's own files need): a note, not a failure.
    logging.getLogger(dep5.__name__).setLevel(logging.ERROR)
    try:
        parsed = dep5.Copyright(data.decode("utf-8", errors="replace").splitlines(keepends=True), strict=False)
    except (dep5.Error, ValueError):
        return ()
    found: list[str] = []
    paragraphs: list[dep5.Header | dep5.FilesParagraph] = [parsed.header, *parsed.all_files_paragraphs()]
    for paragraph in paragraphs:
        # python-debian declares its fields as RestrictedField descriptors, without their value type.
        lic = cast("dep5.License | None", paragraph.license)
        synopsis = (lic.synopsis or "").strip() if lic is not None else ""
        if synopsis and synopsis not in found:
            found.append(synopsis)
    return tuple(found)


# ------------------------------------------------------------------ the reviewed table


@dataclass(frozen=True)
class Reviewed:
    """The licence a person read from one file: a package's (kind `deb` or `pypi`, `name`)
    copyright or licence file with sha256 `sha256`, shown by `quote` from that file."""

    kind: str
    name: str
    sha256: str
    expression: str
    quote: str
    note: str = ""


@cache
def _spdx_licensing():  # a license_expression.Licensing
    # Built from license-expression's licence index: about 50 ms each time, so once.
    from license_expression import get_spdx_licensing

    return get_spdx_licensing()


def expression_problem(expression: object) -> str | None:
    """What license-expression finds wrong with an SPDX expression: None when it parses and
    names only SPDX licences and exceptions, or `LicenseRef-` references."""
    from license_expression import ExpressionError

    if not isinstance(expression, str) or not expression.strip():
        return f"expression {expression!r} is empty"
    licensing = _spdx_licensing()
    try:
        parsed = licensing.parse(expression, strict=True)
    except ExpressionError as exc:
        return f"expression {expression!r} is not SPDX: {exc}"
    unknown = [k for k in licensing.unknown_license_keys(parsed) if not _LICENSE_REF.fullmatch(k)]
    if unknown:
        return f"expression {expression!r} names licences SPDX does not list: {', '.join(unknown)}"
    return None


def _words(text: str) -> str:
    return " ".join(text.split())


def quote_in(quote: str, data: bytes) -> bool:
    """Whether `quote` is in the file `data`, runs of white space counting as one space."""
    return _words(quote) in _words(data.decode("utf-8", errors="replace"))


class ReviewedTable:
    """reviewed_licenses.toml, checked: each entry's licence applies only to the file it was
    read from (module docstring)."""

    def __init__(self, entries: Iterable[Reviewed], source: str = "") -> None:
        self.source = source
        self.entries: dict[tuple[str, str], dict[str, Reviewed]] = {}
        for e in entries:
            by_hash = self.entries.setdefault((e.kind, e.name), {})
            if e.sha256 in by_hash:
                raise ConfigError(
                    f"{source}: {e.kind} {e.name} has two entries for one file",
                    actual=e.sha256,
                    hint="keep one reading of each file",
                )
            by_hash[e.sha256] = e

    @classmethod
    def parse(cls, text: str, source: str = "") -> ReviewedTable:
        """The table in TOML `text`; ConfigError for a malformed entry, a hash that is not a
        sha256, a quote that is empty or too long, or an expression license-expression refuses."""
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source} is not TOML", actual=str(exc)) from None
        entries = []
        for kind in sorted(data):
            if kind not in ("deb", "pypi"):
                raise ConfigError(f"{source}: unknown table [[{kind}]]", expected="[[deb]] or [[pypi]]")
            for i, raw in enumerate(data[kind]):
                where = f"{source}: [[{kind}]] #{i + 1}"
                names, sha, expr = raw.get("names"), raw.get("sha256"), raw.get("expression")
                quote, note = raw.get("quote"), raw.get("note", "")
                if set(raw) - {"names", "sha256", "expression", "quote", "note"}:
                    raise ConfigError(f"{where} has unknown keys", actual=", ".join(sorted(raw)))
                if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
                    raise ConfigError(f"{where}: `names` is not a list of package names", actual=repr(names))
                if not is_sha256(sha):
                    raise ConfigError(f"{where}: `sha256` is not a sha256 hex digest", actual=repr(sha))
                problem = expression_problem(expr)
                if problem is not None:
                    raise ConfigError(
                        f"{where} ({', '.join(names)}): {problem}",
                        hint="an SPDX expression: SPDX ids, WITH exceptions, LicenseRef- references",
                    )
                if not isinstance(quote, str) or not quote.strip() or len(_words(quote)) > QUOTE_MAX:
                    raise ConfigError(
                        f"{where} ({', '.join(names)}): `quote` is not a short passage",
                        expected=f"1 to {QUOTE_MAX} characters of the file",
                        actual=repr(quote),
                    )
                if kind == "pypi":  # compared by normalized name (PEP 503)
                    names = [canonicalize_name(n) for n in names]
                entries += [
                    Reviewed(kind=kind, name=n, sha256=sha, expression=expr.strip(), quote=quote, note=str(note))
                    for n in names
                ]
        return cls(entries, source)

    def licence(
        self, kind: str, name: str, data: bytes, *, where: str, changed: Callable[[str], None] | None = None
    ) -> str | None:
        """The reviewed expression for package `name`'s file `data` (at `where` in the image),
        or None. A package the table has, but for a file of another hash, gets None and is
        reported to `changed`; a file of the hash without the entry's quote is refused."""
        by_hash = self.entries.get((kind, name))
        if not by_hash:
            return None
        sha = hashlib.sha256(data).hexdigest()
        entry = by_hash.get(sha)
        if entry is None:
            if changed is not None:
                changed(
                    f"{kind} {name}: {where} (sha256 {sha}) is not the file reviewed "
                    f"({', '.join(sorted(by_hash))}): no licence claimed; review it again in {self.source}"
                )
            return None
        if not quote_in(entry.quote, data):
            raise ConfigError(
                f"{self.source}: the reviewed licence of {kind} {name} quotes text its file does not hold",
                expected=entry.quote,
                actual=f"{where} (sha256 {sha})",
                hint="the entry is wrong: read the file again and quote it",
            )
        return entry.expression


@cache
def reviewed_table(path: Path = REVIEWED, root: Path = REPO_ROOT) -> ReviewedTable:
    """The reviewed table at `path` (checked once per process), named by its path in the
    checkout `root` (the audited one: a staged copy of the checkout names it as the checkout does)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"no reviewed licence table at {path}") from None
    resolved, root = Path(path).resolve(), Path(root).resolve()
    name = str(resolved.relative_to(root)) if resolved.is_relative_to(root) else str(path)
    return ReviewedTable.parse(text, name)


# ------------------------------------------------------------------ CycloneDX


def _make(factory, value: str):
    """The factory's licence for `value`; a valid SPDX expression with `LicenseRef-`
    references (which the factory takes for a name) stays an expression."""
    from cyclonedx.model.license import DisjunctiveLicense, LicenseExpression

    made = factory.make_from_string(value)
    if (
        isinstance(made, DisjunctiveLicense)
        and made.id is None
        and _LICENSE_REF.search(value)
        and expression_problem(value) is None
    ):
        return LicenseExpression(value)
    return made


def cyclonedx_licenses(values: Iterable[str | None]) -> list:
    """The CycloneDX licences of one component, each value made by the library's factory.

    CycloneDX has a component carry either licences (ids and names) or one expression:
    one value stays what the factory makes of it; among several, a value the factory
    reads as an expression is kept as a named licence (its text unchanged)."""
    from cyclonedx.contrib.license.factories import LicenseFactory
    from cyclonedx.model.license import LicenseExpression

    factory = LicenseFactory()
    wanted = [v.strip() for v in values if v and v.strip()]
    made = [_make(factory, v) for v in dict.fromkeys(wanted)]
    if len(made) <= 1:
        return made
    return [factory.make_with_name(m.value) if isinstance(m, LicenseExpression) else m for m in made]


def coverage(components: Sequence[dict]) -> tuple[int, int]:
    """(components with a licence, components) of a CycloneDX document's component list."""
    return sum(1 for c in components if c.get("licenses")), len(components)


def unlicensed_line(components: Sequence[dict], shown: int = 10) -> str | None:
    """`no licence: a, b and 3 more` for the components without a licence; None when all have one."""
    names = sorted(str(c.get("name")) for c in components if not c.get("licenses"))
    if not names:
        return None
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return "no licence: " + ", ".join(names[:shown]) + more


def coverage_line(components: Sequence[dict]) -> str:
    """`152 of 159 components (95.6%) carry a licence`: the figure the release reports."""
    licensed, total = coverage(components)
    share = 100.0 * licensed / total if total else 0.0
    return f"{licensed} of {total} components ({share:.1f}%) carry a licence"
