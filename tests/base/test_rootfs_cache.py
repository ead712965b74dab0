"""The rootfs cache is shared by every build on the machine that names it (a release, the
base tests, a README walk's clones): one holds a tree at a time, and a build that finds
another one's tree in the making waits for it instead of removing it.

No mmdebstrap runs here: the test plays the other build by holding the tree's lock."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time

import pytest

from pipeline.config import REPO_ROOT
from pipeline.image import base

_HOLDER = ("import sys; from pathlib import Path; from pipeline.image import base\n"
           "with base.rootfs(base.BaseSpec(), Path(sys.argv[1])) as tree:\n"
           "    print('got', tree, flush=True)\n")


def _wait_for(proc: subprocess.Popen, text: str) -> None:
    """Read the process's stderr up to a line with `text` (pytest-timeout bounds the wait)."""
    seen = []
    while not seen or text not in seen[-1]:
        line = proc.stderr.readline()
        assert line, f"exited {proc.wait()} without saying {text!r}: {''.join(seen)[-2000:]}"
        seen.append(line)


@pytest.mark.skipif(not shutil.which("mmdebstrap"), reason="the cache key names mmdebstrap's version")
def test_a_build_waits_for_the_tree_another_holds_and_then_reuses_it(tmp_path):
    cache = tmp_path / "rootfs"
    cache.mkdir()
    target = cache / base.BaseSpec().cache_key(base.mmdebstrap_version())
    partial = target.with_name(target.name + ".partial")
    (partial / "usr").mkdir(parents=True)
    (partial / "usr" / "being-written").write_text("the other build is still writing this tree")
    with open(target.with_name(target.name + ".lock"), "a") as other:
        fcntl.flock(other, fcntl.LOCK_EX)
        proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(cache)], cwd=REPO_ROOT,
                                env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            _wait_for(proc, "rootfs: waiting for another build that holds")
            time.sleep(0.5)
            assert proc.poll() is None and (partial / "usr" / "being-written").exists(), \
                "the waiting build touched the tree another build holds"
            # The other build finishes as rootfs() does: the tree in place, then its marker.
            os.replace(partial, target)
            target.with_name(target.name + ".complete").touch()
        except BaseException:
            proc.kill()
            raise
        finally:
            fcntl.flock(other, fcntl.LOCK_UN)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    assert f"rootfs: reusing {target}" in err and f"got {target}" in out
    assert (target / "usr" / "being-written").exists()
