"""The pipeline's locked toolchain (pipeline/sources/toolchain.py): what a release records as its
builder, the audit's check of it against uv.lock, and the staleness check CI runs."""

from __future__ import annotations

import shutil
from dataclasses import replace

import pytest

from pipeline.config import REPO_ROOT
from pipeline.errors import SourceError, VerificationError
from pipeline.sources import toolchain

LOCK = toolchain.load_lock(REPO_ROOT)


@pytest.fixture(scope="module")
def installed() -> tuple[toolchain.Distribution, ...]:
    return toolchain.installed(LOCK)


def test_the_running_toolchain_is_the_locked_one(installed):
    toolchain.verify(installed, LOCK, where="uv.lock")
    names = {d.name for d in installed}
    assert set(LOCK.groups[toolchain.PIPELINE_GROUP]) <= names
    sigstore = next(d for d in installed if d.name == "sigstore")
    assert sigstore.file.endswith(".whl") and sigstore.sha256 in {
        f.sha256 for f in LOCK.versions("sigstore")[sigstore.version].files
    }


@pytest.mark.parametrize(
    "forge, message",
    [
        (lambda d: replace(d, sha256="0" * 64), "sha256 of"),
        (lambda d: replace(d, version="0.0.1"), "version vs uv.lock"),
        (lambda d: replace(d, file="sigstore-0.0.1-py3-none-any.whl"), "file vs uv.lock"),
    ],
    ids=["hash", "version", "file"],
)
def test_a_toolchain_entry_the_lock_does_not_pin_is_refused(installed, forge, message):
    forged = tuple(forge(d) if d.name == "sigstore" else d for d in installed)
    with pytest.raises(VerificationError, match=message):
        toolchain.verify(forged, LOCK, where="uv.lock")


def test_a_toolchain_missing_a_pipeline_member_or_empty_is_refused(installed):
    with pytest.raises(VerificationError, match="missing .*cyclonedx-python-lib"):
        toolchain.verify(tuple(d for d in installed if d.name != "cyclonedx-python-lib"), LOCK, where="uv.lock")
    with pytest.raises(VerificationError, match="lists no toolchain"):
        toolchain.verify((), LOCK, where="uv.lock")


def test_a_distribution_installed_outside_the_lock_is_named(tmp_path):
    """A site-packages holding a distribution uv.lock does not pin cannot be recorded as locked."""
    info = tmp_path / "rogue_signer-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rogue-signer\nVersion: 1.0\n")
    with pytest.raises(SourceError, match="rogue-signer 1.0 is installed .* uv.lock does not pin it"):
        toolchain.installed(LOCK, [str(tmp_path)])


def _project_copy(tmp_path):
    root = tmp_path / "project"
    (root / "locks").mkdir(parents=True)
    for rel in ("pyproject.toml", "uv.lock", *(f"locks/{p.name}" for p in (REPO_ROOT / "locks").glob("*"))):
        if (REPO_ROOT / rel).is_file():
            shutil.copyfile(REPO_ROOT / rel, root / rel)
    return root


def test_the_committed_lock_and_exports_are_current(tmp_path):
    """What CI's tests session checks first (`pipeline lock-toolchain --check`), here on a copy."""
    toolchain.check(_project_copy(tmp_path))


def test_a_stale_lock_or_export_fails_the_check(tmp_path):
    root = _project_copy(tmp_path)
    pyproject = root / "pyproject.toml"
    text = pyproject.read_text()
    pyproject.write_text(text.replace('"packaging==26.4",', '"packaging==26.4",\n    "idna==3.20",', 1))
    with pytest.raises(SourceError, match="uv.lock does not follow from pyproject.toml"):
        toolchain.check(root)
    pyproject.write_text(text)
    export = root / "locks" / "lint.txt"
    export.write_text(export.read_text().replace("ruff==", "ruff===", 1))
    with pytest.raises(SourceError, match="locks/lint.txt is not uv's export"):
        toolchain.check(root)
