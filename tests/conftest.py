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
namespace. The whole session fails if the host's user database or /workspace changed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.registry import local as localregistry

from .hub_standin import HubStandin


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


@pytest.fixture(scope="session", autouse=True)
def host_untouched():
    before = _host_state()
    yield
    after = _host_state()
    changed = sorted(k for k in before if before[k] != after[k])
    assert not changed, (f"the tests changed the host: {', '.join(changed)} (run the environment "
                         "server contained: tests/contained.py)")
