"""The wire schema the release declares (environment.md, "Schema"), and its comparison.

The expected schema comes from this declaration, not from the environment's code, so
`image/schema` catches an image whose models drifted from the contract.
"""

from __future__ import annotations

from typing import Any, Literal

from openenv.core.env_server.types import Action, Observation
from pydantic import Field

MAX_COMMAND_CHARS = 16_000
MAX_OUTPUT_CHARS = 16_000
# Human prose may be reworded freely; everything else in the schema is contract.
_PROSE = frozenset({"description", "title", "examples"})


class ShellAction(Action):
    operation: Literal["shell", "finish"]
    command: str = Field(default="", max_length=MAX_COMMAND_CHARS)


class ShellObservation(Observation):
    task_id: str
    output: str = Field(default="", max_length=MAX_OUTPUT_CHARS)
    exit_code: int | None = None


def _without_prose(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_prose(v) for k, v in node.items() if k not in _PROSE}
    if isinstance(node, list):
        return [_without_prose(v) for v in node]
    return node


def declared() -> dict[str, Any]:
    """{"action": ..., "observation": ...}: the JSON schemas the contract declares."""
    return {"action": ShellAction.model_json_schema(),
            "observation": ShellObservation.model_json_schema()}


def normalized(schema: dict[str, Any]) -> dict[str, Any]:
    """The action and observation schemas without prose, for equality checks."""
    return {k: _without_prose(schema.get(k)) for k in ("action", "observation")}


def example_actions() -> list[dict[str, Any]]:
    """Actions a trainer can send as they are (published in submission.json)."""
    return [
        {"operation": "shell", "command": "cat INSTRUCTIONS.md"},
        {"operation": "shell", "command": "ls -l && head -c 2000 *.json"},
    ]


def finish_action() -> dict[str, Any]:
    """The action that ends an episode and grades answer.json."""
    return {"operation": "finish", "command": ""}
