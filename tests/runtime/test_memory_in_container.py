"""Memory is the episode's and goes with it (docs/isolation.md), in a container with a 1 GiB
limit, as the image runs: an agent that fills every scratch tmpfs, starts small processes
and allocates until the OOM killer acts loses its own commands, never the sandbox's PID 1
nor the server; the answer it wrote before is graded; the next episode can use its memory
at once."""

from __future__ import annotations

import json

import pytest

from env.catalog import make_case, parse_case_id
from env.loader import load_task_module
from pipeline.checks.client import Session
from pipeline.runtime.limits import ContainerLimits
from tests.curriculum import all_cases

from .conftest import checkout_servers

pytestmark = [pytest.mark.root, pytest.mark.container, pytest.mark.slow]

MIB = 1 << 20
LIMITS = ContainerLimits(memory_bytes=1024 * MIB, pids=1024, cpus=1.0, workspace_bytes=256 * MIB)
CASE = all_cases()[2]

FLOOD = (
    "for d in /workspace/home /tmp /var/tmp /dev/shm; do head -c 2G /dev/zero > $d/fill 2>/dev/null; done; "
    "for i in $(seq 40); do sleep 100 & done; "
    "python3 -c 'a = []\nwhile True: a.append(bytearray(16 << 20))'; echo flood-rc=$?"
)


@pytest.fixture(scope="module")
def server(base_image, local_registry):
    with checkout_servers(base_image, local_registry, 1, LIMITS) as (container,):
        yield container


def test_a_memory_flood_kills_the_agents_commands_not_the_episode(server):
    tasks = load_task_module()
    answer = json.dumps(tasks.oracle_answer(make_case(tasks, parse_case_id(CASE.id))))
    with Session(server.url) as session:
        session.reset(CASE.id, seed=1)
        assert session.shell(f"cat > answer.json <<'EOF'\n{answer}\nEOF").exit_code == 0
        flooded = session.shell(FLOOD)
        assert "flood-rc=137" in flooded.output, flooded.output  # the allocating command, killed
        after = session.shell("echo alive")
        assert (after.exit_code, after.output.strip()) == (0, "alive"), after.output
        assert session.finish().reward == 1.0
        session.reset(CASE.id, seed=2)
        at_once = session.shell("python3 -c 'b = bytearray(600 << 20); print(len(b) >> 20)'")
        assert at_once.output.strip() == "600", at_once.output
