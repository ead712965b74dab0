"""The wire schema: ``ShellAction`` and ``ShellObservation`` (docs/spec/environment.md,
"Schema").

Every image of a release serves one schema: the MiMo repair images' own, field for
field, description for description (``pipeline/checks/release_schema.json``, from
docs/spec/mimo.md). So the classes carry no docstrings (pydantic would publish them as
schema descriptions) and no prose of this environment's own; its limits (the 12,000-byte
output tail, 16 actions per episode) are behaviour, documented in INSTRUCTIONS.md and
docs/spec/environment.md, not schema.
"""

from __future__ import annotations

from typing import Literal

from openenv.core.env_server.types import Action, Observation
from pydantic import Field

MAX_COMMAND_CHARS = 16_000
MAX_OUTPUT_CHARS = 16_000


# Extra fields are refused (``extra="forbid"`` inherited from Action).
class ShellAction(Action):
    operation: Literal["shell", "finish"] = Field(description="Run a bash command or finish and grade the repository.")
    command: str = Field(
        default="", max_length=MAX_COMMAND_CHARS, description="Bash command; each call starts in the task repository."
    )


class ShellObservation(Observation):
    task_id: str
    output: str = Field(max_length=MAX_OUTPUT_CHARS)
    exit_code: int | None = None
