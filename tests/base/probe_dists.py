"""Which installed distributions a process has imported (stdlib only)."""

from __future__ import annotations

import importlib.metadata
import sys


def loaded_distributions() -> list[str]:
    """Names of the installed distributions whose top-level modules are imported now."""
    by_module = importlib.metadata.packages_distributions()
    names: set[str] = set()
    for module in list(sys.modules):
        for dist in by_module.get(module.split(".", 1)[0], ()):
            names.add(importlib.metadata.metadata(dist)["Name"])
    return sorted(names)
