"""What a built image inherits from its base under the app dir.

The arena profile builds FROM a MiMo repair image whose root-only /opt/arena already
holds that task's adapter and record with its hidden tests (docs/spec/mimo.md, "What
is inside"); the build adds its own layers under the same directory. `inherited_files`
lists the regular files the base's layers leave there that the build's layers do not
replace, so the check suite can prove UID 2000 still cannot read them in the derived
image (`image/protected-inherited`).

The build's own layers are the trailing ones whose history line starts with
`build.HISTORY_PREFIX`; every layer before them is the base's. Each layer is applied onto
the ones below it as the image file reader (oci/files.py) applies it (`listing.hidden`: whiteouts and
replacements hide only what lower layers hold); a file the build's layers replace or
delete is not inherited.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pipeline.image.build import HISTORY_PREFIX
from pipeline.image.oci import listing
from pipeline.image.oci.image import ImageConfig


def own_layer_count(config: ImageConfig) -> int:
    """How many trailing layers the build appended (by their history lines)."""
    lines = [h.created_by for h in config.history if not h.empty_layer]
    count = 0
    for line in reversed(lines):
        if not line.startswith(HISTORY_PREFIX):
            break
        count += 1
    return count


def inherited_files(config: ImageConfig, layers: Sequence[tuple[str, Path]], app_dir: str) -> tuple[str, ...]:
    """Absolute paths of the regular files the base leaves under `app_dir` that the
    build's own layers do not replace or delete, sorted. `layers` are the image's layers in
    manifest order: (digest, blob file) each (pipeline.image.oci.listing reads them)."""
    under_app = app_dir.strip("/") + "/"
    first_own = len(layers) - own_layer_count(config)
    files: set[str] = set()
    for index, (digest, blob) in enumerate(layers):
        members = listing.entries(blob, digest)
        files -= listing.hidden(files, members)
        if index < first_own:
            files.update(
                m.path
                for m in members
                if m.regular and m.path.startswith(under_app) and not listing.is_whiteout(m.path)
            )
    return tuple(sorted(f"/{f}" for f in files))
