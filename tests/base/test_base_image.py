"""The local base image: built by mmdebstrap + installer, pushed, pinned, runnable."""

from __future__ import annotations

import gzip
import json
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline import basestage
from pipeline.image import base
from pipeline.image.oci.layout import Layout
from pipeline.registry import local as localregistry
from pipeline.runtime.runtime import ContainerRuntime

from ..reproduce.reprotestfixtures import base_reprotest, build_world, built_indexes  # noqa: F401
from .basefixtures import REBUILT_LOCK, TEST_STATE, registry_client

# `slow` where the base image is needed (tests/conftest.py marks those).
pytestmark = [pytest.mark.root, pytest.mark.container]


@pytest.fixture(scope="module")
def rt():
    return ContainerRuntime()


@pytest.fixture(scope="module")
def pulled(rt, base_image, local_registry):
    return rt.pull(base_image.pull_reference(local_registry.address))


def _sh(rt: ContainerRuntime, image: str, script: str) -> str:
    out = rt._cli("run", "--rm", "--pull", "never", *rt.args.run_args, image, "sh", "-c", script, check=False)
    assert out.returncode == 0, out.stderr.decode()
    return out.stdout.decode()


def _members(layout: Path, digest: str) -> list[tarfile.TarInfo]:
    blob = Layout.open(layout).blob_path(digest)
    with gzip.open(blob) as gz, tarfile.open(fileobj=gz) as tar:
        return tar.getmembers()


def test_two_builds_give_identical_layers(base_reprotest, base_image):
    """The run's base build and one more uncached mmdebstrap run (reprotest's, under its
    variations: one run for both tests) give the manifest of the pushed base, so the same
    layer digests and diff_ids (the manifest names the layers and the config, the config
    the diff_ids)."""
    for build, index in built_indexes(base_reprotest).items():
        [manifest] = index["manifests"]
        assert manifest["digest"] == base_image.digest, build
    assert base.load_record().digest == base_image.digest


def test_a_rebuild_on_a_new_machine_leaves_the_committed_lock_as_it_is(base_image):
    """A release on a new machine rebuilds the base from the committed lock (nothing cached).
    The pinned digest must come out and leave locks/base.json as committed, byte for byte:
    a rewritten lock (another mirror, a field the build fills in) made the checkout dirty,
    and the release refused to sign its records."""
    marker = TEST_STATE / REBUILT_LOCK
    rebuilt = json.loads(marker.read_text()) if marker.exists() else {}
    if rebuilt.get("committed") != base.BASE_LOCK.read_text():
        pytest.skip("no build of this run or an earlier one started from the committed lock (a base was cached before)")
    assert base_image.digest == base.load_record().digest
    assert rebuilt["after"] == rebuilt["committed"]


def test_record_pins_the_pushed_image(base_image, local_registry):
    client = registry_client(local_registry)
    assert client.head_manifest(base.REPOSITORY, base_image.digest) == base_image.digest
    assert client.head_manifest(base.REPOSITORY, base.TAG) == base_image.digest
    fetched = client.get_manifest(base.REPOSITORY, base_image.digest)
    manifest = json.loads(fetched.raw)
    assert [l["digest"] for l in manifest["layers"]] == [l.digest for l in base_image.layers]
    assert [l["size"] for l in manifest["layers"]] == [l.size for l in base_image.layers]
    assert base_image.media_type == fetched.media_type
    assert base_image.python == "/opt/arena-python/bin/python3"
    assert base_image.debian_suite == "bookworm" and base_image.source_date_epoch > 0


def test_base_is_small(base_image):
    assert [l.role for l in base_image.layers] == ["os", "python-runtime", "bytecode"]
    assert base_image.compressed_size <= 80_000_000


def test_runtime_python_imports_server_and_compiled_stdlib(rt, pulled):
    out = _sh(
        rt,
        pulled,
        "/opt/arena-python/bin/python3 -c 'import resource, openenv.core.env_server, uvicorn, sys; print(sys.prefix)'",
    )
    assert out.strip() == "/opt/arena-python"


def test_debian_python3_and_user_tools_exist(rt, pulled):
    out = _sh(
        rt,
        pulled,
        "python3 -c 'import resource' && useradd -u 2000 -U -m -d /workspace arena"
        " && id -u arena && id -g arena && su -s /bin/sh arena -c 'id -u'",
    )
    assert out.split() == ["2000", "2000", "2000"]


