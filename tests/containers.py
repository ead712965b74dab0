"""Which containers a pipeline process started, when other processes start some too.

The pipeline labels every container it starts as the pipeline's (`runtime.LABEL`) and
with its adapter's own session; a test that runs `python -m pipeline ...` in a child
process cannot know that session. Tests run beside other tests (xdist workers, a
second run of the suite on the same machine), so "pipeline containers that were not
there before" may be anyone's. A `ContainerScope` gives the child an extra label of
its own through `RELEASE_RUNTIME_RUN_ARGS` (this machine's run flags from release.toml,
plus `--label`), and lists exactly the containers that carry it.
"""

from __future__ import annotations

import shlex
import uuid
from dataclasses import dataclass

from pipeline.verify.runtime import ContainerRuntime

SCOPE_LABEL = "org.openenv-arena.test.scope"


# Every scope a test made: tests/conftest.py removes their containers after each test, so
# that a test stopped mid-run (its timeout kills the pipeline process it waited for, which
# then cannot remove its own) leaves none behind.
MADE: list[ContainerScope] = []


@dataclass(frozen=True)
class ContainerScope:
    label: str

    @classmethod
    def new(cls) -> ContainerScope:
        scope = cls(f"{SCOPE_LABEL}={uuid.uuid4().hex}")
        MADE.append(scope)
        return scope

    def env(self) -> dict[str, str]:
        """Environment for a pipeline process whose containers must carry this scope's label."""
        run_args = ContainerRuntime().args.run_args
        return {"RELEASE_RUNTIME_RUN_ARGS": shlex.join([*run_args, "--label", self.label])}

    def containers(self) -> list[str]:
        """IDs of the containers (running or not) that carry this scope's label."""
        rt = ContainerRuntime()
        out = rt._cli("ps", "--all", "--no-trunc", "--filter", f"label={self.label}", "--format", "{{.ID}}")
        return sorted(line.strip() for line in out.stdout.decode().splitlines() if line.strip())

    def remove(self) -> list[str]:
        """Remove every container that carries this scope's label; their IDs."""
        found = self.containers()
        if found:
            ContainerRuntime()._cli("rm", "--force", *found, check=False)
        return found
