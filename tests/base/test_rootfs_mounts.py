"""mmdebstrap's mounts never reach the host, and a rootfs tree with mounts in it is never
removed: `rm -r` of a tree with the host's /dev bound into it empties the host's /dev/shm.

Each test mounts only in a mount namespace of its own (`unshare --mount`): the host's
mount table is never changed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pipeline.config import REPO_ROOT
from pipeline.image import base

pytestmark = [pytest.mark.root]

_IN_A_NAMESPACE = textwrap.dedent("""
    import json, subprocess, sys
    from pathlib import Path
    from pipeline.errors import ReleaseError
    from pipeline.image import base
    tree = Path(sys.argv[1])
    (tree / "dev").mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(tree / "dev")], check=True)
    (tree / "dev" / "keep").write_text("host device files stand here")
    seen = {"mounts": base.mounts_under(tree)}
    try:
        base.remove_tree(tree)
        seen["refused"] = None
    except ReleaseError as exc:
        seen["refused"] = str(exc)
    seen["kept"] = (tree / "dev" / "keep").exists()
    subprocess.run(["umount", str(tree / "dev")], check=True)
    base.remove_tree(tree)
    seen["removed_after_umount"] = not tree.exists()
    print(json.dumps(seen))
""")


def test_a_tree_with_a_mount_in_it_is_refused_and_kept(tmp_path):
    tree = tmp_path / "odd name\twith tab" / "rootfs.partial"
    out = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", sys.executable, "-c", _IN_A_NAMESPACE, str(tree)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen["mounts"] == [str(tree / "dev")]
    assert seen["refused"] and "has mounts in it" in seen["refused"] and "umount -R" in seen["refused"]
    assert seen["kept"] and seen["removed_after_umount"]


def test_a_tree_without_mounts_is_removed(tmp_path):
    tree = tmp_path / "rootfs"
    (tree / "dev").mkdir(parents=True)
    (tree / "dev" / "null").write_text("")
    assert base.mounts_under(tree) == []
    base.remove_tree(tree)
    assert not tree.exists()


def _children(pid: int) -> list[int]:
    """`pid`'s descendants now (a process that ends while it is read has none)."""
    found = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in children:
            found += [int(child), *_children(int(child))]
    return found


@pytest.mark.slow
def test_a_killed_mmdebstrap_leaves_no_mount_on_the_host(tmp_path, monkeypatch):
    """mmdebstrap mounts /dev, /proc and /sys into its target: in its own mount
    namespace, which the host never sees and which goes with it when it is killed. Its
    temporary files (a gpg home) are beside the tree, not in /tmp, where a killed build
    would leave them for good; the next build removes them."""
    cache = tmp_path / "rootfs"
    code = (
        "import sys; from pathlib import Path; from pipeline.image import base; "
        "base.rootfs(base.BaseSpec(), Path(sys.argv[1]), use_cache=False).__enter__()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(cache)],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 600
        inside: list[str] = []
        while not inside:
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "mmdebstrap mounted nothing in 10 minutes"
            inside = [m for pid in _children(proc.pid) for m in base.mounts_under(cache, pid)]
            assert base.mounts_under(cache) == [], "mmdebstrap's mounts are in the host's namespace"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    assert base.mounts_under(cache) == []
    [scratch] = cache.glob("*.tmp")
    assert list(scratch.glob("mmdebstrap.gpghome.*")), (
        f"mmdebstrap's temporary files are not in {scratch}: {sorted(p.name for p in scratch.iterdir())}"
    )
    # The next build starts from neither the killed one's tree nor its temporary files
    # (mmdebstrap itself is played here: what is checked is what rootfs() leaves around it).
    seen: list[list[str]] = []

    def mmdebstrap(spec: base.BaseSpec, target: Path, scratch_dir: Path) -> None:
        seen.append(sorted(p.name for p in scratch_dir.iterdir()) + (["partial"] if target.exists() else []))
        target.mkdir()
        target.with_name(target.name + ".Packages").write_text("")

    monkeypatch.setattr(base, "_mmdebstrap", mmdebstrap)
    with base.rootfs(base.BaseSpec(), cache, use_cache=False) as tree:
        assert tree.is_dir()
    assert seen == [[]], f"the next build found the killed one's files: {seen}"
    assert not list(cache.glob("*.tmp")) and not list(cache.glob("*.partial"))
