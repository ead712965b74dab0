"""The code paths the base lock's builder hash and reproduce's explanation name exist:
moving a module must move its name there too (the builder hash would otherwise fail
every release with FileNotFoundError, and reproduce would name no builder change)."""

from pathlib import Path

from pipeline import reproduce
from pipeline.image import base

PACKAGE = Path(base.__file__).resolve().parent.parent
REPO = PACKAGE.parent


def test_the_base_builder_modules_exist_and_hash():
    missing = [rel for rel in base.BUILDER_MODULES if not (PACKAGE / rel).is_file()]
    assert missing == []
    assert len(base.builder_sha256()) == 64


def test_the_image_builder_paths_reproduce_names_exist():
    missing = [rel for rel in reproduce.IMAGE_BUILDER if not (REPO / rel).is_file()]
    assert missing == []
