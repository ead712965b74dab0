"""One independent solver per task family (docs/spec/families.md), shipped into the
container.

Each module here, with the shared `main` below, is a complete stdlib-only Python 3
program: run in a directory that holds the family's three input files, it writes
`answer.json` and prints the answer as one JSON line. They implement the family rules on their own and never import the
environment's task module, so they also solve a vendored upstream module's cases.
"""

from __future__ import annotations

import ast
import importlib
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from pipeline.curriculum import TASK_FAMILIES

# One solver per family of docs/spec/families.md.
FAMILIES = TASK_FAMILIES
# A shell action's command is capped at 16,000 characters (docs/spec/environment.md).
MAX_COMMAND_CHARS = 16_000
_HERE = Path(__file__).resolve().parent
# Every solver module defines FILES and solve(files); this is the program around them.
_MAIN = """
def main():
    files = {}
    for name in FILES:
        with open(name, encoding="utf-8") as f:
            files[name] = f.read()
    text = json.dumps(solve(files), sort_keys=True, separators=(",", ":"))
    with open("answer.json", "w", encoding="utf-8") as f:
        f.write(text)
    print(text)


main()
"""


def module(family: str) -> ModuleType:
    """The solver module of `family` (ValueError for an unknown family)."""
    if family not in FAMILIES:
        raise ValueError(f"no solver for family {family!r}")
    return importlib.import_module(f"{__name__}.{family}")


def input_files(family: str) -> tuple[str, ...]:
    """The three input file names the family's episodes carry."""
    return tuple(module(family).FILES)


def solve(family: str, files: dict[str, str]) -> dict[str, Any]:
    """Solve in-process from input texts (for tests; the suite runs `program` remotely)."""
    return module(family).solve(files)


def _strip_docstrings(source: str) -> str:
    # ast.unparse drops comments; docstrings are removed here so the program stays
    # well inside the command limit without changing what it does.
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            del body[0]  # node.body itself: ast.AST declares no `body`, its subclasses each do
            if not body:
                body.append(ast.Pass())
    return ast.unparse(tree) + "\n"


@cache
def program(family: str) -> str:
    """The solver's source, compacted, ready to send as `python3 -` standard input."""
    source = (_HERE / f"{module(family).__name__.rsplit('.', 1)[1]}.py").read_text(encoding="utf-8")
    return _strip_docstrings(source) + _MAIN


def shell_command(family: str) -> str:
    """A shell command that runs the solver in the current directory as the caller."""
    text = program(family)
    marker = "ARENA_SOLVER_EOF"
    command = f"python3 - <<'{marker}'\n{text}{marker}\n"
    if marker in text or len(command) > MAX_COMMAND_CHARS:
        raise ValueError(f"solver {family} does not fit one shell action ({len(command)} chars)")
    return command
