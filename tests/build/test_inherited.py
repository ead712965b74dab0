"""What a derived image inherits under the app dir: the base's files there that the
build's own layers (named by their history lines) do not replace."""

from __future__ import annotations

from pipeline.image.build import HISTORY_PREFIX
from pipeline.image.inherited import inherited_files, own_layer_count
from pipeline.image.oci.image import ConfigChanges, NewLayer, derive, parse_config
from pipeline.image.oci.layer import FileEntry, parents_of, write_layer


def _layer(tmp_path, files: dict[str, bytes], extra: tuple[FileEntry, ...] = ()):
    entries = parents_of(list(files)) + [FileEntry(p, "file", 0o600, source=d) for p, d in files.items()]
    return write_layer([*entries, *extra], tmp_path, source_date_epoch=1)


def _image(tmp_path, base_layers, own_layers):
    news = [NewLayer(l.digest, l.diff_id, l.size, "COPY something") for l in base_layers]
    news += [NewLayer(l.digest, l.diff_id, l.size, f"{HISTORY_PREFIX}x layer") for l in own_layers]
    image = derive(None, news, ConfigChanges(), source_date_epoch=1)
    return parse_config(image.config_bytes), [(l.digest, l.path) for l in (*base_layers, *own_layers)]


def test_base_files_under_the_app_dir_that_the_build_does_not_replace(tmp_path):
    base = [_layer(tmp_path, {"opt/arena/server.py": b"a", "opt/arena/instance.json": b"{}",
                              "opt/other/x": b"x", "etc/passwd": b"root"}),
            _layer(tmp_path, {"opt/arena/workspace.tar": b"t", "opt/arena/grader/tests.py": b"t"})]
    own = [_layer(tmp_path, {"opt/arena/env/server/app.py": b"app", "opt/arena/server.py": b"replaced"})]
    config, blobs = _image(tmp_path, base, own)
    assert own_layer_count(config) == 1
    assert inherited_files(config, blobs, "/opt/arena") == (
        "/opt/arena/grader/tests.py", "/opt/arena/instance.json", "/opt/arena/workspace.tar")


def test_whiteouts_in_later_base_layers_remove_files(tmp_path):
    base = [_layer(tmp_path, {"opt/arena/instance.json": b"{}", "opt/arena/grader/tests.py": b"t",
                              "opt/arena/keep.txt": b"k"}),
            _layer(tmp_path, {"opt/arena/.wh.instance.json": b""}),
            _layer(tmp_path, {"opt/arena/grader/.wh..wh..opq": b""})]
    config, blobs = _image(tmp_path, base, [])
    assert own_layer_count(config) == 0
    assert inherited_files(config, blobs, "/opt/arena") == ("/opt/arena/keep.txt",)


def test_a_base_without_app_dir_files_leaves_nothing(tmp_path):
    config, blobs = _image(tmp_path, [_layer(tmp_path, {"usr/bin/python3": b"py"})],
                           [_layer(tmp_path, {"opt/arena/env/a.py": b"a"})])
    assert inherited_files(config, blobs, "/opt/arena") == ()


def test_a_whiteout_at_the_top_of_a_later_base_layer_removes_the_app_dir(tmp_path):
    """`.wh.opt` in the layer's root (named `./.wh.opt` in its tar) removes all of /opt below it."""
    base = [_layer(tmp_path, {"opt/arena/instance.json": b"{}"}),
            _layer(tmp_path, {}, (FileEntry("./.wh.opt", "file", 0o600, source=b""),))]
    config, blobs = _image(tmp_path, base, [])
    assert inherited_files(config, blobs, "/opt/arena") == ()
