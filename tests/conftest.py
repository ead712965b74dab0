"""Fixtures shared by every test area.

`local_registry`: one real registry (docker-registry behind nginx, as
`pipeline.registry.local` runs it) for the whole test session, in a temporary
directory, stopped at the end. It exposes `.address` ("127.0.0.1:PORT"), `.user`,
`.password`, `.storage` (the registry's filesystem storage) and `.url`.
"""

from __future__ import annotations

import pytest

from pipeline.registry import local as localregistry


@pytest.fixture(scope="session")
def local_registry(tmp_path_factory):
    root = tmp_path_factory.mktemp("registry")
    state = localregistry.start(root)
    try:
        yield state
    finally:
        localregistry.stop(root)
