"""docs/release-toml.md, generated from the model of release.toml and trust.toml (pipeline.config).

Every table is a model of pipeline.config and every key one of its fields: the page lists
each table (its docstring), each key with its TOML type, whether it is required, its
description, its value rule (`Gt(0)` as "> 0") and its default. Regenerate it with
`python -m pipeline.configschema > docs/release-toml.md`; tests/test_configschema.py fails
when the committed page is not the generated one.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

from annotated_types import Ge, Gt, Le, Lt
from pydantic_core import PydanticUndefined

from pipeline.config import DOC_PAGE, FILES, Table, kind_of

__all__ = ["DOC_PAGE", "markdown"]

_RULE = {Gt: (">", "gt"), Ge: (">=", "ge"), Lt: ("<", "lt"), Le: ("<=", "le")}


def _doc(table: type[Table]) -> str:
    return " ".join(inspect.cleandoc(table.__doc__ or "").split())


def _rules(field: Any) -> list[str]:
    out = []
    for meta in field.metadata:
        for kind, (sign, attr) in _RULE.items():
            if isinstance(meta, kind):
                out.append(f"{sign} {getattr(meta, attr)}")
    return out


def _default(value: Any) -> str | None:
    """A default as the page states it ("when absent"); None: the description says it."""
    if value is None or isinstance(value, (Table, dict)):
        return None
    if value == ():
        return "none"
    if isinstance(value, tuple):
        return "[" + ", ".join(str(_default(v)) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _description(field: Any) -> str:
    text = field.description or ""
    rules = _rules(field)
    if rules:  # inside the description's closing parenthesis, if it ends with one
        text = f"{text[:-1]}; {', '.join(rules)})" if text.endswith(")") else f"{text} ({', '.join(rules)})"
    if field.default is not PydanticUndefined and "absent" not in text:
        shown = _default(field.default)
        if shown is not None:
            text += f"; {shown} when absent"
    return text


def _sections(table: type[Table], path: str, out: list[tuple[str, type[Table]]]) -> None:
    """(heading, table) of `table` and every table below it, depth first in key order."""
    out.append((path, table))
    for key, (_, field) in table.keys().items():
        kind = kind_of(field)
        if kind.table is None:
            continue
        sub = f"{path}.{key}" if path else key
        if kind.many:
            _sections(kind.table, f"[{sub}]", out)
        elif kind.placeholder:
            _sections(kind.table, f"{sub}.<{kind.placeholder}>", out)
        else:
            _sections(kind.table, sub, out)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown() -> str:
    """docs/release-toml.md: every table of both files, its keys, their types and meaning."""
    lines = [
        "# release.toml and trust.toml",
        "",
        "<!-- Generated from the model in pipeline/config.py by `python -m pipeline.configschema > "
        "docs/release-toml.md`; do not edit by hand (tests/test_configschema.py checks it). -->",
        "",
        "Both files are validated whole when they are loaded, before a command does anything: an "
        "unknown (misspelt) key, a missing required key, a value of the wrong type or one that "
        "breaks its rule (a range, a sha256 of 64 lowercase hex digits, a profile's `tasks` naming "
        "a source, ...) is refused with one line naming the file, the key, the expected and actual "
        "value and, for a typo, the nearest valid key. `<name>` and `<profile>` stand for a "
        "profile's name.",
    ]
    for file, model in FILES.items():
        lines += ["", f"## {file}", ""]
        sections: list[tuple[str, type[Table]]] = []
        _sections(model, "", sections)
        headings: dict[type[Table], list[str]] = {}
        for heading, table in sections:
            headings.setdefault(table, []).append(heading)
        done: set[type[Table]] = set()
        for heading, table in sections:
            if table in done:
                continue
            done.add(table)
            if heading:
                lines += ["", "### " + ", ".join(f"`[{h}]`" for h in headings[table]), ""]
            lines += [_doc(table), "", "| key | type | required or optional | description |", "|---|---|---|---|"]
            lines += [
                f"| `{key}` | {kind_of(field).name} | {'required' if field.is_required() else 'optional'} "
                f"| {_cell(_description(field))} |"
                for key, (_, field) in table.keys().items()
            ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
