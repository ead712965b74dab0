"""The audit's own checks of the SBOM, apart from the code that writes it.

`sbom/components` regenerates the SBOM with the SBOM writer, so it would repeat any
mistake the writer makes. These checks do not use the writer's judgement:

- every licence is checked with the `license-expression` library's SPDX licensing: an
  expression parses and names only SPDX licences and exceptions (or `LicenseRef-`
  references; the one check of an expression, `sbom_licenses.expression_problem`, which
  judges the library's verdict, not the writer's), an id is one SPDX licence, a name is a
  non-empty text;
- every package the image's files say is installed has a component: each package
  dpkg's database lists as installed (`/var/lib/dpkg/status`, and the one-paragraph
  files of `/var/lib/dpkg/status.d/`), each Python distribution with metadata anywhere in
  the image (`*.dist-info/METADATA`, `*.egg-info`), and each file of the application
  directory; and no component names a package the image does not hold.

The layers are applied with the image reader (whiteouts, digests); which of their files
mean an installed package is decided here.
"""

from __future__ import annotations

import email.parser
import posixpath
from collections.abc import Callable, Iterator

from packaging.utils import canonicalize_name

from pipeline.errors import VerificationError
from pipeline.formats import deb822_paragraphs, dpkg_installed
from pipeline.image.oci.files import FileView, LayoutImage, read_view
from pipeline.records.sbom_licenses import expression_problem

_STATUS = "var/lib/dpkg/status"
_STATUS_D = "var/lib/dpkg/status.d/"


# ------------------------------------------------------------------ licences


def _licence_entries(doc: dict) -> Iterator[tuple[str, object]]:
    """(where, entry) for every entry of every `licenses` list of the document."""

    def walk(component: object, where: str) -> Iterator[tuple[str, object]]:
        if not isinstance(component, dict):
            return
        name = component.get("bom-ref") or component.get("name") or where
        for entry in component.get("licenses") or []:
            yield str(name), entry
        for i, child in enumerate(component.get("components") or []):
            yield from walk(child, f"{where}.components[{i}]")

    meta = doc.get("metadata") or {}
    for entry in meta.get("licenses") or []:
        yield "metadata", entry
    yield from walk(meta.get("component"), "metadata.component")
    for i, component in enumerate(doc.get("components") or []):
        yield from walk(component, f"components[{i}]")


def _id_problem(licensing, value: object) -> str | None:
    from license_expression import ExpressionError, LicenseSymbol

    if not isinstance(value, str):
        return f"id {value!r} is not a string"
    try:
        parsed = licensing.parse(value, strict=True)
    except ExpressionError as exc:
        return f"id {value!r} is not an SPDX licence id: {exc}"
    if not isinstance(parsed, LicenseSymbol) or licensing.unknown_license_keys(parsed):
        return f"id {value!r} is not one SPDX licence id"
    return None


def licence_problems(doc: dict) -> list[str]:
    """What is wrong with the document's licences, one line each (none: all are valid)."""
    from license_expression import get_spdx_licensing

    licensing = get_spdx_licensing()
    problems = []
    for where, entry in _licence_entries(doc):
        problem = None
        if isinstance(entry, dict) and "expression" in entry:
            problem = expression_problem(entry["expression"])
        elif isinstance(entry, dict) and isinstance(entry.get("license"), dict):
            lic = entry["license"]
            if "id" in lic:
                problem = _id_problem(licensing, lic["id"])
            elif not isinstance(lic.get("name"), str) or not lic["name"].strip():
                problem = "a licence with neither an id nor a name"
        else:
            problem = f"licence entry {entry!r} is neither a licence nor an expression"
        if problem is not None:
            problems.append(f"{where}: {problem}")
    return problems


