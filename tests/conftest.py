"""Fixtures shared by every test area.

`local_registry`: one real registry (docker-registry behind nginx, as
`pipeline.registry.local` runs it) for the whole test session, in a temporary
directory, stopped at the end. It exposes `.address` ("127.0.0.1:PORT"), `.user`,
`.password`, `.storage` (the registry's filesystem storage) and `.url`.

`hub_standin`: a loopback stand-in of the huggingface.co endpoints the dataset publication
uses (tests/hub_standin.py); `.url` is what HF_ENDPOINT points at, `.token` the HF_TOKEN it
accepts; `create_repo(id)` makes the dataset repository a release publishes to.

`host_untouched` (autouse, session): the environment server adds the sandbox user and
rebuilds /workspace wherever it runs, so every test must run it in a container or a
namespace. The whole session fails if the host's user database or /workspace changed, or
if a container removed during the session left its port forward behind (a CNI DNAT rule
of a container that no longer exists: it takes a loopback port from every later server).

The suite runs in pytest-xdist workers (pyproject.toml's addopts: `-n`, `--dist
loadgroup`); `-n 0` runs it in this process. Each worker is a session of its own, with
its own registry, temporary directories and container labels; what several workers
read is made once per run (tests/shared.py). `pytest_collection_modifyitems` decides
where and when tests run, from what they declare, not from a list of names:

- the tests of a module that use a module-scoped fixture run in one worker (an
  `xdist_group` named after the module), so that the fixture (a server, a container,
  a pull) is made once, as its scope says; a fixture that may be made in several
  workers is session-scoped (once per worker) or shared (tests/shared.py);
- a test that needs the base image (`base_image`: mmdebstrap, minutes in a fresh clone)
  is marked `slow`, whatever its own module says;
- the long waits start first: the end-to-end releases, then the other slow tests, then
  the container and root tests, then the rest (a test finds its place by being marked
  honestly);
- the controller's scheduler (tests/scheduling.py) queues one unit per worker and gives a
  worker busy with a slow test a fast one, so slow tests never wait behind each other on
  one worker while others are free.

The terminal summary ends with the tests, then the modules, that spent the most CPU (a
worker's own, its waited-for children's and its forked servers', from setup to teardown;
containers' processes are podman's children and not counted, nor the worker's forkserver's
one import of the server stack): on two cores, CPU, not waiting, is what bounds the wall
time.
"""

from __future__ import annotations

import gc
import os
import re
import resource
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from env.server.mcp import skip_openenv_mcp_tools
from pipeline.registry import local as localregistry

from . import containers, forked_server, scheduling
from .curriculum import serve_the_declared_curriculum
from .hub_standin import HubStandin
from .shared import per_test_slot, run_root

serve_the_declared_curriculum()
# Before any test module imports openenv-core: the servers a worker runs in-process
# stand in for its MCP environment module as the image's server does (env/server/serve.py),
# and the checks' client does the same (pipeline/checks/client.py); loading the real one
# (fastmcp, mcp) cost every worker over a second of CPU.
skip_openenv_mcp_tools()


@pytest.fixture(scope="session")
def local_registry(tmp_path_factory):
    root = tmp_path_factory.mktemp("registry")
    state = localregistry.start(root)
    try:
        yield state
    finally:
        localregistry.stop(root)


@pytest.fixture
def hub_standin():
    with HubStandin() as hub:
        yield hub


_HOST_FILES = (Path("/etc/passwd"), Path("/etc/group"), Path("/etc/shadow"))


def _host_state() -> dict[str, object]:
    state: dict[str, object] = {str(p): p.read_bytes() if p.exists() else None for p in _HOST_FILES}
    workspace = Path("/workspace")
    state["/workspace"] = sorted(x.name for x in workspace.iterdir()) if workspace.is_dir() else None
    return state


def stale_port_forwards(rules: str, alive: list[str]) -> set[str]:
    """The container ids that `iptables -t nat -S CNI-HOSTPORT-DNAT` (`rules`) forwards a
    port to and that are not among the `alive` ones (`podman ps -a --no-trunc`)."""
    return set(re.findall(r'id: \\?"([0-9a-f]{64})', rules)) - set(alive)


def _stale_port_forwards() -> set[str]:
    """This machine's stale port forwards: twice, two seconds apart (a container being
    removed between the two listings is not one)."""
    if shutil.which("iptables") is None or shutil.which("podman") is None:
        return set()

    def once() -> set[str]:
        rules = subprocess.run(
            ["iptables", "-w", "-t", "nat", "-S", "CNI-HOSTPORT-DNAT"], capture_output=True, text=True
        ).stdout
        if "id:" not in rules:
            return set()
        alive = subprocess.run(
            ["podman", "ps", "-a", "--no-trunc", "--format", "{{.ID}}"], capture_output=True, text=True
        ).stdout.split()
        return stale_port_forwards(rules, alive)

    first = once()
    if not first:
        return first
    time.sleep(2)
    return first & once()


@pytest.fixture(scope="session", autouse=True)
def host_untouched():
    before, stale = _host_state(), _stale_port_forwards()
    yield
    after = _host_state()
    changed = sorted(k for k in before if before[k] != after[k])
    assert not changed, (
        f"the tests changed the host: {', '.join(changed)} (run the environment server contained: tests/contained.py)"
    )
    left = sorted(_stale_port_forwards() - stale)
    assert not left, (
        f"containers removed during the tests left their port forwards behind "
        f"(iptables -t nat -S CNI-HOSTPORT-DNAT): {', '.join(i[:12] for i in left)}"
    )


_PER_MODULE = ("module", "class", "package")


