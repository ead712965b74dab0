"""`pipeline setup` makes rootful podman's network-namespace directory a shared mount point
once, before containers start side by side (pipeline/runtime/hosttools.py): podman's own
check-then-bind-mount, run by two containers at the same moment on a new machine, left one
container's port forward behind. Each test runs in a mount namespace of its own, on a
directory of its own: the host's /run/netns is never touched."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.root]

REPO = Path(__file__).resolve().parents[2]


def _in_own_mount_namespace(code: str) -> list[str]:
    out = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


_REPORT = r"""
from pipeline.runtime import hosttools as h
d = {d!r}
def mounts():
    return sum(1 for line in open('/proc/self/mountinfo') if line.split()[4].replace(r'\040', ' ') == d)
{before}
print(h._propagation(d), h.shared_netns_dir(d), h._propagation(d), mounts(), h.shared_netns_dir(d), mounts())
"""


def test_a_new_directory_becomes_one_shared_mount_point_and_stays_one(tmp_path):
    d = tmp_path / "net ns"  # a space: mountinfo escapes it
    assert _in_own_mount_namespace(_REPORT.format(d=str(d), before="")) == ["None", "True", "shared", "1", "False", "1"]


def test_a_private_mount_point_is_made_shared_without_a_second_bind(tmp_path):
    d = tmp_path / "netns"
    d.mkdir()
    before = "import subprocess; subprocess.run(['mount', '--bind', d, d], check=True)"
    assert _in_own_mount_namespace(_REPORT.format(d=str(d), before=before)) == [
        "private",
        "True",
        "shared",
        "1",
        "False",
        "1",
    ]