def check_licences(doc: dict) -> None:
    """Raise unless every licence of the SBOM is valid SPDX (license-expression's reading)."""
    problems = licence_problems(doc)
    if problems:
        raise VerificationError(
            f"{len(problems)} licence(s) of the SBOM are not valid SPDX (license-expression)",
            expected="SPDX ids, SPDX expressions or named licences",
            actual="; ".join(problems[:3]),
            hint="a licence that is not an SPDX id or expression belongs in the licence's `name`",
        )


# ------------------------------------------------------------------ coverage


def coverage_paths(app_dir: str) -> Callable[[str], bool]:
    """The image paths the coverage check reads (relative, no leading slash)."""
    app = app_dir.strip("/") + "/"

    def keep(path: str) -> bool:
        return (
            path == _STATUS
            or path.startswith(_STATUS_D)
            or path.startswith(app)
            or path.endswith(".dist-info/METADATA")
            or path.endswith(".egg-info")
            or path.endswith(".egg-info/PKG-INFO")
        )

    return keep


def installed(view: FileView, app_dir: str) -> set[tuple[str, str, str]]:
    """(kind, name, version) of everything the image's files say is installed: `deb`
    packages, `pypi` distributions (normalized names) and the application's `file`s."""
    found: set[tuple[str, str, str]] = set()
    status = view.read(_STATUS)
    paragraphs = dpkg_installed(status.decode(errors="replace")) if status is not None else []
    for path in sorted(p for p in view.files if p.startswith(_STATUS_D)):
        paragraphs += [p for p in deb822_paragraphs(view.files[path].decode(errors="replace")) if "Package" in p]
    found |= {("deb", p["Package"], p.get("Version", "")) for p in paragraphs}
    app = app_dir.strip("/") + "/"
    for path, data in view.files.items():
        if path.startswith(app):
            found.add(("file", "/" + path, ""))
        elif path.endswith(("/METADATA", "/PKG-INFO", ".egg-info")):
            meta = email.parser.BytesHeaderParser().parsebytes(data)
            name = (meta.get("Name") or posixpath.basename(posixpath.dirname(path))).strip()
            found.add(("pypi", canonicalize_name(name), (meta.get("Version") or "").strip()))
    return found


def listed(doc: dict) -> set[tuple[str, str, str]]:
    """(kind, name, version) of the SBOM's components, read from their package URLs."""
    from packageurl import PackageURL

    found: set[tuple[str, str, str]] = set()
    for component in doc.get("components") or []:
        if component.get("type") == "file":
            found.add(("file", str(component.get("name")), ""))
            continue
        purl = component.get("purl")
        if not purl:
            continue
        parsed = PackageURL.from_string(purl)
        name = canonicalize_name(parsed.name) if parsed.type == "pypi" else parsed.name
        found.add((parsed.type, name, parsed.version or ""))
    return found


def _names(items: set[tuple[str, str, str]]) -> str:
    shown = sorted(items)
    text = ", ".join(f"{k} {n}{' ' + v if v else ''}" for k, n, v in shown[:5])
    return text + (f" and {len(shown) - 5} more" if len(shown) > 5 else "")


def check_coverage(doc: dict, image: LayoutImage, app_dir: str, read: FileView | None = None) -> None:
    """Raise unless the SBOM has a component for everything installed in the image, and
    none for anything the image does not hold. `read`: the image's files already read
    with a keep that holds `coverage_paths` (else the layers are read here)."""
    keep = coverage_paths(app_dir)
    view = read.only(keep) if read is not None else read_view(image, keep)
    want, have = installed(view, app_dir), listed(doc)
    missing, extra = want - have, {x for x in have - want if x[0] in ("deb", "pypi", "file")}
    if missing:
        raise VerificationError(
            f"the SBOM has no component for {len(missing)} package(s) or file(s) installed in the image",
            expected="a component for every dpkg package, Python distribution and application file",
            actual=_names(missing),
            hint="regenerate the SBOM from the image: python -m pipeline sbom",
        )
    if extra:
        raise VerificationError(
            f"the SBOM lists {len(extra)} component(s) the image does not hold",
            expected="only what the image's layers install",
            actual=_names(extra),
        )
