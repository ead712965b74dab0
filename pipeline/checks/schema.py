"""The one wire schema of every image of the release, and its comparison.

`release_schema.json` is the action and observation schema the MiMo repair images
serve (docs/spec/mimo.md, "The one schema of all three images"): the request carries it
once for every task, so every image, procedural and external, must serve exactly it,
descriptions and `required` lists included. The expected schema comes from this file,
not from the environment's code, so `image/schema` catches an image whose models
drifted from the contract.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

MAX_COMMAND_CHARS = 16_000
MAX_OUTPUT_CHARS = 16_000
SCHEMA_FILE = Path(__file__).with_name("release_schema.json")
PARTS = ("action", "observation")


@lru_cache(maxsize=1)
def _declared_text() -> str:
    return SCHEMA_FILE.read_text(encoding="utf-8")


def declared() -> dict[str, Any]:
    """{"action": ..., "observation": ...}: the JSON schemas of the release (a fresh copy)."""
    return json.loads(_declared_text())


def served_parts(schema: dict[str, Any]) -> dict[str, Any]:
    """The action and observation parts of a served `GET /schema` body."""
    return {k: schema.get(k) for k in PARTS}


def first_difference(got: Any, want: Any, path: str = "") -> str | None:
    """Where `got` first differs from `want` (JSON equality, key order ignored), as
    "<path>: expected X, got Y"; None when equal."""
    if isinstance(want, dict) and isinstance(got, dict):
        for key in list(want) + [k for k in got if k not in want]:
            if key not in got:
                return f"{path}/{key}: expected {json.dumps(want[key])[:200]}, got nothing"
            if key not in want:
                return f"{path}/{key}: expected nothing, got {json.dumps(got[key])[:200]}"
            found = first_difference(got[key], want[key], f"{path}/{key}")
            if found:
                return found
        return None
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return f"{path}: expected {len(want)} items, got {len(got)}"
        for i, (g, w) in enumerate(zip(got, want)):
            found = first_difference(g, w, f"{path}/{i}")
            if found:
                return found
        return None
    if type(got) is not type(want) or got != want:
        return f"{path or '/'}: expected {json.dumps(want)[:200]}, got {json.dumps(got)[:200]}"
    return None


def example_actions() -> list[dict[str, Any]]:
    """Actions a trainer can send as they are (published in submission.json)."""
    return [
        {"operation": "shell", "command": "cat INSTRUCTIONS.md"},
        {"operation": "shell", "command": "ls -l && head -c 2000 *.json"},
    ]


def finish_action() -> dict[str, Any]:
    """The action that ends an episode and grades it."""
    return {"operation": "finish"}
