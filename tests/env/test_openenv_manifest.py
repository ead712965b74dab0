"""env/openenv.yaml: the environment as an OpenEnv package, read by openenv-core's own loaders
and held to what the server serves (/schema, /metadata), how the image runs it and where it ships."""

from __future__ import annotations

import pytest
import yaml
from openenv.auto._discovery import _create_env_info_from_package, _load_manifest_from_package
from openenv.core.containers.runtime.daytona_provider import DaytonaProvider

from pipeline import config as config_mod
from pipeline.image import imageconfig, payload

from .conftest import REPO_ROOT

MANIFEST = REPO_ROOT / "env" / "openenv.yaml"
FIELDS = {"spec_version", "name", "description", "runtime", "app", "port", "action", "observation"}


def test_openenv_core_reads_the_manifest_of_the_env_package():
    # openenv-core's discovery reads openenv.yaml from the package's resources, as for an
    # installed openenv-* distribution: `env` is the package here.
    manifest = _load_manifest_from_package("openenv-arena", "env")
    assert manifest is not None and set(manifest) == FIELDS
    info = _create_env_info_from_package("openenv-arena", "env", "0")
    assert info is not None
    assert (info.spec_version, info.description) == (1, manifest["description"])
    assert (info.action_class_name, info.observation_class_name) == ("ShellAction", "ShellObservation")
    # its runtimes take the uvicorn target from `app`
    assert DaytonaProvider._parse_app_field(MANIFEST.read_text()) == "env.server.app:app"


def test_the_manifest_names_the_models_the_app_and_the_port_the_image_runs():
    from env.server import models, serve

    manifest = yaml.safe_load(MANIFEST.read_text())
    assert manifest["action"] == models.ShellAction.__name__
    assert manifest["observation"] == models.ShellObservation.__name__
    assert manifest["app"] == serve.APP
    cfg = config_mod.load(REPO_ROOT / "release.toml")
    values = imageconfig.image_config(
        cfg, base_name="b", base_digest="sha256:" + "0" * 64, revision="1" * 40, source_date_epoch=0, vendored=None
    )
    assert values.cmd[1:3] == ("-m", "env.server.serve") and values.working_dir == cfg.app_dir
    assert manifest["port"] == cfg.port == serve.DEFAULT_PORT
    assert values.exposed_ports == (f"{manifest['port']}/tcp",)


@pytest.mark.parametrize("tasks", ["first-party", "vendored"])
def test_the_manifest_ships_in_the_env_layer(tasks, tmp_path):
    vendored = None
    if tasks == "vendored":
        (tmp_path / "tasks.py").write_text("TASKS = []\n")
        (tmp_path / "LICENSE").write_text("MIT\n")
        vendored = payload.VendoredTaskFile("upstream", tmp_path / "tasks.py", tmp_path / "LICENSE")
    curriculum = config_mod.curriculum_file(config_mod.load())
    layers = {layer.name: layer for layer in payload.app_layers(REPO_ROOT, "/opt/arena", vendored, curriculum)}
    entry = next(e for e in layers["env"].entries if e.path == "opt/arena/env/openenv.yaml")
    assert entry.source == MANIFEST.read_bytes()
    assert payload.packed("env/openenv.yaml", first_party_tasks=tasks == "first-party")


def mismatches(manifest: dict, schema: dict, metadata: dict) -> list[str]:
    """How the manifest differs from what the server serves: the models /schema names, the name
    /metadata gives, and its description (which adds the curriculum's figures to the manifest's)."""
    served = {
        "action": schema["action"]["title"],
        "observation": schema["observation"]["title"],
        "name": metadata["name"],
    }
    out = [f"{k}: manifest {manifest.get(k)!r}, served {v!r}" for k, v in served.items() if manifest.get(k) != v]
    if not metadata["description"].startswith(f"{manifest.get('description')};"):
        out.append(f"description: manifest {manifest.get('description')!r}, served {metadata['description']!r}")
    return out


def test_the_served_schema_and_metadata_match_the_manifest(server):
    manifest = yaml.safe_load(MANIFEST.read_text())
    (status_schema, schema), (status_metadata, metadata) = server.get("/schema"), server.get("/metadata")
    assert (status_schema, status_metadata) == (200, 200)
    assert mismatches(manifest, schema, metadata) == []
    # Teeth: a manifest naming other models, another name or another description is caught.
    for field, value in (
        ("action", "EchoAction"),
        ("observation", "EchoObservation"),
        ("name", "echo_env"),
        ("description", "An echo environment"),
    ):
        assert [m.split(":")[0] for m in mismatches({**manifest, field: value}, schema, metadata)] == [field]
