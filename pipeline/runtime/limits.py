"""The release's budget as container limits: memory, process count, CPUs, workspace size.

`ContainerLimits.from_budgets` turns a `[budgets.*]` table into what the container
runtime applies (`run_args`): a memory cgroup limit without extra swap, a pids cgroup
limit, a CPU quota, /workspace as a size-limited tmpfs, and a user namespace of its
own so that UID 2000 in one container is a different host UID from UID 2000 in
another (RLIMIT_NPROC counts processes per host UID: without it a fork bomb in one
container would starve the sandbox of every other). The check suite reads the same
record (`expected`) to verify, from inside the container as UID 2000, that each
limit is in force (pipeline/checks/limit_checks.py).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from pipeline.config import Budgets
from pipeline.errors import ConfigError

GIB = 1 << 30
# Processes of a whole container (the server's threads included); the sandbox itself
# is held lower by its RLIMIT_NPROC (env/server/shell.py), so the server keeps room.
DEFAULT_PIDS = 1024
WORKSPACE = "/workspace"
# Host UID ranges for the containers' user namespaces: 65,536 IDs each, picked at
# random above everything a distribution allocates (and below 2^31).
_USERNS_SIZE = 65_536
_USERNS_FIRST_BLOCK = 64  # host UID 4,194,304
_USERNS_BLOCKS = 30_000


@dataclass(frozen=True)
class ContainerLimits:
    """What one container may use; every field is enforced by the kernel, not trusted."""

    memory_bytes: int
    pids: int
    cpus: float
    workspace_bytes: int
    own_user_namespace: bool = True

    @classmethod
    def from_budgets(cls, budgets: Budgets, *, pids: int = DEFAULT_PIDS) -> ContainerLimits:
        """memory_gib, cpu_floor_vcpus and workspace_gib of a `[budgets.*]` table."""
        values = budgets.values
        limits = cls(
            memory_bytes=values["memory_gib"] * GIB,
            pids=pids,
            cpus=float(values["cpu_floor_vcpus"]),
            workspace_bytes=values["workspace_gib"] * GIB,
        )
        if min(limits.memory_bytes, limits.pids, limits.cpus, limits.workspace_bytes) <= 0:
            raise ConfigError("every container limit must be positive", actual=limits)
        return limits

    def run_args(self) -> list[str]:
        """Arguments of `podman run` / `docker run` applying these limits."""
        args = [
            "--memory",
            str(self.memory_bytes),
            "--memory-swap",
            str(self.memory_bytes),
            "--pids-limit",
            str(self.pids),
            "--cpus",
            f"{self.cpus:g}",
            "--tmpfs",
            f"{WORKSPACE}:rw,size={self.workspace_bytes},mode=0755",
        ]
        if self.own_user_namespace:
            base = (_USERNS_FIRST_BLOCK + secrets.randbelow(_USERNS_BLOCKS)) * _USERNS_SIZE
            args += ["--uidmap", f"0:{base}:{_USERNS_SIZE}", "--gidmap", f"0:{base}:{_USERNS_SIZE}"]
            # Its root is no host root, so /proc's masks can be lifted without giving it
            # anything of the host's: the server can then give each episode a /proc of its
            # own PID namespace (docs/isolation.md). Never without the user namespace.
            args += ["--security-opt", "unmask=/proc/*"]
        return args

    def expected(self) -> dict[str, int | float]:
        """The values the suite must find in force inside the container."""
        return {
            "memory_bytes": self.memory_bytes,
            "pids": self.pids,
            "cpus": self.cpus,
            "workspace_bytes": self.workspace_bytes,
        }


@dataclass(frozen=True)
class ExternalLimits:
    """The external budget as the seed release ran the repair images: `--cpus 2
    --memory 16g` (docs/spec/mimo.md, "The 12 repair checks per image"), memory without
    extra swap. Nothing else: the unchanged image keeps its own filesystem (its workspace is
    in the writable layer, which is measured) and its own user IDs."""

    memory_bytes: int
    cpus: float

    @classmethod
    def from_budgets(cls, budgets: Budgets) -> ExternalLimits:
        """memory_gib and cpu_floor_vcpus of `[budgets.external]`."""
        values = budgets.values
        limits = cls(memory_bytes=values["memory_gib"] * GIB, cpus=float(values["cpu_floor_vcpus"]))
        if min(limits.memory_bytes, limits.cpus) <= 0:
            raise ConfigError("every container limit must be positive", actual=limits)
        return limits

    def run_args(self) -> list[str]:
        return ["--memory", str(self.memory_bytes), "--memory-swap", str(self.memory_bytes), "--cpus", f"{self.cpus:g}"]
