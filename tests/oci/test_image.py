"""Image config and manifest: deterministic bytes, both families, index selection."""

from __future__ import annotations

import json

import pytest

from pipeline.image.oci import digest
from pipeline.image.oci.image import (
    DOCKER,
    DOCKER_CONFIG,
    DOCKER_LAYER_GZIP,
    DOCKER_LIST,
    DOCKER_MANIFEST,
    OCI,
    OCI_CONFIG,
    OCI_INDEX,
    OCI_LAYER_GZIP,
    OCI_MANIFEST,
    BaseImage,
    ConfigChanges,
    Index,
    ManifestError,
    NewLayer,
    UnsupportedPlatform,
    derive,
    parse,
    parse_config,
    parse_manifest,
)

EPOCH = 1_700_000_000


def _layer(n: int) -> NewLayer:
    return NewLayer(
        digest=digest.of_bytes(b"gz%d" % n),
        diff_id=digest.of_bytes(b"tar%d" % n),
        size=100 + n,
        created_by=f"layer {n}",
    )


CHANGES = ConfigChanges(
    cmd=("/opt/arena-python/bin/python3", "-m", "uvicorn", "env.server.app:app"),
    env={"ARENA_TASKS_FILE": "/opt/arena/vendor/x/tasks.py"},
    working_dir="/opt/arena",
    exposed_ports=("8000/tcp",),
    labels={"org.opencontainers.image.revision": "abc"},
    user="root",
)


def _base(family=OCI, arch="amd64", extra=None):
    img = derive(
        None, [_layer(0)], ConfigChanges(env={"PATH": "/usr/bin"}, cmd=("sh",)), source_date_epoch=1, family=family
    )
    cfg = json.loads(img.config_bytes)
    cfg["architecture"] = arch
    cfg.update(extra or {})
    config_bytes = json.dumps(cfg, indent=1).encode()  # a base's bytes need not be canonical
    manifest = parse_manifest(img.manifest_bytes)
    manifest = type(manifest)(
        manifest.media_type,
        type(manifest.config)(family.config, digest.of_bytes(config_bytes), len(config_bytes)),
        manifest.layers,
    )
    return BaseImage(manifest, config_bytes)


def test_derived_bytes_are_canonical_and_deterministic():
    a = derive(_base(), [_layer(1), _layer(2)], CHANGES, source_date_epoch=EPOCH)
    b = derive(_base(), [_layer(1), _layer(2)], CHANGES, source_date_epoch=EPOCH)
    assert a.manifest_bytes == b.manifest_bytes and a.config_bytes == b.config_bytes
    assert a.manifest_digest == digest.of_bytes(a.manifest_bytes)
    for raw in (a.manifest_bytes, a.config_bytes):
        obj = json.loads(raw)
        assert raw == json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    c = derive(_base(), [_layer(1), _layer(2)], CHANGES, source_date_epoch=EPOCH + 1)
    assert c.manifest_digest != a.manifest_digest


def test_config_carries_changes_history_and_diff_ids():
    img = derive(_base(), [_layer(1)], CHANGES, source_date_epoch=EPOCH)
    cfg = parse_config(img.config_bytes)
    assert cfg.created == "2023-11-14T22:13:20Z"
    assert cfg.config.cmd == CHANGES.cmd and cfg.config.working_dir == "/opt/arena"
    assert cfg.config.exposed_ports == ("8000/tcp",) and cfg.config.user == "root"
    assert cfg.config.env_map() == {"PATH": "/usr/bin", "ARENA_TASKS_FILE": "/opt/arena/vendor/x/tasks.py"}
    assert cfg.config.labels["org.opencontainers.image.revision"] == "abc"
    assert cfg.diff_ids == (_layer(0).diff_id, _layer(1).diff_id)
    assert cfg.history[-1].created == "2023-11-14T22:13:20Z"
    assert cfg.history[-1].created_by == "layer 1"
    assert (cfg.architecture, cfg.os) == ("amd64", "linux")


def test_oci_base_gets_oci_media_types():
    img = derive(_base(OCI), [_layer(1)], CHANGES, source_date_epoch=EPOCH)
    assert img.manifest.media_type == OCI_MANIFEST
    assert img.manifest.config.media_type == OCI_CONFIG
    assert img.manifest.layers[-1].media_type == OCI_LAYER_GZIP


def test_schema2_base_keeps_schema2_family_and_round_trips():
    img = derive(_base(DOCKER), [_layer(1)], CHANGES, source_date_epoch=EPOCH, family=OCI)
    assert img.media_type == DOCKER_MANIFEST
    assert img.manifest.config.media_type == DOCKER_CONFIG
    assert [l.media_type for l in img.manifest.layers] == [DOCKER_LAYER_GZIP] * 2
    parsed = parse_manifest(img.manifest_bytes)
    assert parsed == img.manifest
    assert parsed.to_bytes() == img.manifest_bytes
    assert parsed.compressed_size == _layer(0).size + _layer(1).size


def test_unknown_base_config_fields_survive():
    base = _base(DOCKER, extra={"docker_version": "24.0.5", "variant": ""})
    cfg = json.loads(derive(base, [], CHANGES, source_date_epoch=EPOCH).config_bytes)
    assert cfg["docker_version"] == "24.0.5"


def test_base_config_must_match_its_descriptor():
    base = _base()
    tampered = BaseImage(base.manifest, base.config_bytes.replace(b"amd64", b"amd64 "))
    with pytest.raises(Exception, match="base image config does not match its digest"):
        derive(tampered, [], CHANGES, source_date_epoch=EPOCH)


def test_non_amd64_base_config_refused():
    with pytest.raises(UnsupportedPlatform, match="linux/arm64"):
        derive(_base(arch="arm64"), [], CHANGES, source_date_epoch=EPOCH)


def _index(media_type, platforms):
    return json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": media_type,
            "manifests": [
                {
                    "mediaType": OCI_MANIFEST,
                    "digest": digest.of_bytes(p.encode()),
                    "size": 10,
                    "platform": {"os": p.split("/")[0], "architecture": p.split("/")[1]},
                }
                for p in platforms
            ],
        }
    ).encode()


@pytest.mark.parametrize("media_type", [OCI_INDEX, DOCKER_LIST])
def test_index_selects_linux_amd64(media_type):
    idx = parse(_index(media_type, ["linux/arm64", "linux/amd64"]))
    assert isinstance(idx, Index)
    assert idx.select().digest == digest.of_bytes(b"linux/amd64")


def test_non_amd64_only_index_refused_naming_platforms():
    idx = parse(_index(OCI_INDEX, ["linux/arm64", "linux/s390x"]))
    with pytest.raises(UnsupportedPlatform) as err:
        idx.select()
    assert "linux/arm64, linux/s390x" in str(err.value)


def test_malformed_and_schema1_manifests_refused():
    with pytest.raises(ManifestError):
        parse(b"not json")
    with pytest.raises(ManifestError, match="schema version"):
        parse(b'{"schemaVersion": 1, "fsLayers": []}')
    with pytest.raises(Exception, match="not a sha256 digest"):
        parse(
            json.dumps(
                {
                    "schemaVersion": 2,
                    "mediaType": OCI_MANIFEST,
                    "layers": [],
                    "config": {"mediaType": OCI_CONFIG, "digest": "md5:x", "size": 1},
                }
            ).encode()
        )
