"""jsonschema's `iri` format checks, with their grammar built when first used.

jsonschema (4.26) imports rfc3987-syntax for the `iri` and `iri-reference` formats when it is
imported, and rfc3987-syntax 1.1.0 builds its Earley parsers at import: about 2 s of CPU in
every process that validates an SBOM or a request, although neither of ours holds a
value of those formats (the CycloneDX schema checks them on URLs and BOM links: external
references, licences, organisations, services, advisories; our SBOMs carry none).
`defer_iri_grammar()`, called before jsonschema is imported, puts a module in its place
whose `is_valid_syntax` imports the real one on its first call and hands every call to
it: the same checks, paid for only where an IRI is checked.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from collections.abc import Callable
from functools import cache

MODULE = "rfc3987_syntax"


@cache
def _real_check():
    """The real module's `is_valid_syntax` (its grammar built now)."""
    if isinstance(sys.modules.get(MODULE), _Deferred):
        del sys.modules[MODULE]
    return importlib.import_module(MODULE).is_valid_syntax


def is_valid_syntax(term: str, value: str) -> bool:
    return _real_check()(term, value)


class _Deferred(types.ModuleType):
    """Stands in for rfc3987_syntax until its check is first called."""

    is_valid_syntax: Callable[[str, str], bool]


def defer_iri_grammar() -> None:
    """Before jsonschema is imported: defer rfc3987-syntax's grammar (no-op when jsonschema
    is already imported, or the package is not installed, when jsonschema skips the formats)."""
    if MODULE in sys.modules or "jsonschema" in sys.modules or importlib.util.find_spec(MODULE) is None:
        return
    stand_in = _Deferred(MODULE, __doc__)
    stand_in.is_valid_syntax = is_valid_syntax
    sys.modules[MODULE] = stand_in
