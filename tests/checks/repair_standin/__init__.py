"""A stand-in MiMo repair image, built with the project's own build machinery.

`build_standin` derives it from a base in the local registry (schema-2 or OCI; the
family is kept) with `pipeline.image.oci` (write_layer, derive) and pushes it with
`pipeline.registry.push`: one layer holding the OpenEnv server (`server.py`), the buggy
project and, root-only, the grader's hidden tests, all under /opt/arena/repair
(0700/0600; a `grader-readable` stand-in gets 0755/0644). The reference solution is
`reference.patch`; `record()` is the stand-in MiMo dataset record carrying it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.image.oci.image import BaseImage, ConfigChanges, NewLayer, derive, parse_manifest
from pipeline.image.oci.layer import FileEntry, parents_of, write_layer
from pipeline.registry.client import Reference, RegistryClient
from pipeline.registry.push import push_image

HERE = Path(__file__).resolve().parent
APP = "opt/arena/repair"
PYTHON = "/opt/arena-python/bin/python3"
REFERENCE_PATCH = (HERE / "reference.patch").read_text()
FAULTS = ("rewards-unsolved", "grader-readable", "keeps-edits", "different-schema")
# The one check each broken stand-in must fail (and nothing else).
FAULT_FAILS = {"rewards-unsolved": "unsolved", "grader-readable": "protected-grader",
               "keeps-edits": "reset-removes-edits", "different-schema": "schema"}


@dataclass(frozen=True)
class StandIn:
    reference: str          # host/repository@sha256:...
    compressed_bytes: int


def _entries(fault: str) -> list[FileEntry]:
    readable = fault == "grader-readable"
    dmode, fmode = (0o755, 0o644) if readable else (0o700, 0o600)
    files = {f"{APP}/server.py": HERE / "server.py",
             f"{APP}/grader/hidden_tests.py": HERE / "hidden_tests.py",
             **{f"{APP}/project/{p.name}": p for p in sorted((HERE / "project").iterdir())}}
    dirs = [FileEntry(d.path, "dir", dmode if d.path.startswith("opt/arena") else d.mode)
            for d in parents_of(list(files))]
    return dirs + [FileEntry(path, "file", fmode, source=src.read_bytes())
                   for path, src in sorted(files.items())]


def build_standin(registry, base_ref: str, work: Path, *, task_id: str, fault: str = "",
                  repository: str = "test/mimo-repair-standin") -> StandIn:
    """Build and push the stand-in for `task_id` on `base_ref` (a local-registry image)."""
    if fault and fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}")
    ref = Reference.parse(base_ref)
    reader = RegistryClient(ref.registry)
    fetched = reader.get_manifest(ref.repository, ref.digest)
    manifest = parse_manifest(fetched.raw, fetched.media_type)
    base = BaseImage(manifest, reader.get_blob_bytes(ref.repository, manifest.config.digest))
    work.mkdir(parents=True, exist_ok=True)
    layer = write_layer(_entries(fault), work, source_date_epoch=1)
    env = {"REPAIR_TASK_ID": task_id, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
    if fault:
        env["REPAIR_FAULT"] = fault
    image = derive(base, [NewLayer(layer.digest, layer.diff_id, layer.size, "stand-in repair task")],
                   ConfigChanges(cmd=(PYTHON, f"/{APP}/server.py"), entrypoint=(), env=env,
                                 working_dir="/opt/arena", exposed_ports=("8000/tcp",), user="0"),
                   source_date_epoch=1)
    writer = registry.client()
    pushed = push_image(writer, repository, image.manifest_bytes, image.media_type,
                        {image.manifest.config.digest: image.config_bytes, layer.digest: layer.path},
                        tag=(fault or "ok") + "-" + task_id, mount_from=(ref.repository,))
    return StandIn(pushed.reference, image.manifest.compressed_size)


def record(task_id: str, row: int, *, with_reference: bool = True) -> dict:
    """The stand-in MiMo dataset record (the rows API's item) for `task_id`."""
    data = {"task_id": task_id, "prompt": f"Repair the project so the hidden tests pass ({task_id})."}
    if with_reference:
        data["patch"] = REFERENCE_PATCH
    return {"row_idx": row, "row": data}
