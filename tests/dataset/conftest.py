"""Release records with their dataset folder (dist/dataset/), as the release writes them."""

from __future__ import annotations

import pytest

from ..attest.conftest import EPOCH, Records, make_records


@pytest.fixture
def records(tmp_path, monkeypatch) -> Records:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(EPOCH))
    return make_records(tmp_path / "records")
