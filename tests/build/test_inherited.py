"""What a derived image inherits under the app dir: the base's files there that the
build's own layers (named by their history lines) do not replace."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile

import pytest

from pipeline.image.build import HISTORY_PREFIX
from pipeline.image.inherited import inherited_files, own_layer_count
from pipeline.image.oci.files import LayoutImage
from pipeline.image.oci.image import ConfigChanges, NewLayer, derive, parse_config
from pipeline.image.oci.layer import FileEntry, Layer, parents_of, write_layer
from pipeline.records import sbom


def _layer(tmp_path, files: dict[str, bytes], extra: tuple[FileEntry, ...] = ()):
    entries = parents_of(list(files)) + [FileEntry(p, "file", 0o600, source=d) for p, d in files.items()]
    return write_layer([*entries, *extra], tmp_path, source_date_epoch=1)


def _image(tmp_path, base_layers, own_layers):
    news = [NewLayer(l.digest, l.diff_id, l.size, "COPY something") for l in base_layers]
    news += [NewLayer(l.digest, l.diff_id, l.size, f"{HISTORY_PREFIX}x layer") for l in own_layers]
    image = derive(None, news, ConfigChanges(), source_date_epoch=1)
    return parse_config(image.config_bytes), [(l.digest, l.path) for l in (*base_layers, *own_layers)]


def test_base_files_under_the_app_dir_that_the_build_does_not_replace(tmp_path):
    base = [
        _layer(
            tmp_path,
            {"opt/arena/server.py": b"a", "opt/arena/instance.json": b"{}", "opt/other/x": b"x", "etc/passwd": b"root"},
        ),
        _layer(tmp_path, {"opt/arena/workspace.tar": b"t", "opt/arena/grader/tests.py": b"t"}),
    ]
    own = [_layer(tmp_path, {"opt/arena/env/server/app.py": b"app", "opt/arena/server.py": b"replaced"})]
    config, blobs = _image(tmp_path, base, own)
    assert own_layer_count(config) == 1
    assert inherited_files(config, blobs, "/opt/arena") == (
        "/opt/arena/grader/tests.py",
        "/opt/arena/instance.json",
        "/opt/arena/workspace.tar",
    )


def test_whiteouts_in_later_base_layers_remove_files(tmp_path):
    base = [
        _layer(
            tmp_path, {"opt/arena/instance.json": b"{}", "opt/arena/grader/tests.py": b"t", "opt/arena/keep.txt": b"k"}
        ),
        _layer(tmp_path, {"opt/arena/.wh.instance.json": b""}),
        _layer(tmp_path, {"opt/arena/grader/.wh..wh..opq": b""}),
    ]
    config, blobs = _image(tmp_path, base, [])
    assert own_layer_count(config) == 0
    assert inherited_files(config, blobs, "/opt/arena") == ("/opt/arena/keep.txt",)


def test_a_base_without_app_dir_files_leaves_nothing(tmp_path):
    config, blobs = _image(
        tmp_path, [_layer(tmp_path, {"usr/bin/python3": b"py"})], [_layer(tmp_path, {"opt/arena/env/a.py": b"a"})]
    )
    assert inherited_files(config, blobs, "/opt/arena") == ()


def test_a_whiteout_at_the_top_of_a_later_base_layer_removes_the_app_dir(tmp_path):
    """`.wh.opt` in the layer's root (named `./.wh.opt` in its tar) removes all of /opt below it."""
    base = [
        _layer(tmp_path, {"opt/arena/instance.json": b"{}"}),
        _layer(tmp_path, {}, (FileEntry("./.wh.opt", "file", 0o600, source=b""),)),
    ]
    config, blobs = _image(tmp_path, base, [])
    assert inherited_files(config, blobs, "/opt/arena") == ()


# ------------------------------------------------------------------ whiteouts, in stream order
# A whiteout hides what the LOWER layers hold, never the members of its own layer, wherever
# it stands in the archive (OCI image spec, "Whiteouts"). Both readers of a layer stack, this
# check and the SBOM's file view, apply pipeline.image.oci.listing.hidden; each case is
# asked of both.


def _tar_layer(tmp_path, members: list[tuple[str, bytes | str | None]]) -> Layer:
    """A gzip'd layer tar with exactly these members in this order (write_layer sorts):
    bytes a regular file, None a directory, a str a symlink to it."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif isinstance(data, str):
                info.type, info.linkname = tarfile.SYMTYPE, data
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), 0o600
                tar.addfile(info, io.BytesIO(data))
    blob = gzip.compress(raw.getvalue(), mtime=0)
    digest = "sha256:" + hashlib.sha256(blob).hexdigest()
    path = tmp_path / digest.removeprefix("sha256:")
    path.write_bytes(blob)
    return Layer(digest, "sha256:" + hashlib.sha256(raw.getvalue()).hexdigest(), len(blob), path)


def _both_readers(tmp_path, base_layers) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What the inherited-files check and the SBOM's view leave under /opt/arena."""
    config, blobs = _image(tmp_path, base_layers, [])
    image = LayoutImage(digest="sha256:" + "0" * 64, manifest={}, config={}, layers=tuple(blobs))
    view = sbom.read_sbom_view(image, "/opt/arena")
    return inherited_files(config, blobs, "/opt/arena"), tuple(sorted("/" + p for p in view.files))


LOWER = {"opt/arena/old.py": b"old", "opt/arena/grader/tests.py": b"t", "opt/other/x": b"x"}


@pytest.mark.parametrize("marker_first", [False, True], ids=["entry-before-marker", "marker-before-entry"])
def test_an_opaque_whiteout_keeps_the_files_of_its_own_layer(tmp_path, marker_first):
    """The regression: `opt/arena/+new` listed before `opt/arena/.wh..wh..opq` in the same
    layer was dropped with the lower layers' files, leaving nothing."""
    marker, entry = ("opt/arena/.wh..wh..opq", b""), ("opt/arena/+new", b"n")
    upper = _tar_layer(
        tmp_path, [("opt", None), ("opt/arena", None), *((marker, entry) if marker_first else (entry, marker))]
    )
    assert _both_readers(tmp_path, [_layer(tmp_path, LOWER), upper]) == (("/opt/arena/+new",),) * 2


@pytest.mark.parametrize("marker_first", [False, True], ids=["entry-before-marker", "marker-before-entry"])
def test_a_whiteout_hides_the_lower_path_not_the_same_layers(tmp_path, marker_first):
    """`opt/arena/.wh.grader` deletes the lower grader/ and all under it; the grader/ files
    of its own layer stay, before or after it; the rest of the lower files stay."""
    marker, entry = ("opt/arena/.wh.grader", b""), ("opt/arena/grader/new.py", b"n")
    upper = _tar_layer(
        tmp_path,
        [
            ("opt", None),
            ("opt/arena", None),
            ("opt/arena/grader", None),
            *((marker, entry) if marker_first else (entry, marker)),
        ],
    )
    assert (
        _both_readers(tmp_path, [_layer(tmp_path, LOWER), upper])
        == (("/opt/arena/grader/new.py", "/opt/arena/old.py"),) * 2
    )


def test_a_non_directory_over_a_lower_directory_hides_what_was_under_it(tmp_path):
    upper = _tar_layer(tmp_path, [("opt", None), ("opt/arena", None), ("opt/arena/grader", "/tmp")])
    assert _both_readers(tmp_path, [_layer(tmp_path, LOWER), upper]) == (("/opt/arena/old.py",),) * 2
