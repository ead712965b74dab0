"""The rootfs cache is shared by every build on the machine that names it (a release, the
base tests, a README walk's clones): one holds a tree at a time, and a build that finds
another one's tree in the making waits for it instead of removing it. A cached tree is
reused only with the content digest recorded for it (pipeline.image.rootfscache): a flipped
byte is caught and the tree made again.

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
from pipeline.image import base, rootfscache

_HOLDER = (
    "import sys; from pathlib import Path; from pipeline.image import base\n"
    "with base.rootfs(base.BaseSpec(), Path(sys.argv[1])) as tree:\n"
    "    print('got', tree, flush=True)\n"
)


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
        proc = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, str(cache)],
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            _wait_for(proc, "rootfs: waiting for another build that holds")
            time.sleep(0.5)
            assert proc.poll() is None and (partial / "usr" / "being-written").exists(), (
                "the waiting build touched the tree another build holds"
            )
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


def _tree(root):
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "usr" / "bin" / "python3").write_bytes(b"\x7fELF" + bytes(range(256)) * 64)
    (root / "etc").mkdir()
    (root / "etc" / "os-release").write_text("ID=debian\n")
    (root / "bin").symlink_to("usr/bin")
    os.mkfifo(root / "etc" / "initctl")
    return root


def test_a_cached_tree_is_reused_only_with_the_content_digest_recorded_for_it(tmp_path, capsys):
    target, marker, _ = rootfscache.paths(tmp_path, "key")
    _tree(target)
    marker.touch()  # as base.rootfs leaves it: no digest yet
    assert rootfscache.check(tmp_path, "key") == rootfscache.UNVERIFIED
    rootfscache.record(tmp_path, "key")  # the tree gave the pinned base
    assert marker.read_text().strip() == rootfscache.tree_digest(target)
    assert rootfscache.check(tmp_path, "key") == rootfscache.VERIFIED
    assert f"rootfs: cached tree {target} checked (content digest" in capsys.readouterr().err

    # One flipped byte in one file: the marker goes, so base.rootfs makes the tree again.
    data = bytearray((target / "usr" / "bin" / "python3").read_bytes())
    data[1000] ^= 0x01
    (target / "usr" / "bin" / "python3").write_bytes(bytes(data))
    assert rootfscache.check(tmp_path, "key") == rootfscache.DISCARDED
    assert not marker.exists()
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"rootfs: the cached tree {target} fails its check (content digest sha256:")
    assert err.endswith("discarded and rebuilt") and len(err.splitlines()) == 1
    assert rootfscache.check(tmp_path, "key") == rootfscache.ABSENT


@pytest.mark.parametrize("change", ["mode", "link", "added", "owner"])
def test_what_the_content_digest_covers(tmp_path, change):
    target, marker, _ = rootfscache.paths(tmp_path, "key")
    _tree(target)
    marker.write_text(rootfscache.tree_digest(target))
    if change == "mode":
        os.chmod(target / "etc" / "os-release", 0o600)
    elif change == "link":
        (target / "bin").unlink()
        (target / "bin").symlink_to("/usr/bin")
    elif change == "added":
        (target / "etc" / "extra").write_text("")
    else:
        os.chown(target / "etc" / "os-release", 1, 1)
    assert rootfscache.check(tmp_path, "key") == rootfscache.DISCARDED


def test_the_base_builder_code_is_unchanged_by_the_cache_check():
    """The check lives outside base.BUILDER_MODULES: adding it moved no builder hash, so the
    committed locks/base.json stays current."""
    assert "image/rootfscache.py" not in base.BUILDER_MODULES
    assert base.load_record().builder_sha256 == base.builder_sha256()


@pytest.mark.root
def test_mmdebstrap_is_not_started_without_room_for_the_rootfs(tmp_path):
    from pipeline import basestage
    from pipeline.errors import NoSpace

    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(small)], check=True)
    try:
        with pytest.raises(NoSpace) as err:
            basestage.check_rootfs_space(small / "rootfs")
    finally:
        subprocess.run(["umount", str(small)], check=True)
    line = err.value.one_line()
    assert line.startswith(f"no space left on the file system of {small / 'rootfs'} (mmdebstrap's rootfs")
    assert f"expected about {basestage.ROOTFS_NEED / 1e6:,.0f} MB free, got 2 MB free" in line
    assert "free space there" in line and "\n" not in line
