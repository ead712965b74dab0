"""The budget as container limits, in force and holding: two containers of the real
server side by side, one attacked (fork bomb, memory hog, disk fill), the other fine.

Small limits stand in for the release's (16 GiB would be a risk to the test machine),
and every exhaustion test first confirms, from inside as UID 2000, that the limit it
pushes against is in force: without it the test fails before pushing.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipeline.checks._record import Recorder
from pipeline.checks.client import Session
from pipeline.checks.limit_checks import LIMIT_CHECKS, limit_checks
from pipeline.config import load
from pipeline.runtime.limits import GIB, ContainerLimits
from tests.curriculum import all_cases

from .conftest import checkout_servers

# `slow` where the base image is needed (tests/conftest.py marks those).
pytestmark = [pytest.mark.root, pytest.mark.container]

MIB = 1 << 20
LIMITS = ContainerLimits(memory_bytes=512 * MIB, pids=600, cpus=1.0, workspace_bytes=64 * MIB)
CASE = all_cases()[0]


def test_budgets_become_run_arguments():
    budgets = (
        load().budgets["procedural"].model_copy(update={"memory_gib": 16, "cpu_floor_vcpus": 2, "workspace_gib": 10})
    )
    limits = ContainerLimits.from_budgets(budgets)
    args = limits.run_args()
    assert args[:8] == [
        "--memory",
        str(16 * GIB),
        "--memory-swap",
        str(16 * GIB),
        "--pids-limit",
        "1024",
        "--cpus",
        "2",
    ]
    assert f"/workspace:rw,size={10 * GIB},mode=0755" in args
    uidmap = args[args.index("--uidmap") + 1].split(":")
    assert uidmap[0] == "0" and int(uidmap[1]) >= 1 << 22 and uidmap[2] == "65536"
    # /proc unmasked only with that user namespace (docs/isolation.md).
    assert args[args.index("--security-opt") + 1] == "unmask=/proc/*"
    assert "--security-opt" not in replace(limits, own_user_namespace=False).run_args()
    assert limits.expected() == {"memory_bytes": 16 * GIB, "pids": 1024, "cpus": 2.0, "workspace_bytes": 10 * GIB}


@pytest.fixture(scope="module")
def pair(base_image, local_registry):
    """Two limited containers of the real server (the checkout's env/ on the base image)."""
    with checkout_servers(base_image, local_registry, 2, LIMITS) as started:
        yield started


def _in_force(session: Session) -> dict[str, bool]:
    rec = Recorder("image")
    limit_checks(session, CASE, 1, LIMITS.expected(), rec)
    return {r.id.split("/", 1)[1]: r.passed for r in rec.results}


def test_every_limit_is_in_force_as_uid_2000(pair):
    for container in pair:
        with Session(container.url) as session:
            assert _in_force(session) == dict.fromkeys(LIMIT_CHECKS, True)


def test_the_limit_checks_fail_on_an_unlimited_container(base_image, local_registry):
    with checkout_servers(base_image, local_registry) as (bare,), Session(bare.url) as session:
        assert _in_force(session) == dict.fromkeys(LIMIT_CHECKS, False)


BOMB = (
    "python3 -c 'import os, time\n"
    "n = 0\n"
    "while n < 5000:\n"
    "    try:\n"
    "        pid = os.fork()\n"
    "    except OSError:\n"
    "        break\n"
    "    if pid == 0:\n"
    "        time.sleep(60)\n"
    "        os._exit(0)\n"
    "    n += 1\n"
    'print("forked", n)\''
)
FORK_50 = (
    "python3 -c 'import os\n"
    "pids = [os.fork() or os._exit(0) for _ in range(50)]\n"
    "[os.waitpid(p, 0) for p in pids]\n"
    'print("fifty ok")\''
)


def test_a_fork_bomb_in_one_container_leaves_the_other_working(pair):
    attacked, neighbour = pair
    with Session(attacked.url) as bomb_side, Session(neighbour.url) as other:
        assert _in_force(bomb_side)["limit-pids"] and _in_force(other)["limit-pids"]
        bomb_side.reset(CASE.id, seed=2)
        out = bomb_side.shell(BOMB)
        assert "forked" in out.output, out.output
        other.reset(CASE.id, seed=3)
        assert "fifty ok" in other.shell(FORK_50).output
        bomb_side.reset(CASE.id, seed=4)
        assert "fifty ok" in bomb_side.shell(FORK_50).output


HOG = (
    "for i in 1 2 3; do python3 -c 'x = bytearray(300 * 1024 * 1024); import time; time.sleep(5)' & done; "
    "wait; echo hog-done"
)


def test_a_memory_hog_is_killed_inside_its_container_and_the_server_lives(pair):
    attacked, neighbour = pair
    with Session(attacked.url) as hog_side, Session(neighbour.url) as other:
        assert _in_force(hog_side)["limit-memory"]
        hog_side.reset(CASE.id, seed=5)
        out = hog_side.shell(HOG)
        assert "hog-done" in out.output  # the shell went on after the OOM killer
        assert "Killed" in out.output or out.exit_code != 0, out.output
        assert "alive" in hog_side.shell("echo alive").output
        other.reset(CASE.id, seed=6)
        assert "alive" in other.shell("echo alive").output


def test_a_disk_fill_stops_at_the_workspace_size(pair):
    attacked, neighbour = pair
    with Session(attacked.url) as fill_side, Session(neighbour.url) as other:
        assert _in_force(fill_side)["limit-workspace"]
        fill_side.reset(CASE.id, seed=7)
        out = fill_side.shell("head -c 100M /dev/zero > fill; echo status=$?; du -m fill")
        assert "No space left" in out.output and "status=1" in out.output, out.output
        other.reset(CASE.id, seed=8)
        assert "wrote" in other.shell("head -c 10M /dev/zero > ok && echo wrote").output
        fill_side.reset(CASE.id, seed=9)
        # The 64 MiB are free again: only the case's small input files are left.
        assert int(fill_side.shell("du -sk /workspace | cut -f1").output) < 1024
