"""mmdebstrap runs with the system's PATH, whatever the caller's: it runs `python3
mmtarfilter` for each .deb, and apt and dpkg run maintainer scripts, which must be
Debian's tools, not the first `python3` or `bash` a user's PATH offers (pyenv's shims)."""

from __future__ import annotations

from pathlib import Path

from pipeline.image import base


def test_mmdebstrap_gets_the_system_path_not_the_callers(tmp_path, monkeypatch):
    shims = tmp_path / "shims"
    shims.mkdir()
    monkeypatch.setenv("PATH", f"{shims}:/usr/bin:/bin")
    calls = []
    monkeypatch.setattr(base._proc, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(base._proc, "run", lambda argv, **kwargs: calls.append((argv, kwargs)))
    base._mmdebstrap(base.BaseSpec(), tmp_path / "rootfs", tmp_path / "rootfs.tmp")
    ((argv, kwargs),) = calls
    assert argv[:2] == ["/usr/bin/unshare", "--mount"] and "/usr/bin/mmdebstrap" in argv
    assert kwargs["env"]["PATH"] == base.PATH_ENV
    assert str(shims) not in kwargs["env"]["PATH"]
    # Its temporary files beside the tree (the caller's TMPDIR, or /tmp, would keep a
    # killed build's for good).
    assert kwargs["env"]["TMPDIR"] == str(tmp_path / "rootfs.tmp")
    assert Path(argv[-2]) == tmp_path / "rootfs"
