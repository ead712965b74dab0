"""The derived image's config values, as one typed record.

Every value is a function of release.toml, the base's recorded name and digest, the
image-input revision and SOURCE_DATE_EPOCH; the record goes into dist/build.json and
provenance.json, so a rebuilder can derive the config (and compare it field by field).
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.config import ReleaseConfig
from pipeline.formats import epoch_time
from pipeline.image.oci.image import ConfigChanges
from pipeline.image.payload import VendoredTaskFile, tasks_file_in_image

# The variable naming the vendored task file, as env/server/app.py reads it. env/ is the
# image's own program and keeps its own copy (it must not import the pipeline); the
# check suite starts the server with this image config, so a mismatch fails a check.
TASKS_FILE_VARIABLE = "ARENA_TASKS_FILE"


@dataclass(frozen=True)
class ImageConfigValues:
    """Every value the build writes into the image config (recorded in provenance.json,
    so a rebuilder derives the config from the records alone)."""

    cmd: tuple[str, ...]
    entrypoint: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    working_dir: str
    exposed_ports: tuple[str, ...]
    user: str
    labels: tuple[tuple[str, str], ...]

    def changes(self) -> ConfigChanges:
        return ConfigChanges(
            cmd=self.cmd,
            entrypoint=self.entrypoint,
            env=dict(self.env),
            working_dir=self.working_dir,
            exposed_ports=self.exposed_ports,
            labels=dict(self.labels),
            user=self.user,
        )

    def to_json(self) -> dict:
        return {
            "cmd": list(self.cmd),
            "entrypoint": list(self.entrypoint),
            "env": dict(self.env),
            "working_dir": self.working_dir,
            "exposed_ports": list(self.exposed_ports),
            "user": self.user,
            "labels": dict(self.labels),
        }

    @classmethod
    def from_json(cls, data: dict) -> ImageConfigValues:
        return cls(
            cmd=tuple(data["cmd"]),
            entrypoint=tuple(data["entrypoint"]),
            env=tuple(sorted(data["env"].items())),
            working_dir=data["working_dir"],
            exposed_ports=tuple(data["exposed_ports"]),
            user=data["user"],
            labels=tuple(sorted(data["labels"].items())),
        )


def image_config(
    cfg: ReleaseConfig,
    *,
    base_name: str,
    base_digest: str,
    revision: str,
    source_date_epoch: int,
    vendored: VendoredTaskFile | None,
) -> ImageConfigValues:
    """The derived image's config values: from release.toml, the base's recorded name and
    digest, the image-input revision and SOURCE_DATE_EPOCH only."""
    env = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
    tasks_file = tasks_file_in_image(cfg.app_dir, vendored)
    if tasks_file:
        env[TASKS_FILE_VARIABLE] = tasks_file
    labels = {
        "org.opencontainers.image.source": cfg.source_url,
        "org.opencontainers.image.revision": revision,
        "org.opencontainers.image.created": epoch_time(source_date_epoch),
        "org.opencontainers.image.base.digest": base_digest,
        "org.opencontainers.image.base.name": base_name,
        "org.opencontainers.image.title": cfg.name,
    }
    return ImageConfigValues(
        cmd=(cfg.python, "-m", "env.server.serve", "--host", "0.0.0.0", "--port", str(cfg.port)),
        entrypoint=(),
        env=tuple(sorted(env.items())),
        working_dir=cfg.app_dir,
        exposed_ports=(f"{cfg.port}/tcp",),
        user="0",
        labels=tuple(sorted(labels.items())),
    )
