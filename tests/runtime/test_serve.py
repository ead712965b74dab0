"""`python -m pipeline serve`: the built image by default; host mode from a root-only copy."""

from __future__ import annotations

import os
import stat

import pytest

import env.__main__ as env_cli
from pipeline.verify import serve
from pipeline.config import REPO_ROOT
from pipeline.errors import ConfigError


def test_without_a_build_record_it_says_to_build_first(tmp_path):
    with pytest.raises(ConfigError, match="nox -s build"):
        serve.built_image(tmp_path / "build.json")




def test_host_mode_serves_a_copy_uid_2000_cannot_read(tmp_path):
    os.chmod(tmp_path, 0o755)
    copy = serve.root_only_copy(REPO_ROOT / "env", tmp_path / "app" / "env")
    os.chmod(tmp_path / "app", 0o700)
    for directory, _, files in os.walk(copy):
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
        for name in files:
            assert stat.S_IMODE(os.stat(os.path.join(directory, name)).st_mode) == 0o600
    assert not env_cli.readable_by(copy / "families" / "__init__.py", 2000, 2000)
    assert not env_cli.readable_by(copy / "server" / "app.py", 2000, 2000)
