"""The arena profile's derived image on a realistic stand-in of its base (the seed's
PYroMat image, tests/e2e/pyromat_standin.py; ghcr.io is the public internet): the
stand-in is shaped like the real one, the project's build overrides Cmd, WorkingDir and
labels, the environment server starts on the base's CPython 3.12, and what the base
keeps root-only under /opt/arena stays unreadable to UID 2000 (`protected-inherited`),
which a careless layer reopening /opt/arena fails."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from pipeline.checks import image_checks
from pipeline.checks._record import Recorder
from pipeline.checks.client import Session
from pipeline.checks.target import Target
from pipeline.image.build import HISTORY_PREFIX
from pipeline.image.inherited import inherited_files
from pipeline.image.oci import image as oci_image
from pipeline.image.oci.layer import FileEntry, write_layer
from pipeline.image.oci.layout import Layout
from pipeline.imageref import ImageRef
from pipeline.registry.client import RegistryClient
from pipeline.registry.pull import pull
from pipeline.registry.push import push_image
from pipeline.runtime.runtime import ContainerRuntime
from tests.curriculum import all_cases

from ..base.basefixtures import base_image  # noqa: F401
from ..build.conftest import clone, source_repo  # noqa: F401
from ..build.test_build import run_build
from ..checks.repair_standin import HERE as REPAIR_STANDIN
from ..sources.rows_standin import mimo_record, record_text
from .pyromat_standin import (
    CMD,
    INHERITED,
    SOURCE_LABEL,
    build_pyromat_standin,
    pyromat_runtime,  # noqa: F401
    workspace_tar,
)

pytestmark = [pytest.mark.slow, pytest.mark.root, pytest.mark.container]
TASK = "format-code-task-000666"


def pyromat_inputs() -> dict:
    """The stand-in's adapter, record and workspace: the repair stand-in's server as the
    adapter, a record with the real records' fields, the stand-in project as the repository."""
    adapter = {
        "server.py": (REPAIR_STANDIN / "server.py").read_bytes(),
        "prepare.py": b'"""Stand-in of the MiMo adapter\'s prepare.py (run at build time only)."""\n',
        "terminal.py": b'"""Stand-in of the MiMo adapter\'s terminal.py."""\n',
        "task-dependencies.json": b"{}\n",
    }
    root = REPAIR_STANDIN / "project"
    project = {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
    return {"record": record_text(mimo_record(TASK)).encode(), "adapter": adapter, "workspace": workspace_tar(project)}


def _careless(registry, derived: str, work: Path) -> str:
    """The derived image plus one build layer that re-creates /opt/arena world-readable."""
    ref = ImageRef.parse(derived, registry=True)
    client = RegistryClient(ref.registry)
    fetched = client.get_manifest(ref.repository, ref.digest)
    manifest = oci_image.parse_manifest(fetched.raw, fetched.media_type)
    base = oci_image.BaseImage(manifest, client.get_blob_bytes(ref.repository, manifest.config.digest))
    layer = write_layer(
        [FileEntry("opt", "dir", 0o755), FileEntry("opt/arena", "dir", 0o755)], work, source_date_epoch=1
    )
    image = oci_image.derive(
        base,
        [oci_image.NewLayer(layer.digest, layer.diff_id, layer.size, f"{HISTORY_PREFIX}careless layer")],
        oci_image.ConfigChanges(),
        source_date_epoch=1,
    )
    return push_image(
        registry.client(),
        ref.repository,
        image.manifest_bytes,
        image.media_type,
        {image.manifest.config.digest: image.config_bytes, layer.digest: layer.path},
        tag="careless",
    ).reference


def _protected(runtime: ContainerRuntime, image: str, tmp: Path) -> dict:
    """protected-* of the check suite against a container of `image`, with the files the
    pulled image inherits (as `verify` computes them)."""
    pulled = pull(image, tmp / "oci")
    layout = Layout(tmp / "oci")
    config = oci_image.parse_config(layout.read_blob(pulled.config_digest))
    inherited = inherited_files(config, [(d.digest, layout.blob_path(d.digest)) for d in pulled.layers], "/opt/arena")
    runtime.pull(image)
    container = runtime.start(image, port=8000)
    try:
        exe = subprocess.run(
            [runtime.engine, *runtime.args.global_args, "exec", container.id, "readlink", "/proc/1/exe"],
            capture_output=True,
            text=True,
            check=True,
        )
        rec = Recorder("image")
        with Session(container.url) as session:
            image_checks.protected_checks(
                session, Target(url=container.url, inherited=inherited), all_cases()[0], 11, rec
            )
        return {
            "inherited": inherited,
            "exe": exe.stdout.strip(),
            "checks": {r.id.split("/", 1)[1]: r for r in rec.results},
        }
    finally:
        runtime.remove(container)


def test_derived_image_on_the_pyromat_standin(pyromat_runtime, tmp_path, local_registry, base_image, source_repo):
    stand = build_pyromat_standin(
        local_registry, base_image, tmp_path / "pyromat", **pyromat_inputs(), runtime=pyromat_runtime
    )
    client = RegistryClient(local_registry.address)
    ref = ImageRef.parse(stand.reference, registry=True)
    fetched = client.get_manifest(ref.repository, ref.digest)
    manifest = json.loads(fetched.raw)
    assert fetched.media_type == oci_image.DOCKER_MANIFEST and len(manifest["layers"]) == 6
    assert {l["mediaType"] for l in manifest["layers"]} == {oci_image.DOCKER_LAYER_GZIP}
    config = json.loads(client.get_blob_bytes(ref.repository, manifest["config"]["digest"]))["config"]
    assert (config["User"], config["WorkingDir"], config["Cmd"], config.get("Entrypoint")) == (
        "root",
        "/opt/arena",
        list(CMD),
        None,
    )
    assert {"PYTHONUNBUFFERED=1", "ENABLE_WEB_INTERFACE=false"} <= set(config["Env"])
    assert config["ExposedPorts"] == {"8000/tcp": {}}
    assert config["Labels"] == {"org.opencontainers.image.source": SOURCE_LABEL}

    repo = clone(source_repo, tmp_path / "r")
    proc, _ = run_build(repo, local_registry, stand.reference)
    assert proc.returncode == 0, proc.stderr
    derived = proc.stdout.strip().splitlines()[-1]
    dref = ImageRef.parse(derived, registry=True)
    dfetched = client.get_manifest(dref.repository, dref.digest)
    dmanifest = json.loads(dfetched.raw)
    # The base's family and every base layer are kept; the config is the project's.
    assert dfetched.media_type == oci_image.DOCKER_MANIFEST
    assert [l["digest"] for l in dmanifest["layers"][:6]] == list(stand.layers)
    dconfig = json.loads(client.get_blob_bytes(dref.repository, dmanifest["config"]["digest"]))["config"]
    assert dconfig["Cmd"] == [
        "/opt/arena-python/bin/python3",
        "-m",
        "env.server.serve",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
    ]
    assert dconfig["WorkingDir"] == "/opt/arena" and dconfig["User"] == "0"
    assert dconfig["Labels"]["org.opencontainers.image.base.digest"] == ref.digest
    assert dconfig["Labels"]["org.opencontainers.image.source"] != SOURCE_LABEL

    runtime = ContainerRuntime()
    good = _protected(runtime, derived, tmp_path / "good")
    # The server runs on the base's CPython 3.12 (the python3 link resolves to it).
    assert good["exe"] == "/opt/arena-python/bin/python3.12"
    assert good["inherited"] == tuple(f"/opt/arena/{n}" for n in sorted(INHERITED))
    checks = good["checks"]
    assert checks["protected-inherited"].passed, checks["protected-inherited"].observed
    assert checks["protected-inherited"].observed == [f"DENIED {p}" for p in good["inherited"]]
    assert checks["protected-inherited"].detail.startswith(f"{len(INHERITED)} file(s) the base holds: ")
    assert all(c.passed for c in checks.values()), {k: c.observed for k, c in checks.items() if not c.passed}

    # Teeth: one careless layer re-creating /opt/arena 0755 opens the record and the adapter.
    careless = _protected(runtime, _careless(local_registry, derived, tmp_path / "careless"), tmp_path / "bad")
    bad = careless["checks"]["protected-inherited"]
    assert not bad.passed and "READABLE /opt/arena/instance.json" in bad.observed
