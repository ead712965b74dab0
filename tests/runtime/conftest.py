"""tests/runtime uses the base image of tests/base (built once, cached in .release/)."""

from ..base.basefixtures import base_image  # noqa: F401
