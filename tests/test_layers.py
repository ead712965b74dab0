"""The layers contract: every module under pipeline/ imports only from its own floor of
`pipeline.LAYERS` or a lower one, so data flows one way (issue 13).

Read from the source with `ast` (function-level imports included), not by importing.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

from pipeline import LAYERS

PACKAGE = Path(__file__).resolve().parent.parent / "pipeline"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def floor(module: str) -> int:
    """Index in LAYERS of the longest prefix naming `module`."""
    best, best_len = None, -1
    for index, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best_len:
                best, best_len = index, len(name)
    if best is None:
        raise AssertionError(f"{module} is on no floor of pipeline.LAYERS: add it there")
    return best


def imported(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Every pipeline module `tree` imports (relative imports resolved)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "pipeline")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "pipeline":
                continue
            for alias in node.names:
                # `from pipeline.records import attest` imports the submodule attest.
                sub = f"{target}.{alias.name}"
                found.add(sub if _is_module(sub) else target)
    return found


def _is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def violations(root: Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root)
        tree = ast.parse(path.read_text(), filename=str(path))
        mine = floor(module)
        for target in sorted(imported(tree, module, path.name == "__init__.py")):
            if floor(target) > mine:
                found.append(f"{module} (floor {mine}) imports {target} (floor {floor(target)})")
    return found


def planted(tmp_path: Path, package: str, text: str) -> Path:
    """A copy of pipeline/ with `text` planted as <package>/planted.py."""
    copy = tmp_path / "pipeline"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / package / "planted.py").write_text(text)
    return copy


def test_every_module_imports_only_its_own_or_lower_floors() -> None:
    assert violations() == []


def test_every_module_is_on_a_floor() -> None:
    for path in PACKAGE.rglob("*.py"):
        floor(module_name(path, PACKAGE))


@pytest.mark.parametrize(
    "statement",
    [
        "from pipeline.release import release",
        "from pipeline import release",
        "import pipeline.records.attest",
        "def late():\n    from ..records import sbom\n",
    ],
)
def test_an_upward_import_is_caught(tmp_path: Path, statement: str) -> None:
    """Teeth: a copy of pipeline/ with one upward import planted in image/ fails."""
    found = violations(planted(tmp_path, "image", statement + "\n"))
    assert len(found) == 1 and found[0].startswith("pipeline.image.planted "), found


# ------------------------------------------------------------------ the profile is resolved once

# The floors below the orchestration: they receive a resolved plan's values (pipeline.plan)
# and never name a profile, look one up or read release.toml's profile tables.
STAGES = (
    "pipeline.sources",
    "pipeline.image",
    "pipeline.registry",
    "pipeline.runtime",
    "pipeline.checks",
    "pipeline.records",
)
PROFILE_LOOKUPS = {"profile", "profiles", "sources_for", "Profile"}


def profile_lookups(root: Path = PACKAGE) -> list[str]:
    """Each place a stage module calls `.profile(...)` / `.sources_for(...)`, names the
    `Profile` record, or reads the "profiles" table of release.toml."""
    found = []
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root)
        if not module.startswith(STAGES):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            what = None
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("profile", "sources_for")
            ):
                what = f".{node.func.attr}(...)"
            elif (
                isinstance(node, (ast.Name, ast.Attribute))
                and (node.id if isinstance(node, ast.Name) else node.attr) == "Profile"
            ):
                what = "Profile"
            elif isinstance(node, ast.alias) and node.name.split(".")[-1] == "Profile":
                what = "import Profile"
            elif isinstance(node, ast.Constant) and node.value == "profiles":
                what = '"profiles"'
            if what:
                found.append(f"{module}:{node.lineno if hasattr(node, 'lineno') else '?'} {what}")
    return found


def test_no_stage_looks_a_profile_up() -> None:
    assert profile_lookups() == []


@pytest.mark.parametrize(
    "statement",
    [
        "def f(cfg):\n    return cfg.profile('local')\n",
        "def f(cfg, p):\n    return cfg.sources_for(p)\n",
        "from pipeline.config import Profile\n",
        "def f(cfg):\n    return cfg.raw['profiles']\n",
    ],
)
def test_a_profile_lookup_in_a_stage_is_caught(tmp_path: Path, statement: str) -> None:
    """Teeth: a copy of pipeline/ with one profile lookup planted in records/ fails."""
    found = profile_lookups(planted(tmp_path, "records", statement))
    assert len(found) == 1 and found[0].startswith("pipeline.records.planted:"), found