def _fixture_defs(item: pytest.Item) -> list:
    info = getattr(item, "_fixtureinfo", None)
    return [defs[-1] for defs in info.name2fixturedefs.values() if defs] if info is not None else []


def _shares_a_module_fixture(item: pytest.Item) -> bool:
    return any(d.scope in _PER_MODULE for d in _fixture_defs(item))


def _shared_results(item: pytest.Item) -> set[tuple[str, str]]:
    """The `@shared_result` fixtures (tests/shared.py) this test needs, by the function
    that makes each (a fixture imported into several modules is still one result)."""
    return {
        (d.func.__module__, d.func.__qualname__) for d in _fixture_defs(item) if getattr(d.func, "shared_result", False)
    }


def _start_ranks(items: list[pytest.Item]) -> dict[str, int]:
    """When each test starts, the longest waits first:

    0. the first test that needs each shared result (it starts making it), and the tests
       marked `first` (the longest, which would otherwise end the run alone);
    1. slow tests that need no shared result (nothing to wait for);
    2. slow tests that need a shared release (the longest chain: the base, a release,
       then the test; they wait for the release a test of rank 0 is making);
    3. slow tests that need the base image only;
    4. container and root tests; 5. the rest.
    Within a rank, end-to-end tests first, then the collection order (modules put their
    longest tests first).
    """
    ranks: dict[str, tuple[int, bool]] = {}
    started: set[tuple[str, str]] = set()
    for item in items:
        needs = _shared_results(item)
        if needs - started or item.get_closest_marker("first"):
            started |= needs
            rank = 0
        elif item.get_closest_marker("slow"):
            rank = 1 if not needs else 3 if {name for _, name in needs} == {"base_image"} else 2
        elif item.get_closest_marker("container") or item.get_closest_marker("root"):
            rank = 4
        else:
            rank = 5
        ranks[item.nodeid] = (rank, item.get_closest_marker("e2e") is None)
    return ranks


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "base_image" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
        if _shares_a_module_fixture(item) and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    ranks = _start_ranks(items)
    # A stable sort: within a rank, the collection order (module by module) is kept.
    items.sort(key=lambda item: ranks[item.nodeid])
    if os.environ.get("PYTEST_XDIST_WORKER"):  # for the controller's scheduler (tests/scheduling.py)
        scheduling.write_slow(
            run_root(config._tmp_path_factory), (item.nodeid for item in items if item.get_closest_marker("slow"))
        )


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getoption("dist") == "loadgroup":
        return scheduling.SlowAwareScheduling(config, log, run_root=config._tmp_path_factory.getbasetemp())
    return None


def pytest_collection_finish(session: pytest.Session) -> None:
    # What a worker has imported by now (the pipeline, sigstore, openenv-core, the test
    # modules: about a million objects) lives as long as the worker. Frozen, it is left
    # out of the collector's full passes, which otherwise walked all of it again every
    # few thousand allocations and five times at the end of each worker.
    gc.freeze()


_CPU_START = pytest.StashKey[float]()
_CPU_SPENT: dict[str, float] = {}
CPU_SHOWN = 20


def _cpu_now() -> float:
    mine, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    # Servers forked from the worker's forkserver are its children, not the worker's: they
    # say what they used when they end (tests/forked_server.py).
    return mine.ru_utime + mine.ru_stime + children.ru_utime + children.ru_stime + forked_server.ended_cpu_s


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    # Outside pytest-timeout's hook: a test's time starts once it holds its slot.
    with per_test_slot():
        item.stash[_CPU_START] = _cpu_now()
        yield


@pytest.fixture(autouse=True)
def _scoped_containers_removed():
    """After each test, the containers of the ContainerScopes it made are removed (a test
    that ran to its end has already checked there are none)."""
    before = len(containers.MADE)
    yield
    for scope in containers.MADE[before:]:
        scope.remove()
    del containers.MADE[before:]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    outcome = yield
    if call.when == "teardown" and _CPU_START in item.stash:
        outcome.get_result().user_properties.append(("cpu_s", _cpu_now() - item.stash[_CPU_START]))


def pytest_runtest_logreport(report) -> None:
    # In the controller too: xdist sends each report's user_properties with it.
    if report.when == "teardown":
        for key, value in report.user_properties:
            if key == "cpu_s":
                _CPU_SPENT[report.nodeid] = float(value)


_IMAGES_BEFORE = pytest.StashKey[set]()


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # the run's controller (or the one process)
        session.config.stash[_IMAGES_BEFORE] = containers.loopback_images()


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _IMAGES_BEFORE in session.config.stash:
        containers.remove_images_left_by(session.config.stash[_IMAGES_BEFORE])


def pytest_terminal_summary(terminalreporter) -> None:
    if not _CPU_SPENT:
        return
    total = sum(_CPU_SPENT.values())
    terminalreporter.write_sep(
        "=",
        f"the {CPU_SHOWN} tests that spent the most CPU ({total / 60:.1f} CPU-minutes in all {len(_CPU_SPENT)} tests)",
    )
    for nodeid, spent in sorted(_CPU_SPENT.items(), key=lambda kv: -kv[1])[:CPU_SHOWN]:
        terminalreporter.write_line(f"{spent:8.1f} s  {nodeid}")
    # Many small tests add up too: the same by module.
    modules: dict[str, list[float]] = {}
    for nodeid, spent in _CPU_SPENT.items():
        modules.setdefault(nodeid.split("::", 1)[0], []).append(spent)
    terminalreporter.write_sep("=", f"the {CPU_SHOWN} modules that spent the most CPU")
    for module, spent in sorted(modules.items(), key=lambda kv: -sum(kv[1]))[:CPU_SHOWN]:
        terminalreporter.write_line(f"{sum(spent):8.1f} s  {module} ({len(spent)} tests)")
