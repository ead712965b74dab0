"""tests/runtime uses the base image of tests/base (built once, cached in .release/), and
runs the real server from this checkout's env/ on it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from pipeline.runtime import runtime
from pipeline.runtime.limits import ContainerLimits

from ..base.basefixtures import base_image  # noqa: F401  (a fixture)

REPO = Path(__file__).resolve().parents[2]
SERVE = ["/opt/arena-python/bin/python3", "-m", "env", "serve", "--host", "0.0.0.0", "--port", "8000"]
# The checkout's env/ holds no curriculum file (the release writes the image's): the one
# tests/conftest.py writes from release.toml's [curriculum] is mounted beside it.
CURRICULUM_IN_CONTAINER = "/opt/arena-curriculum.json"
MOUNT = [
    "--volume",
    f"{REPO / 'env'}:/opt/arena/env:ro",
    "--workdir",
    "/opt/arena",
    "--env",
    "PYTHONPATH=/opt/arena",
    "--volume",
    f"{os.environ['ARENA_CURRICULUM']}:{CURRICULUM_IN_CONTAINER}:ro",
    "--env",
    f"ARENA_CURRICULUM={CURRICULUM_IN_CONTAINER}",
]


@contextmanager
def checkout_servers(
    base, registry, count: int = 1, limits: ContainerLimits | None = None
) -> Iterator[list[runtime.Container]]:
    """`count` containers (started side by side) of the real server, this checkout's env/
    mounted read-only on the base image pulled from `registry`; removed on the way out."""
    rt = runtime.ContainerRuntime()
    image = rt.pull(base.pull_reference(registry.address))
    with ThreadPoolExecutor(count) as pool:
        futures = [pool.submit(rt.start, image, extra_args=MOUNT, command=SERVE, limits=limits) for _ in range(count)]
    started = [f.result() for f in futures if f.exception() is None]
    try:
        for f in futures:
            f.result()  # the first start that failed, after the ones that did not are in `started`
        yield started
    finally:
        for container in started:
            rt.remove(container)
