"""A stage's full disk is one NoSpace line (pipeline.release.Timings): the kernel's ENOSPC
with the file a copy was writing, a tool's own words, never a check's finding."""

from __future__ import annotations

import errno
import shutil

import pytest

from pipeline.errors import CheckFailure, NoSpace, ToolError
from pipeline.release import STAGE_NEEDS, Timings


def test_enospc_of_a_copy_names_the_directory_it_was_writing(tmp_path):
    timings = Timings(root=tmp_path)
    dest = tmp_path / "dist" / "oci" / "blobs" / "sha256"
    dest.mkdir(parents=True)
    err = OSError(errno.ENOSPC, "No space left on device")
    err.filename, err.filename2 = str(tmp_path / "cache" / "blob"), str(dest / ".x.1.tmp")
    with pytest.raises(NoSpace) as caught, timings.stage("build"):
        raise err
    line = caught.value.one_line()
    free = shutil.disk_usage(dest).free / 1e6
    assert line == (
        f"no space left on the file system of {dest} (the build stage: No space left on device); "
        f"expected about {STAGE_NEEDS['build'] / 1e6:,.0f} MB free, got {free:,.0f} MB free; "
        "free space on that file system (or put " + str(dest) + " on another one), then run again"
    )


def test_a_tools_full_disk_is_no_space_and_a_checks_finding_is_not(tmp_path):
    timings = Timings(root=tmp_path)
    with pytest.raises(NoSpace, match=r"of /var/lib/containers \(the verify stage: `podman pull"):
        with timings.stage("verify (anonymous pull + check suite)"):
            raise ToolError("`podman pull x` failed", actual="exit 125: writing blob: no space left on device")
    with pytest.raises(CheckFailure), timings.stage("verify (anonymous pull + check suite)"):
        raise CheckFailure("1 check(s) failed", actual="workspace/limit: No space left on device")
    with pytest.raises(OSError), timings.stage("build"):
        raise OSError(errno.EACCES, "Permission denied")
