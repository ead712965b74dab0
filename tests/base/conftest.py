"""Fixtures of tests/base: see basefixtures.py (shared with tests/runtime)."""

from .basefixtures import base_image, lock_venv  # noqa: F401
