"""The CPython 3.12 runtime lock (the arena base's interpreter): the same distributions
and versions as the 3.11 lock, each pinned to a wheel 3.12 installs."""

from __future__ import annotations

import pytest
from packaging.utils import canonicalize_name

from pipeline.errors import ConfigError
from pipeline.sources import lock


def test_cp312_lock_pins_runtime_in_at_the_same_versions():
    lock.check_versions(lock.load_lock(lock.CP312.lock), lock.load_lock())
    pins = {(p.key, p.version) for p in lock.read_pins()}
    assert {(canonicalize_name(w.name), w.version) for w in lock.load_lock(lock.CP312.lock).wheels} == pins


def test_a_lock_drifting_from_the_other_is_refused(tmp_path):
    drifted = tmp_path / "runtime-cp312.txt"
    drifted.write_text(lock.CP312.lock.read_text().replace("uvicorn==0.54.0", "uvicorn==0.53.0"))
    with pytest.raises(ConfigError, match="pin different distributions") as info:
        lock.check_versions(lock.load_lock(drifted), lock.load_lock())
    assert "uvicorn" in info.value.one_line()


def test_every_cp312_wheel_installs_on_cpython_312():
    wheels = lock.fetch(lock.load_lock(lock.CP312.lock), python=lock.CP312)
    for wheel in wheels:  # name-version-PYTHON-ABI-PLATFORM.whl
        python, abi = wheel.name[:-4].rsplit("-", 3)[1:3]
        assert python in ("py3", "py2.py3") or python == "cp312" or abi == "abi3", wheel.name
