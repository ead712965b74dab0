"""tests/runtime uses the base image of tests/base (built once, cached in .release/)."""

import sys
from pathlib import Path

# The base fixtures live with the base tests; tests/ is not a package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "base"))

from basefixtures import base_image  # noqa: E402,F401
