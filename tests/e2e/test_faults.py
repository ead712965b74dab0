"""The fault matrix of issue 49, with real releases in fresh clones: SIGKILL at stage
boundaries (through RELEASE_TEST_PAUSE_AT, pipeline/runs.py), in the middle of the check
suite and inside the install of the records; corrupt base blobs in the cache, in dist/oci
and in the local registry's storage; a flipped byte in the base's rootfs cache; temporary
files of dead processes; a full disk; a registry that stops answering. For
each: the tracked records stay byte-identical to the committed ones (or, once the install's
journal is written, become a completed release's whole set), the next run says what it
cleaned up and converges to the same image digest, and nothing is left running.

The early kills cost seconds each (the base is seeded, nothing is built twice); the
boundaries past the check suite are passed by one release held at each in turn and killed at
the last, so the suite runs once for all of them; each test makes one release whole at its
end. The install's own kill points, every path of it, are
covered fast with real files in tests/attest/test_install.py, the rootfs cache's digest in
tests/base/test_rootfs_cache.py, the registry client's stall, error page and full disk in
tests/registry/test_faults.py."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pipeline import runs
from pipeline.image import base, rootfscache
from pipeline.records import install
from pipeline.registry import local as localregistry
from pipeline.runtime import dockerd

from ..base.basefixtures import base_image  # noqa: F401  (a fixture)
from ..containers import ContainerScope
from ..shared import suite_slot
from .test_release import _clone, _env, pipeline, records_digest

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.root, pytest.mark.container]

TRACKED = ("provenance.json", "submission.json", "attestations")


def _release(
    clone: Path,
    scope: ContainerScope,
    *,
    pause: str | tuple[str, ...] | None = None,
    until: str | None = None,
    on_the_way: Callable[[str], None] | None = None,
    timeout: float = 900,
) -> str:
    """Run `pipeline release` in `clone`; with `pause` (a RELEASE_TEST_PAUSE_AT point) or
    `until` (text of a stderr line), SIGKILL it there. With several points, the release is
    killed at the last; at each one before it, `on_the_way(point)` looks at what a kill there
    would leave (the release waits, so the disk holds exactly that), then SIGUSR1 lets it go
    on. What it wrote to stderr."""
    env = _env(clone, scope)
    points = (pause,) if isinstance(pause, str) else tuple(pause or ())
    if points:
        env[runs.PAUSE_ENV] = ",".join(points)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "release"],
        cwd=clone,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen = []
    passed = []
    try:
        for line in proc.stderr:
            seen.append(line)
            at = next((p for p in points if line.startswith(f"paused at {p} ")), None)
            if at is not None and at != points[-1]:
                assert at == points[len(passed)], f"paused at {at}, expected {points[len(passed)]}"
                if on_the_way:
                    on_the_way(at)
                passed.append(at)
                proc.send_signal(signal.SIGUSR1)
            elif at is not None or (until and until in line):
                assert at is None or passed == list(points[:-1]), f"passed {passed} before {at}"
                proc.send_signal(signal.SIGKILL)
                break
        else:
            proc.wait(timeout=timeout)
            if points or until:
                pytest.fail(
                    f"the release ended (exit {proc.returncode}) before {points or until}:\n" + "".join(seen[-30:])
                )
            assert proc.returncode == 0, "".join(seen[-40:])
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=60)
    return "".join(seen)


def _tracked_as_committed(clone: Path) -> bool:
    out = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all", "--", *TRACKED],
        cwd=clone,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out == "" and not (clone / install.JOURNAL).exists()


def _image(clone: Path) -> str:
    return json.loads((clone / "submission.json").read_text())["image"]


def _built(clone: Path) -> str:
    return json.loads((clone / "dist" / "build.json").read_text())["manifest_digest"]


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _flip(path: Path, at: int = 4096) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def _audit(clone: Path, scope: ContainerScope) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", "audit", "--key", ".release/keys/release.pub.pem"],
        cwd=clone,
        env=_env(clone, scope),
        capture_output=True,
        text=True,
        timeout=600,
    )


def _nothing_left(clone: Path, scope: ContainerScope) -> None:
    state = clone / ".release"
    assert localregistry.status(state / "registry") is None
    assert not (state / "registry" / "state.json").exists()
    assert scope.containers() == []
    assert dockerd.status(scope.docker_dir) is None
    assert not (clone / install.JOURNAL).exists()
    assert list((clone / install.STAGING).iterdir()) == []
    assert (
        runs.dead_temp_files(
            [state, clone / "dist"], skip=[state / "base" / "rootfs", state / "registry", state / "staging"]
        )
        == []
    )


def test_kills_at_each_stage_boundary_keep_the_committed_records_and_the_rerun_converges(
    base_image, tmp_path
):  # base_image: the layout seed_caches copies
    clone = _clone(tmp_path / "checkout")
    committed = records_digest(clone)
    scope = ContainerScope.new()
    registry = clone / ".release" / "registry"
    try:
        with suite_slot():
            # Before any stage ran: nothing was started.
            _release(clone, scope, pause="registry")
            assert _tracked_as_committed(clone) and not (registry / "state.json").exists()
            # The registry runs, its release is gone: the next release stops it and says so.
            _release(clone, scope, pause="base")
            assert localregistry.status(registry) is not None
            err = _release(clone, scope, pause="vendor")
            assert "stopped the local registry (docker-registry" in err and "that a release which is gone" in err
            assert _tracked_as_committed(clone)
            for point in ("build", "sbom", "push"):  # built: base blobs cached and in dist/oci
                _release(clone, scope, pause=point)
                assert _tracked_as_committed(clone), point
            image = _built(clone)

            # The layout's base blobs are copies, not links to the cache; corrupt both copies
            # of the largest one, and leave a dead process's temporary files beside them.
            cache = clone / ".release" / "cache" / "blobs"
            cached = max(cache.iterdir(), key=lambda p: p.stat().st_size)
            laid_out = clone / "dist" / "oci" / "blobs" / "sha256" / cached.name
            assert laid_out.stat().st_ino != cached.stat().st_ino
            _flip(cached)
            _flip(laid_out)
            dead = _dead_pid()
            temp = [laid_out.with_name(f".layer-{dead}.tmp"), cache / f".{cached.name}.{dead}-1.part"]
            for t in temp:
                t.write_bytes(b"half")
            err = _release(clone, scope, pause="verify")
            assert f"the layout's blob {laid_out} is corrupt" in err and "discarded and taken again" in err
            assert f"cached base blob {cached} is corrupt" in err and "discarded and fetched again" in err
            assert "removed 2 temporary file(s) of processes that are gone" in err
            assert not any(t.exists() for t in temp)
            assert _built(clone) == image  # the SBOM stage read the repaired layers

            # A flipped byte in the local registry's storage (the base's largest layer): the next
            # run removes that blob and pushes it again before anything reads it.
            stored = registry / "storage" / "docker" / "registry" / "v2" / "blobs" / "sha256"
            data = max(stored.glob("*/*/data"), key=lambda p: p.stat().st_size)
            _flip(data)
            # Killed mid-suite (the image pulled back, every digest checked): its check
            # containers stay behind, then the next run removes them.
            err = _release(clone, scope, until="container(s) of")
            assert (
                f"removed 1 corrupt blob(s) from the local registry's storage (sha256:{data.parent.name[:12]})" in err
            )
            assert "base re-pushed" in err
            left = scope.containers()
            assert left, "the suite's containers should be running when it was killed"
            assert _tracked_as_committed(clone)

            # Past the check suite, one release is held at each boundary up to the self-audit
            # (what a kill there leaves is on disk while it waits: its staging only, the
            # records as committed), then killed at the install, before its journal: its
            # records written, signed, attached and self-audited, never installed.
            held = []

            def as_a_kill_there_leaves_it(point: str) -> None:
                assert _tracked_as_committed(clone) and records_digest(clone) == committed, point
                staged = list((clone / install.STAGING).iterdir())
                assert len(staged) == 1 and not install.journaled(clone, staged[0]), (point, staged)
                held.append((point, staged[0]))

            err = _release(
                clone,
                scope,
                pause=("admission", "records", "attach", "self-audit", "install"),
                on_the_way=as_a_kill_there_leaves_it,
            )
            assert [p for p, _ in held] == ["admission", "records", "attach", "self-audit"]
            assert f"removed {len(left)} check container(s) of releases that are gone" in err
            assert "audit of the records PASSED" in err and not (clone / install.JOURNAL).exists()
            assert (held[-1][1] / "attestations" / "release.dsse.json").exists()
            assert _tracked_as_committed(clone) and records_digest(clone) == committed
            assert scope.containers() == []

            # The rerun: it stops the dead run's registry, removes its staging, and converges.
            err = _release(clone, scope)
        assert "stopped the local registry" in err and "removed 1 staging directory" in err
        assert not held[-1][1].exists()
        assert _image(clone).split("@")[1] == image
        audit = _audit(clone, scope)
        assert audit.returncode == 0, audit.stdout[-3000:] + audit.stderr[-2000:]
        _nothing_left(clone, scope)
    finally:
        localregistry.stop(registry)


def test_a_corrupt_rootfs_cache_is_found_discarded_and_rebuilt_to_the_committed_digest(tmp_path):
    clone = _clone(tmp_path / "checkout")
    committed_image = _image(clone)
    committed_lock = (clone / base.BASE_LOCK_FILE).read_bytes()
    # The clone's own rootfs cache (never the checkout's, which other builds share), and no
    # base layout: the base is made by mmdebstrap here, as on a new machine.
    state = clone / ".release" / "base"
    if (state / "rootfs").is_symlink():
        (state / "rootfs").unlink()
    shutil.rmtree(state / "oci", ignore_errors=True)
    tree, marker, _ = rootfscache.paths(state / "rootfs", base.BaseSpec().cache_key(base.mmdebstrap_version()))
    scope = ContainerScope.new()
    registry = clone / ".release" / "registry"
    try:
        with suite_slot():
            made = pipeline(clone, "base", scope=scope, timeout=900)
            if made.returncode != 0 and "served other .debs" in made.stderr:
                pytest.skip(
                    "the Debian mirror serves other .debs than locks/base.json pins: "
                    + made.stderr.strip().splitlines()[-1]
                )
            assert made.returncode == 0, made.stderr[-3000:]
            assert "rootfs: mmdebstrap" in made.stderr and "base rebuilt to the pinned digest" in made.stdout
            assert marker.read_text().startswith("sha256:")
            # Only the rootfs cache holds the base now (the registry's copy and the layout gone,
            # as after a cleared registry), and one byte of libcrypto in it is flipped in place.
            localregistry.stop(registry)
            shutil.rmtree(registry / "storage")
            shutil.rmtree(state / "oci")
            lib = tree / "usr" / "lib" / "x86_64-linux-gnu" / "libcrypto.so.3"
            assert lib.is_file() and not lib.is_symlink()
            before = lib.stat()
            _flip(lib, at=before.st_size // 2)
            os.utime(lib, ns=(before.st_atime_ns, before.st_mtime_ns))
            err = _release(clone, scope)
        # Found, one line; discarded; mmdebstrap again; the pinned base and the committed image.
        found = [line for line in err.splitlines() if "fails its check" in line]
        assert (
            len(found) == 1
            and f"the cached tree {tree} fails its check" in found[0]
            and "discarded and rebuilt" in found[0]
        ), err[-3000:]
        assert err.index("fails its check") < err.index("rootfs: mmdebstrap")
        assert "base rebuilt to the pinned digest" in err
        assert _image(clone) == committed_image
        # The lock was never rewritten, so nothing suggests getting past it.
        assert (clone / base.BASE_LOCK_FILE).read_bytes() == committed_lock
        assert (
            subprocess.run(
                ["git", "status", "--porcelain", "--", base.BASE_LOCK_FILE],
                cwd=clone,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            == ""
        )
        assert "allow-dirty" not in err
        assert marker.read_text().strip() == rootfscache.tree_digest(tree)
        _nothing_left(clone, scope)
    finally:
        localregistry.stop(registry)


def test_a_kill_inside_the_install_leaves_every_record_and_the_next_run_completes_it(base_image, tmp_path):
    clone = _clone(tmp_path / "checkout")
    committed = {rel: (clone / rel).read_bytes() for rel in ("provenance.json", "submission.json")}
    scope = ContainerScope.new()
    registry = clone / ".release" / "registry"
    try:
        with suite_slot():
            # Killed after provenance.json, submission.json and attestations/ were switched in,
            # before dist/dataset/: the journal names the rest.
            _release(clone, scope, pause="install:attestations")
        image = _built(clone)
        assert (clone / install.JOURNAL).exists()
        for rel in install.PATHS:
            assert (clone / rel).exists() or rel == "dist/dataset", rel
        assert all((clone / rel).read_bytes() != old for rel, old in committed.items())
        journal = json.loads((clone / install.JOURNAL).read_text())

        # The next run completes the install first thing (here it is killed right after).
        err = _release(clone, scope, pause="checkout")
        assert "recovered: a killed release had committed its records" in err
        assert not (clone / install.JOURNAL).exists()
        for entry in journal["entries"]:
            assert install.digest(clone / entry["path"]) == entry["sha256"], entry["path"]
        # The set in place is whole: the killed release's, self-audited before it was switched in.
        audit = _audit(clone, scope)
        assert audit.returncode == 0, audit.stdout[-3000:] + audit.stderr[-2000:]
        assert _image(clone).split("@")[1] == image

        with suite_slot():
            err = _release(clone, scope)
        assert "stopped the local registry" in err
        assert _image(clone).split("@")[1] == image
        _nothing_left(clone, scope)
    finally:
        localregistry.stop(registry)


def test_a_full_disk_in_a_stage_is_one_line_with_the_path_and_what_it_needs(base_image, tmp_path):
    clone = _clone(tmp_path / "checkout")
    scope = ContainerScope.new()
    dist = clone / "dist"
    dist.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(dist)], check=True)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pipeline", "release"],
            cwd=clone,
            env=_env(clone, scope),
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        localregistry.stop(clone / ".release" / "registry")
        subprocess.run(["umount", str(dist)], check=True)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"error: no space left on the file system of {dist / 'oci' / 'blobs' / 'sha256'} "
        "(the build stage: No space left on device); expected about 150 MB free, got "
    ), last
    assert "free space on that file system" in last
    assert _tracked_as_committed(clone)
    assert scope.containers() == []


def test_a_registry_that_stops_answering_mid_release_is_waited_for_with_progress_then_given_up(base_image, tmp_path):
    clone = _clone(tmp_path / "checkout")
    scope = ContainerScope.new()
    registry = clone / ".release" / "registry"
    env = {**_env(clone, scope), "RELEASE_REGISTRY_WAIT_S": "8"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "release"],
        cwd=clone,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen = []
    try:
        for line in proc.stderr:
            seen.append(line)
            if line.startswith("==> push"):
                # docker-registry stops (SIGSTOP): nginx still accepts, nobody answers.
                state = json.loads((registry / "state.json").read_text())
                os.kill(state["registry_pid"], signal.SIGSTOP)
                started = time.monotonic()
                break
        else:
            pytest.fail("the release ended before its push:\n" + "".join(seen[-30:]))
        _, rest = proc.communicate(timeout=120)
        gave_up = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)
        localregistry.stop(registry)
    assert proc.returncode != 0
    assert "waiting for 127.0.0.1:" in rest and "giving up after 8 s" in rest, rest[-3000:]
    last = rest.strip().splitlines()[-1]
    assert last.startswith("error: registry 127.0.0.1:") and "did not answer" in last and "within 8 s" in last
    assert "RELEASE_REGISTRY_WAIT_S" in last and "Traceback" not in rest
    # The wait, then stopping the registry it started (its stopped docker-registry is killed).
    assert gave_up < 8 + 30, gave_up
    assert _tracked_as_committed(clone)
    assert localregistry.status(registry) is None
