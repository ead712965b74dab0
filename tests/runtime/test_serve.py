"""`python -m pipeline serve`: the built image from its OCI layout (checked by digest, loaded
into the engine, served on the port the README's client uses); host mode from a root-only copy."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import uuid

import pytest

import env.__main__ as env_cli
from pipeline.config import REPO_ROOT, load
from pipeline.errors import ConfigError
from pipeline.image.build import BuildRecord
from pipeline.image.imageconfig import ImageConfigValues
from pipeline.image.oci.image import ConfigChanges, NewLayer, derive
from pipeline.image.oci.layer import FileEntry, write_layer
from pipeline.image.oci.layout import Layout
from pipeline.runtime import serve
from pipeline.runtime.runtime import ContainerError, ContainerRuntime


def _layout(root):
    """A one-file image in an OCI layout, as a build writes dist/oci (ref "local")."""
    layout = Layout.init(root)
    layer = write_layer(
        [FileEntry("opt/x.txt", "file", 0o644, source=b"served\n")], root / "blobs" / "sha256", source_date_epoch=1
    )
    img = derive(
        None,
        [NewLayer(layer.digest, layer.diff_id, layer.size, "x")],
        ConfigChanges(cmd=("true",)),
        source_date_epoch=1,
    )
    layout.put_bytes(img.config_bytes)
    layout.add_manifest(img.manifest_bytes, img.media_type, ref_name="local")
    return layout, img


def _record(layout, img, repository="arena/openenv-data-workflows") -> BuildRecord:
    return BuildRecord(
        repository=repository,
        tag="local",
        manifest_digest=img.manifest_digest,
        media_type=img.media_type,
        config_digest=img.config_digest,
        base="none",
        base_layers=(),
        app_layers=(),
        source_revision="0" * 40,
        source_date_epoch=1,
        zlib="",
        layout=str(layout.root),
        config=ImageConfigValues((), (), (), "/", (), "", ()),
    )


def test_without_a_build_record_it_says_to_release_first(tmp_path):
    with pytest.raises(ConfigError, match=r"nothing to serve: .*; run `nox -s release` first$"):
        serve.built_record(tmp_path / "build.json")


def test_a_tampered_layout_is_refused_before_anything_is_loaded(tmp_path):
    layout, img = _layout(tmp_path / "oci")
    blob = layout.blob_path(img.manifest.layers[0].digest)
    blob.write_bytes(blob.read_bytes()[:-1] + bytes([blob.read_bytes()[-1] ^ 1]))
    # podman is never run: the layout's blobs are checked before the archive is written.
    runtime = ContainerRuntime(engine="podman")
    with pytest.raises(ConfigError, match=r"is not intact in .*; run `nox -s release` again$"):
        serve.load_built(runtime, _record(layout, img))


def test_a_layout_without_the_built_image_is_refused(tmp_path):
    layout, img = _layout(tmp_path / "oci")
    elsewhere = Layout.init(tmp_path / "empty")
    with pytest.raises(ConfigError, match=rf"no image {img.manifest_digest}.*run `nox -s release` again$"):
        serve.load_built(ContainerRuntime(engine="podman"), _record(elsewhere, img))


def test_local_name_drops_the_registry_host_and_tags_by_digest(tmp_path):
    layout, img = _layout(tmp_path / "oci")
    hexd = img.manifest_digest.split(":")[1]
    assert serve.local_name(_record(layout, img)) == f"localhost/arena/openenv-data-workflows:sha256-{hexd}"
    ghcr = _record(layout, img, repository="ghcr.io/akseljoonas/openenv-arena-release")
    assert serve.local_name(ghcr) == f"localhost/akseljoonas/openenv-arena-release:sha256-{hexd}"


def test_port_is_release_toml_s_unless_asked_and_a_busy_port_names_the_fix():
    cfg = load()
    assert serve.serve_port(cfg, None, environ={}) == cfg.port == 8000
    assert serve.serve_port(cfg, None, environ={serve.PORT_VARIABLE: "18001"}) == 18001
    assert serve.serve_port(cfg, 18002, environ={serve.PORT_VARIABLE: "18001"}) == 18002
    with pytest.raises(ConfigError, match=serve.PORT_VARIABLE):
        serve.serve_port(cfg, None, environ={serve.PORT_VARIABLE: "eighty"})
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        busy = held.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"; serve on another port: `nox -s serve -- --port {busy + 1}`"):
            serve.check_port_free(busy)


@pytest.mark.container
def test_the_layout_image_is_loaded_and_checked_by_digest(tmp_path):
    layout, img = _layout(tmp_path / "oci")
    runtime = ContainerRuntime()
    name = f"localhost/test/serve-load:{uuid.uuid4().hex[:12]}"
    archive = tmp_path / "image.tar"
    layout.write_archive(img.manifest_digest, archive, name=name)
    try:
        assert runtime.load(archive, name, digests=(img.manifest_digest, img.config_digest)) == name
        # Teeth: an engine id that is neither digest (another image under that name) is refused.
        with pytest.raises(ContainerError, match="did not load"):
            runtime.load(archive, name, digests=("sha256:" + "0" * 64,))
    finally:
        subprocess.run(
            [runtime.engine, *runtime.args.global_args, "rmi", "--force", name], capture_output=True, check=False
        )


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
