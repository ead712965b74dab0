"""Load the task module that the server serves: the first-party families or a vendored file.

Both expose the same API (docs/spec/families.md): ``TASK_IDS``, ``DOMAINS``, ``make_task``,
``grade`` and ``oracle_answer``. A vendored file is loaded straight from its path, so
the image can carry it as a plain file next to its licence instead of as a package.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from types import ModuleType

FIRST_PARTY_MODULE = "env.families"
REQUIRED_CALLABLES = ("make_task", "grade", "oracle_answer")

# A vendored module is registered under this name so that code inside it that looks
# itself up in sys.modules (dataclasses, pickling) works as in a normal import.
VENDORED_MODULE_NAME = "arena_vendored_tasks"


class TaskModuleError(ValueError):
    """The task module could not be loaded or does not implement the families API."""

    def __init__(self, what: str, expected: str, actual: str, hint: str) -> None:
        super().__init__(f"{what}: expected {expected}, got {actual}; {hint}")
        self.what = what
        self.expected = expected
        self.actual = actual
        self.hint = hint


def load_task_module(path: str | os.PathLike[str] | None = None) -> ModuleType:
    """Return the validated task module at ``path``, or the first-party ``env.families``.

    Raises :class:`TaskModuleError` when the file is missing, fails to import, or lacks
    part of the API.
    """
    module = _import_file(os.fspath(path)) if path else importlib.import_module(FIRST_PARTY_MODULE)
    validate_task_module(module)
    return module


def validate_task_module(module: ModuleType) -> None:
    """Check that ``module`` has the families API; raise :class:`TaskModuleError` if not."""
    origin = getattr(module, "__file__", None) or module.__name__
    task_ids = getattr(module, "TASK_IDS", None)
    if not isinstance(task_ids, (list, tuple)) or not task_ids or not all(isinstance(t, str) for t in task_ids):
        raise TaskModuleError(
            f"task module {origin}: TASK_IDS",
            "a non-empty list of family names",
            repr(task_ids)[:200],
            "point the server at a file implementing the docs/spec/families.md API",
        )
    domains = getattr(module, "DOMAINS", None)
    if not isinstance(domains, dict) or set(domains) != set(task_ids):
        raise TaskModuleError(
            f"task module {origin}: DOMAINS",
            "a dict with one domain per TASK_IDS entry",
            repr(domains)[:200],
            "point the server at a file implementing the docs/spec/families.md API",
        )
    missing = [name for name in REQUIRED_CALLABLES if not callable(getattr(module, name, None))]
    if missing:
        raise TaskModuleError(
            f"task module {origin}",
            f"callables {', '.join(REQUIRED_CALLABLES)}",
            f"missing {', '.join(missing)}",
            "point the server at a file implementing the docs/spec/families.md API",
        )


def _import_file(path: str) -> ModuleType:
    if not os.path.isfile(path):
        raise TaskModuleError(
            "task module file",
            "an existing Python file",
            f"{path!r} does not exist or is not a file",
            "check --tasks / ARENA_TASKS_FILE",
        )
    spec = importlib.util.spec_from_file_location(VENDORED_MODULE_NAME, path)
    if spec is None or spec.loader is None:
        raise TaskModuleError(
            "task module file",
            "a Python source file",
            repr(path),
            "give the path of a .py file",
        )
    module = importlib.util.module_from_spec(spec)
    sys.modules[VENDORED_MODULE_NAME] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[VENDORED_MODULE_NAME]
        raise TaskModuleError(
            f"importing task module {path}",
            "a module that imports cleanly",
            f"{type(exc).__name__}: {exc}",
            "fix or replace the vendored file",
        ) from exc
    return module
