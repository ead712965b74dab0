"""OCI image layout: write, read back verified, detect tampering."""

from __future__ import annotations

import json

import pytest

from pipeline.errors import DigestMismatch
from pipeline.image.oci.image import ConfigChanges, NewLayer, derive
from pipeline.image.oci.layer import FileEntry, write_layer
from pipeline.image.oci.layout import REF_NAME, Layout, LayoutError


def _image(root, content=b"hello\n"):
    layout = Layout.init(root)
    blobs = root / "blobs" / "sha256"
    layer = write_layer([FileEntry("opt/x.txt", "file", 0o644, source=content)], blobs, source_date_epoch=1)
    img = derive(
        None,
        [NewLayer(layer.digest, layer.diff_id, layer.size, "x")],
        ConfigChanges(cmd=("true",)),
        source_date_epoch=1,
    )
    layout.put_bytes(img.config_bytes)
    layout.add_manifest(img.manifest_bytes, img.media_type, ref_name="v1")
    return layout, img


def test_layout_round_trip(tmp_path):
    layout, img = _image(tmp_path / "oci")
    assert json.loads((tmp_path / "oci" / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    read = Layout.open(tmp_path / "oci").verify_image("v1")
    assert read.manifest_bytes == img.manifest_bytes and read.config_bytes == img.config_bytes
    assert read.descriptor.annotations[REF_NAME] == "v1"
    # Re-adding the same name replaces the entry rather than duplicating it.
    layout.add_manifest(img.manifest_bytes, img.media_type, ref_name="v1")
    assert len(layout.index().manifests) == 1


def test_tampered_layer_is_detected(tmp_path):
    layout, img = _image(tmp_path / "oci")
    path = layout.blob_path(img.manifest.layers[0].digest)
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(DigestMismatch, match=img.manifest.layers[0].digest):
        layout.verify_image("v1")


def test_tampered_manifest_is_detected(tmp_path):
    layout, img = _image(tmp_path / "oci")
    layout.blob_path(img.manifest_digest).write_bytes(img.manifest_bytes + b" ")
    with pytest.raises(DigestMismatch):
        layout.image("v1")


def test_not_a_layout_and_unknown_ref(tmp_path):
    with pytest.raises(LayoutError, match="not an OCI image layout"):
        Layout.open(tmp_path)
    layout, _ = _image(tmp_path / "oci")
    with pytest.raises(LayoutError, match="no image named 'v2'"):
        layout.image("v2")


def test_copy_image_adds_one_image_by_digest_and_keeps_the_others(tmp_path):
    source, img = _image(tmp_path / "src", b"rebuilt\n")
    target, kept = _image(tmp_path / "dist", b"built\n")
    target.copy_image(source, img.manifest_digest, ref_name="reproduce")
    assert {d.annotations[REF_NAME]: d.digest for d in target.index().manifests} == {
        "v1": kept.manifest_digest,
        "reproduce": img.manifest_digest,
    }
    assert target.verify_image(digest=img.manifest_digest).manifest_bytes == img.manifest_bytes
    assert target.verify_image("v1").manifest_bytes == kept.manifest_bytes


def test_copy_image_refuses_a_tampered_blob(tmp_path):
    source, img = _image(tmp_path / "src")
    path = source.blob_path(img.manifest.layers[0].digest)
    path.write_bytes(path.read_bytes() + b"\0")
    target = Layout.init(tmp_path / "dist")
    with pytest.raises(DigestMismatch, match=img.manifest.layers[0].digest):
        target.copy_image(source, img.manifest_digest, ref_name="reproduce")
    assert target.index().manifests == ()


def test_archive_holds_one_named_image(tmp_path):
    import tarfile

    layout, img = _image(tmp_path / "oci")
    another, other = _image(tmp_path / "another", b"another\n")
    layout.copy_image(another, other.manifest_digest, ref_name="other")  # stays out of the archive
    layout.write_archive(img.manifest_digest, tmp_path / "a.tar", name="localhost/x:y")
    with tarfile.open(tmp_path / "a.tar") as tar:
        names = sorted(tar.getnames())
        index = json.loads(tar.extractfile("index.json").read())
    blobs = {img.manifest_digest, img.manifest.config.digest, img.manifest.layers[0].digest}
    assert names == sorted(["oci-layout", "index.json", *(f"blobs/sha256/{d[7:]}" for d in blobs)])
    assert [m["digest"] for m in index["manifests"]] == [img.manifest_digest]
    assert index["manifests"][0]["annotations"][REF_NAME] == "localhost/x:y"
