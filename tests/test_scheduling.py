"""tests/scheduling.py: the controller's scheduler, driven as xdist drives it (add the nodes,
their collections, schedule, then a completion at a time) with stand-in worker handles: the
scheduler only sends them test indexes and shutdowns."""

from __future__ import annotations

from types import SimpleNamespace

from xdist.scheduler import LoadGroupScheduling

from .scheduling import SlowAwareScheduling, write_slow

SLOW = ["t.py::release_a", "t.py::release_b", "t.py::release_c", "t.py::release_d"]
FAST = [f"t.py::unit_{i}" for i in range(8)]
# The collection in tests/conftest.py's order: the slow tests first.
COLLECTION = SLOW + FAST


class Worker:
    """What the scheduler calls on a worker: it runs the tests it was sent, in order."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.sent: list[int] = []
        self.done = 0

    def send_runtest_some(self, indexes) -> None:
        self.sent += list(indexes)

    def shutdown(self) -> None:
        self.shutting_down = True

    def queued(self) -> list[str]:
        return [COLLECTION[i] for i in self.sent[self.done :]]


def _config(workers: int):
    return SimpleNamespace(
        getvalue=lambda name: [f"{workers}*popen"] if name == "tx" else None,
        option=SimpleNamespace(loadscopereorder=False),
    )


def _started(cls, tmp_path, workers: int = 2):
    sched = cls(_config(workers), None, tmp_path) if cls is SlowAwareScheduling else cls(_config(workers))
    nodes = [Worker(f"gw{i}") for i in range(workers)]
    for node in nodes:
        sched.add_node(node)
        sched.add_node_collection(node, COLLECTION)
    sched.schedule()
    return sched, nodes


def _complete(sched, node: Worker) -> str:
    index = node.sent[node.done]
    node.done += 1
    sched.mark_test_complete(node, index)
    return COLLECTION[index]


def test_a_worker_on_a_slow_test_queues_a_fast_one_and_the_slow_ones_wait_for_a_free_worker(tmp_path):
    write_slow(tmp_path, SLOW)
    sched, (a, b) = _started(SlowAwareScheduling, tmp_path)
    # Each worker runs a slow test and has one fast test queued behind it, not more.
    assert a.queued() == ["t.py::release_a", "t.py::unit_0"]
    assert b.queued() == ["t.py::release_b", "t.py::unit_1"]
    # a finishes its release: it runs unit_0 and gets the next release queued behind it.
    _complete(sched, a)
    assert a.queued() == ["t.py::unit_0", "t.py::release_c"]
    # a runs unit_0, then release_c: again one fast test behind it.
    _complete(sched, a)
    assert a.queued() == ["t.py::release_c", "t.py::unit_2"]


GROUP = [f"m.py::shares_a_fixture_{i}@m.py" for i in range(3)]  # one unit: a module's group


def test_at_the_end_of_a_group_no_release_is_queued_behind_it(tmp_path):
    """The hoarding it prevents: loadgroup as it comes tops a worker up while it has two
    tests pending, so the end of a group (three slow tests of one module here) collects two
    releases behind it, which then wait for that worker alone. With the scheduler, the
    group's last test has one fast test behind it, and the releases stay queued."""
    collection = GROUP + SLOW + FAST
    write_slow(tmp_path, [n.split("@")[0] for n in GROUP] + SLOW)
    queued = {}
    for cls in (LoadGroupScheduling, SlowAwareScheduling):
        sched = cls(_config(2), None, tmp_path) if cls is SlowAwareScheduling else cls(_config(2))
        a, b = Worker("gw0"), Worker("gw1")
        for node in (a, b):
            sched.add_node(node)
            sched.add_node_collection(node, collection)
        sched.schedule()
        for _ in range(2):  # a runs the group's first two tests; b is still on its release
            a.done += 1
            sched.mark_test_complete(a, a.sent[a.done - 1])
        queued[cls.__name__] = [collection[i] for i in a.sent[a.done :]]
    assert queued["LoadGroupScheduling"] == [GROUP[2], "t.py::release_c", "t.py::release_d"]
    assert queued["SlowAwareScheduling"] == [GROUP[2], "t.py::unit_1"]  # b holds unit_0


def test_every_test_runs_once_and_the_workers_are_shut_down_at_the_end(tmp_path):
    write_slow(tmp_path, SLOW)
    sched, nodes = _started(SlowAwareScheduling, tmp_path, workers=3)
    ran: list[str] = []
    while any(node.done < len(node.sent) for node in nodes):
        for node in nodes:
            if node.done < len(node.sent):
                ran.append(_complete(sched, node))
    assert sorted(ran) == sorted(COLLECTION)
    assert all(node.shutting_down for node in nodes)


def test_a_grouped_test_is_known_as_slow_by_its_id_without_the_group(tmp_path):
    write_slow(tmp_path, ["t.py::test_x[a@b]", "t.py::test_y"])
    sched = SlowAwareScheduling(_config(1), None, tmp_path)
    assert sched._is_slow("t.py::test_y@t.py") and sched._is_slow("t.py::test_x[a@b]")
    assert not sched._is_slow("t.py::test_z@t.py")


def test_with_no_record_of_slow_tests_it_keeps_the_order_one_unit_ahead(tmp_path):
    sched, (a, b) = _started(SlowAwareScheduling, tmp_path)
    assert len(a.queued()) == len(b.queued()) == 2
    assert a.queued()[0] == "t.py::release_a" and a.queued()[1] == "t.py::release_c"
