"""What a built image inherits from its base under the app dir.

The arena profile builds FROM a MiMo repair image whose root-only /opt/arena already
holds that task's adapter and record with its hidden tests (shared/spec/mimo.md, "What
is inside"); the build adds its own layers under the same directory. `inherited_files`
lists the regular files the base's layers leave there that the build's layers do not
replace, so the check suite can prove UID 2000 still cannot read them in the derived
image (`image/protected-inherited`).

The build's own layers are the trailing ones whose history line starts with
`build.HISTORY_PREFIX`; every layer before them is the base's. Whiteouts (`.wh.<name>`,
`.wh..wh..opq`) in later base layers remove what earlier ones added.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from pipeline.image.build import HISTORY_PREFIX
from pipeline.image.oci import listing
from pipeline.image.oci.image import ImageConfig

_WHITEOUT = ".wh."
_OPAQUE = ".wh..wh..opq"


def own_layer_count(config: ImageConfig) -> int:
    """How many trailing layers the build appended (by their history lines)."""
    lines = [h.created_by for h in config.history if not h.empty_layer]
    count = 0
    for line in reversed(lines):
        if not line.startswith(HISTORY_PREFIX):
            break
        count += 1
    return count


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory + "/")


def inherited_files(config: ImageConfig, layers: Sequence[tuple[str, Path]], app_dir: str) -> tuple[str, ...]:
    """Absolute paths of the regular files the base leaves under `app_dir` that the
    build's own layers do not replace, sorted. `layers` are the image's layers in
    manifest order: (digest, blob file) each (pipeline.image.oci.listing reads them)."""
    app = app_dir.strip("/")
    own = own_layer_count(config)
    base, ours = layers[:len(layers) - own], layers[len(layers) - own:]
    files: set[str] = set()
    for digest, blob in base:
        for path, regular in listing.entries(blob, digest):
            parent, name = str(PurePosixPath(path).parent), PurePosixPath(path).name
            if name == _OPAQUE:
                files = {f for f in files if not f.startswith(parent + "/")}
            elif name.startswith(_WHITEOUT):
                gone = str(PurePosixPath(parent, name[len(_WHITEOUT):]))
                files = {f for f in files if not _under(f, gone)}
            elif regular and _under(path, app) and path != app:
                files.add(path)
            else:
                files.discard(path)
    replaced = {path for digest, blob in ours for path, _ in listing.entries(blob, digest)}
    return tuple(sorted(f"/{f}" for f in files - replaced))
