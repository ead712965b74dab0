"""The licences the SBOM gives its components, each read from what the image itself says.

- A Python distribution: its core metadata: `License-Expression`; else the `License` field
  when the library's factory reads it as an SPDX id or expression; else the licence its
  `License :: ...` classifiers name when they map to one SPDX id unambiguously; else the
  `License` field as a name, else the classifier's name.
- A Debian package: its copyright file, `/usr/share/doc/<package>/copyright`, when that
  file is machine-readable (DEP-5, Debian's copyright-format 1.0), read with
  python-debian's own parser: the licence of its header and of every `Files` paragraph,
  in order. A free-form copyright file gives no licence: which of the texts it quotes
  covers the package cannot be read from it reliably, and none is guessed.
- A file of the application: the licence its source pins (release.toml, pyproject.toml).

Every value goes through cyclonedx-python-lib's own licence factory and comes out as
that decides: an SPDX licence id, a valid SPDX expression, or a named licence. Debian's
`GPL-2+` stays the name `GPL-2+`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from email.message import Message

# The copyright file of an installed package, relative to the image root.
COPYRIGHT = "usr/share/doc/{package}/copyright"
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
    paragraphs = [parsed.header, *parsed.all_files_paragraphs()]
    for paragraph in paragraphs:
        lic = paragraph.license
        synopsis = (lic.synopsis or "").strip() if lic is not None else ""
        if synopsis and synopsis not in found:
            found.append(synopsis)
    return tuple(found)


def cyclonedx_licenses(values: Iterable[str | None]) -> list:
    """The CycloneDX licences of one component, each value made by the library's factory.

    CycloneDX has a component carry either licences (ids and names) or one expression:
    one value stays what the factory makes of it; among several, a value the factory
    reads as an expression is kept as a named licence (its text unchanged)."""
    from cyclonedx.contrib.license.factories import LicenseFactory
    from cyclonedx.model.license import LicenseExpression

    factory = LicenseFactory()
    wanted = [v.strip() for v in values if v and v.strip()]
    made = [factory.make_from_string(v) for v in dict.fromkeys(wanted)]
    if len(made) <= 1:
        return made
    return [factory.make_with_name(m.value) if isinstance(m, LicenseExpression) else m for m in made]


def coverage(components: Sequence[dict]) -> tuple[int, int]:
    """(components with a licence, components) of a CycloneDX document's component list."""
    return sum(1 for c in components if c.get("licenses")), len(components)


def coverage_line(components: Sequence[dict]) -> str:
    """`152 of 159 components (95.6%) carry a licence`: the figure the release reports."""
    licensed, total = coverage(components)
    share = 100.0 * licensed / total if total else 0.0
    return f"{licensed} of {total} components ({share:.1f}%) carry a licence"
