"""The wire schema: ``ShellAction`` and ``ShellObservation`` (environment.md, "Schema")."""

from __future__ import annotations

from typing import Literal

from openenv.core.env_server.types import Action, Observation
from pydantic import Field

MAX_COMMAND_CHARS = 16_000
MAX_OUTPUT_CHARS = 16_000


class ShellAction(Action):
    """Run a shell command in /workspace/repo, or finish the episode and grade it.

    Extra fields are refused (inherited ``extra="forbid"``).
    """

    operation: Literal["shell", "finish"] = Field(
        description='"shell" runs `command` as UID 2000; "finish" grades answer.json now'
    )
    command: str = Field(
        default="",
        max_length=MAX_COMMAND_CHARS,
        description="The shell command (bash -c), used by the shell operation",
    )


class ShellObservation(Observation):
    """What the agent sees after reset or an action (plus OpenEnv's done/reward/metadata)."""

    task_id: str = Field(description="The curriculum case of this episode")
    output: str = Field(
        default="",
        max_length=MAX_OUTPUT_CHARS,
        description="Instructions (reset), command output (shell) or the grading verdict",
    )
    exit_code: int | None = Field(
        default=None, description="Exit code of the shell command; null when none ran"
    )