def test_no_pip_and_bytecode_only_checked_hash_in_its_own_layer(base_image):
    os_layer, runtime, bytecode = (
        [m for m in _members(TEST_STATE / "oci", layer.digest)] for layer in base_image.layers
    )
    names = [m.name for m in os_layer + runtime]
    assert not [n for n in names if n.endswith(".pyc") or "/__pycache__" in n]
    assert not [n for n in names if "/site-packages/pip/" in n]
    assert not [n for n in names if n.startswith("dev/") or n.startswith("usr/share/man/")]
    pycs = [m for m in bytecode if m.isfile()]
    assert {(m.name if m.isdir() else m.name.rpartition("/")[0]).rpartition("/")[2] for m in bytecode} == {
        "__pycache__"
    }
    assert all(m.name.endswith(".cpython-311.pyc") for m in pycs) and len(pycs) > 2000
    sources = {n for n in names if n.endswith(".py")}
    assert {m.name.replace("__pycache__/", "").replace(".cpython-311.pyc", ".py") for m in pycs} <= sources
    # The flags word after the magic number: 0b11 is "hash-based, checked" (PEP 552); a
    # timestamp-based file (0) would tie the layer to the sources' mtimes.
    blob = Layout.open(TEST_STATE / "oci").blob_path(base_image.layers[2].digest)
    with gzip.open(blob) as gz, tarfile.open(fileobj=gz) as tar:
        flags = {tar.extractfile(m).read(8)[4:8] for m in tar if m.isfile()}
    assert flags == {b"\x03\x00\x00\x00"}


def test_the_server_stack_imports_from_the_bytecode(rt, pulled):
    """Every module Python's own source loader imports for the runtime's server stack is
    read from its .pyc, none compiled from source again (a stale hash or a missing file
    would be). The modules that beartype's import hook loads (`beartype_this_package()`
    in key-value-aio) are compiled by that hook from source by design, .pyc or not."""
    out = _sh(
        rt,
        pulled,
        "PYTHONDONTWRITEBYTECODE=1 /opt/arena-python/bin/python3 -v -c "
        "'import json, csv, subprocess, openenv.core.env_server, uvicorn' 2>&1",
    )
    loaded, code = {}, None
    for line in out.splitlines():
        if line.startswith("# code object from "):
            code = line.removeprefix("# code object from ").strip("'")
        elif line.startswith("import '") and code is not None:
            loaded[code] = line.partition(" # ")[2]
            code = None
    by_python = {
        path: loader
        for path, loader in loaded.items()
        if "SourceFileLoader object" in loader and "Beartype" not in loader
    }
    assert len(by_python) > 300
    assert [path for path in by_python if not path.endswith(".pyc")] == []
    assert "bytecode is stale" not in out


def test_layers_keep_real_owners_and_clamp_mtimes(base_image):
    os_layer = {m.name: m for m in _members(TEST_STATE / "oci", base_image.layers[0].digest)}
    assert os_layer["etc/shadow"].mode == 0o640 and os_layer["etc/shadow"].gid != 0
    assert max(m.mtime for m in os_layer.values()) <= base_image.source_date_epoch
    runtime = _members(TEST_STATE / "oci", base_image.layers[1].digest)
    assert {(m.uid, m.gid) for m in runtime} == {(0, 0)}
    link = next(m for m in runtime if m.name == "opt/arena-python/bin/python3")
    assert link.issym() and link.linkname == "/usr/bin/python3.11"


def test_rerun_with_the_digest_in_the_registry_does_nothing(base_image, local_registry, tmp_path):
    record_path = tmp_path / "base.json"
    base.write_record(base_image, record_path)
    ensured = basestage.ensure(
        registry_client(local_registry),
        basestage.BaseInputs(record_path=record_path, state_dir=TEST_STATE, rootfs_cache=base.STATE_DIR / "rootfs"),
    )
    assert (ensured.what, ensured.record) == ("up to date", base_image)


def test_registry_that_lost_the_base_gets_it_again_from_the_layout(base_image, tmp_path):
    record_path = tmp_path / "base.json"
    base.write_record(base_image, record_path)
    fresh = localregistry.start(tmp_path / "registry")
    try:
        client = registry_client(fresh)
        ensured = basestage.ensure(
            client,
            basestage.BaseInputs(record_path=record_path, state_dir=TEST_STATE, rootfs_cache=base.STATE_DIR / "rootfs"),
        )
        record = ensured.record
        assert ensured.what == "re-pushed"
        assert record.digest == base_image.digest
        # the record does not depend on the registry's address: nothing to rewrite
        assert record == base_image and record.name == base.REPOSITORY
        assert client.head_manifest(base.REPOSITORY, base_image.digest) == base_image.digest
        assert base.load_record(record_path) == record
    finally:
        localregistry.stop(tmp_path / "registry")


def test_changed_runtime_lock_is_not_up_to_date(base_image):
    changed = replace(base_image, runtime_lock_sha256="0" * 64)
    rebuilt_by_other_code = replace(base_image, builder_sha256="0" * 64)
    assert base_image.built_from(base.BaseSpec(), base_image.runtime_lock_sha256, base_image.python)
    assert not rebuilt_by_other_code.built_from(base.BaseSpec(), base_image.runtime_lock_sha256, base_image.python)
    assert not changed.built_from(base.BaseSpec(), base_image.runtime_lock_sha256, base_image.python)


def test_malformed_record_is_refused(tmp_path):
    path = tmp_path / "base.json"
    path.write_text('{"name": "x"}')
    with pytest.raises(base.ConfigError, match="not a base record"):
        base.load_record(path)
