"""`python -m pipeline reproduce` as a rebuilder runs it: a fresh clone, the recorded commit
checked out as a worktree, the whole image digest compared; and its teeth: a changed mode,
byte or vendored file, a base nobody can serve, a commit the clone does not hold."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipeline.registry import basesource
from pipeline.registry.client import Credentials

from .conftest import VENDORED, VENDORED_TOML, fresh_clone, git, make_records, reproduce, vendor

pytestmark = [pytest.mark.slow]

REMOTE_TOML = """
[profiles.remote]
description = "test: a base pinned in a remote registry"
registry = "registry.invalid"
repository = "arena/remote"
tag = "remote"
base = "{base}"
tasks = "first-party"
signing = "key"
external_tasks_required = false
submission_id = "remote-test"
dataset = "arena/remote"
"""


def test_fresh_clone_reproduces_the_whole_image_digest(released, local_registry, tmp_path):
    clone = fresh_clone(released, tmp_path / "rebuilder" / "clone")
    proc = reproduce(clone, "--base-registry", local_registry.address)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    prov = json.loads((released / "provenance.json").read_text())
    assert f"image same: recorded {prov['image']['digest']}" in proc.stdout
    assert "records are current" in proc.stdout
    assert "reproduced: image" in proc.stdout
    # The records-only commit moved no input: the image-input commit is the one before.
    assert prov["image_inputs"]["commit"] != git(released, "rev-parse", "HEAD")
    labels = prov["image"]["config"]["labels"]
    assert labels["org.opencontainers.image.revision"] == prov["image_inputs"]["commit"]
    assert labels["org.opencontainers.image.base.name"] == "arena/base"


def test_drifted_base_names_the_debs_that_changed(released, tmp_path):
    """A lock whose digest and one .deb no longer match what the mirror gives: the base
    rebuild differs and reproduce names the package."""
    clone = fresh_clone(released, tmp_path / "clone")
    lock_path = clone / "locks" / "base.json"
    lock = json.loads(lock_path.read_text())
    bash = next(d for d in lock["debs"] if d["name"] == "bash")
    bash["sha256"] = "0" * 64
    lock["digest"] = "sha256:" + "1" * 64
    lock_path.write_text(json.dumps(lock, indent=2, sort_keys=True))
    git(clone, "commit", "-q", "-am", "a lock that drifted")
    prov = json.loads((clone / "provenance.json").read_text())
    head = git(clone, "rev-parse", "HEAD")
    prov["project"]["commit"] = prov["image_inputs"]["commit"] = head
    prov["base"]["digest"] = lock["digest"]
    (clone / "provenance.json").write_text(json.dumps(prov, indent=2, sort_keys=True))
    git(clone, "commit", "-q", "-am", "records of the drifted lock")
    proc = reproduce(clone)
    assert proc.returncode != 0
    assert "base  DIFFERS" in proc.stdout
    assert f"bash: recorded bash_{bash['version']}_amd64.deb sha256 0000000000000000" in proc.stdout
    assert "image NOT REBUILT" in proc.stdout


def test_later_input_change_is_reported_as_stale_records(released, local_registry, tmp_path):
    clone = fresh_clone(released, tmp_path / "clone")
    target = clone / "env" / "server" / "app.py"
    target.write_bytes(target.read_bytes() + b"\n# later\n")
    git(clone, "commit", "-q", "-am", "later change")
    proc = reproduce(clone, "--base-registry", local_registry.address)
    # The recorded commit still reproduces; HEAD's change is named.
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "records are stale: env/server/app.py changed since" in proc.stdout


def _forge(clone: Path, old: dict) -> None:
    """Records for the new HEAD that still claim the old image (what a commit that slipped
    past the release would look like)."""
    prov = json.loads((clone / "provenance.json").read_text())
    head = git(clone, "rev-parse", "HEAD")
    prov["project"]["commit"] = head
    prov["project"]["tree"] = git(clone, "rev-parse", "HEAD^{tree}")
    prov["image_inputs"]["commit"] = head
    prov["image"] = old["image"]
    (clone / "provenance.json").write_text(json.dumps(prov, indent=2, sort_keys=True))
    git(clone, "commit", "-q", "-am", "records claiming the old digest")


@pytest.mark.parametrize("change", ["chmod", "byte"])
def test_changed_env_file_fails_and_names_it(change, released, local_registry, tmp_path):
    clone = fresh_clone(released, tmp_path / "clone")
    # The recorded image is in the registry, so diffoscope can read the recorded blobs.
    make_records(
        clone,
        local_registry.address,
        commit=False,
        push=True,
        credentials=Credentials(local_registry.user, local_registry.password),
    )
    old = json.loads((clone / "provenance.json").read_text())
    target = clone / "env" / "server" / "app.py"
    if change == "chmod":
        target.chmod(0o755)
    else:
        data = bytearray(target.read_bytes())
        data[10] ^= 1
        target.write_bytes(bytes(data))
    git(clone, "commit", "-q", "-am", f"{change} env/server/app.py")
    _forge(clone, old)
    proc = reproduce(clone, "--base-registry", local_registry.address)
    assert proc.returncode != 0, proc.stdout
    assert "layer env       DIFFERS" in proc.stdout
    if change == "chmod":
        assert "opt/arena/env/server/app.py: mode differs (recorded 0o600, rebuilt 0o700)" in proc.stdout
    else:
        assert "opt/arena/env/server/app.py: content differs" in proc.stdout
    assert "image DIFFERS" in proc.stdout
    assert "does not reproduce" in proc.stderr
    if shutil.which("diffoscope"):
        assert "diffoscope sha256:" in proc.stdout
        assert (
            ("-rw-------" in proc.stdout and "-rwx------" in proc.stdout)
            if change == "chmod"
            else "app.py" in proc.stdout.split("diffoscope sha256:", 1)[1]
        )


def test_vendored_file_with_a_changed_byte_fails_and_names_it(released, local_registry, tmp_path):
    clone = fresh_clone(released, tmp_path / "clone")
    with open(clone / "release.toml", "a") as f:
        f.write(VENDORED_TOML)
    git(clone, "commit", "-q", "-am", "a vendored profile")
    make_records(clone, local_registry.address, profile_name="vendored", vendor_dir=vendor(tmp_path / "vendor"))
    good = reproduce(clone, "--base-registry", local_registry.address, "--vendor-dir", str(tmp_path / "vendor"))
    assert good.returncode == 0, good.stdout + good.stderr
    changed = bytearray(VENDORED)
    changed[3] ^= 1
    vendor(tmp_path / "tampered", bytes(changed))
    bad = reproduce(clone, "--base-registry", local_registry.address, "--vendor-dir", str(tmp_path / "tampered"))
    assert bad.returncode != 0
    assert "test-tasks" in bad.stderr and str(tmp_path / "tampered" / "test-tasks" / "tasks.py") in bad.stderr


def test_base_nobody_serves_is_not_rebuilt_and_fails(released, local_registry, tmp_path):
    """A remote base (host `registry.invalid`: a name that never resolves, standing in for an
    unreachable ghcr.io) cannot be rebuilt here: "not rebuilt" fails; --layers-only is PARTIAL."""
    clone = fresh_clone(released, tmp_path / "clone")
    lock = json.loads((clone / "locks" / "base.json").read_text())
    with open(clone / "release.toml", "a") as f:
        f.write(REMOTE_TOML.format(base=f"registry.invalid/arena/base@{lock['digest']}"))
    git(clone, "commit", "-q", "-am", "a profile on an unreachable remote base")
    source = basesource.BaseSource(
        name="registry.invalid/arena/base",
        digest=lock["digest"],
        registry=local_registry.address,
        repository="arena/base",
    )
    make_records(clone, local_registry.address, profile_name="remote", vendor_dir=None, base_source=source)
    proc = reproduce(clone)
    assert proc.returncode != 0
    assert "NOT REBUILT" in proc.stdout and "image NOT REBUILT" in proc.stdout
    partial = reproduce(clone, "--layers-only")
    assert partial.returncode == 0, partial.stdout + partial.stderr
    assert "PARTIAL" in partial.stdout and "image same" not in partial.stdout


def test_commit_not_in_the_history_is_a_clear_error(released, tmp_path):
    clone = fresh_clone(released, tmp_path / "clone")
    prov = json.loads((clone / "provenance.json").read_text())
    prov["project"]["commit"] = "0" * 40
    (clone / "provenance.json").write_text(json.dumps(prov))
    proc = reproduce(clone)
    assert proc.returncode != 0
    assert f"the recorded commit {'0' * 40} is not in the history" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_shallow_clone_is_told_to_unshallow(released, tmp_path):
    shallow = fresh_clone(released, tmp_path / "shallow", "--depth", "1")
    proc = reproduce(shallow)
    assert proc.returncode != 0
    assert "is not in the history" in proc.stderr and "git fetch --unshallow" in proc.stderr
