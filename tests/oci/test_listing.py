"""A layer's member list, read once per process: recorded by the image file reader under the
digest it checked the bytes against, and read from the blob by anyone else."""

from __future__ import annotations

import pytest

from pipeline.errors import DigestMismatch
from pipeline.image.oci import files, listing
from pipeline.image.oci.layer import FileEntry, write_layer


def _layer(tmp_path):
    return write_layer(
        [
            FileEntry("./opt", "dir", 0o755),
            FileEntry("opt/arena", "dir", 0o700),
            FileEntry("opt/arena/a.py", "file", 0o644, source=b"a"),
            FileEntry("opt/arena/link", "symlink", 0o777, linkname="a.py"),
            FileEntry("/etc/.wh.motd", "file", 0o600, source=b""),
        ],
        tmp_path / "blobs",
        source_date_epoch=1,
    )


def _ref(digest, path):
    return files.LayoutImage(digest="sha256:" + "0" * 64, manifest={}, config={}, layers=((digest, path),))


def test_members_in_archive_order_as_image_paths(tmp_path):
    layer = _layer(tmp_path)
    # write_layer orders by name as written: "./opt" before "etc/...".
    assert listing.read(layer.path) == (
        ("opt", False, True),
        ("etc/.wh.motd", True, False),
        ("opt/arena", False, True),
        ("opt/arena/a.py", True, False),
        ("opt/arena/link", False, False),
    )
    assert [listing.clean(n) for n in ("./usr/x", "/usr/x", "usr/x/", ".", "./")] == ["usr/x"] * 3 + ["", ""]


def test_the_image_file_reader_records_what_the_blob_lists_and_later_readers_take_it(tmp_path):
    layer = _layer(tmp_path)
    files.read_view(_ref(layer.digest, layer.path), lambda _: True)
    assert listing.entries(layer.path, layer.digest) == listing.read(layer.path)
    layer.path.unlink()  # recorded: not read again
    assert listing.entries(layer.path, layer.digest) == listing.read(_layer(tmp_path).path)


def test_bytes_that_do_not_match_the_digest_record_nothing(tmp_path):
    layer = _layer(tmp_path)
    claimed = "sha256:" + "e" * 64
    with pytest.raises(DigestMismatch):
        files.read_view(_ref(claimed, layer.path), lambda _: True)
    layer.path.unlink()
    with pytest.raises(FileNotFoundError):  # nothing recorded under the claimed digest: read
        listing.entries(layer.path, claimed)
