"""tests/shared.py, what the parallel suite stands on: a result is made once per run and a
failed one is not made again; a slot has at most its count of holders at once; every test
holds one of the machine's test slots."""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path

import pytest

from .shared import MACHINE_SLOTS, TESTS_AT_ONCE, once, run_root, slot


def test_once_makes_a_result_once_and_every_caller_reads_it(tmp_path_factory):
    name, calls = f"once-{uuid.uuid4().hex}", []

    def make(directory):
        calls.append(directory)
        (directory / "made").write_text("yes")

    first = once(tmp_path_factory, name, make)
    second = once(tmp_path_factory, name, make)
    assert first == second == run_root(tmp_path_factory) / "shared" / name
    assert len(calls) == 1 and (second / "made").read_text() == "yes"


def test_a_failed_result_fails_the_next_caller_with_its_message_without_making_it_again(tmp_path_factory):
    name, calls = f"once-{uuid.uuid4().hex}", []

    def make(directory):
        calls.append(directory)
        raise RuntimeError("the release failed: the registry is down")

    with pytest.raises(RuntimeError, match="registry is down"):
        once(tmp_path_factory, name, make)
    with pytest.raises(pytest.fail.Exception, match="failed in another worker:\nRuntimeError: the release failed"):
        once(tmp_path_factory, name, make)
    assert len(calls) == 1


def test_a_slot_has_at_most_its_count_of_holders(tmp_path_factory):
    name, lock = f"slot-{uuid.uuid4().hex}", threading.Lock()
    holding, most = [0], [0]

    def hold():
        with slot(tmp_path_factory, name, 2):
            with lock:
                holding[0] += 1
                most[0] = max(most[0], holding[0])
            time.sleep(0.3)
            with lock:
                holding[0] -= 1

    threads = [threading.Thread(target=hold) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 2 and holding[0] == 0


def _inodes_locked_by(pid: int) -> set[int]:
    """The inodes of the files `pid` holds a flock on (/proc/locks: ... PID MAJ:MIN:INODE ...)."""
    held = set()
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" not in fields and fields[1] == "FLOCK" and fields[4] == str(pid):
            held.add(int(fields[5].rsplit(":", 1)[1]))
    return held


def test_every_test_runs_holding_one_of_the_machine_s_test_slots():
    """tests/conftest.py wraps each test in one of TESTS_AT_ONCE machine-wide slots, so a
    second run of the suite on the machine shares the first one's load instead of doubling it."""
    slots = [MACHINE_SLOTS / f"test.{i}.lock" for i in range(TESTS_AT_ONCE)]
    mine = {p.stat().st_ino for p in slots if p.exists()} & _inodes_locked_by(os.getpid())
    assert len(mine) == 1, f"this test holds {len(mine)} of the machine's test slots, not one"


def test_a_port_forward_of_a_removed_container_is_found():
    """host_untouched's check, on the rules a fresh machine's first two containers left
    (iptables -t nat -S CNI-HOSTPORT-DNAT, 2026-12-02): stale unless its container exists."""
    from .conftest import stale_port_forwards

    gone, alive = "aa6d20a9948c4f8240edb3786d72a5ca2b5214d2fc0a1b5bf7d5e1c2e503a69e", "7bf700e0" + "7" * 56
    rules = "\n".join(
        [
            "-N CNI-HOSTPORT-DNAT",
            *(
                f'-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \\"podman\\" id: \\"{cid}\\"" '
                f"-m multiport --dports {port} -j CNI-DN-{cid[:21]}"
                for cid, port in ((gone, 35775), (alive, 35625))
            ),
        ]
    )
    assert stale_port_forwards(rules, [alive, "f" * 64]) == {gone}
    assert stale_port_forwards(rules, [alive, gone]) == set()
    assert stale_port_forwards("-N CNI-HOSTPORT-DNAT\n", []) == set()
