"""The checks' OpenEnv client (pipeline/checks/client.py) in a process of its own, as
`nox -s verify` and a release run it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CHECKER_IMPORTS = """
import sys
from pipeline.checks.client import _client_class
from pipeline.checks.conformance import validate
_client_class()
from openenv.cli._validation import validate_running_environment
print(sorted(m for m in ("fastmcp", "mcp") if m in sys.modules))
"""


def test_a_process_that_checks_a_server_does_not_import_openenv_mcp_tools():
    # Importing openenv-core's client imports its server side; its MCP environment module
    # (fastmcp and mcp, over a second of CPU) is replaced by the server's stand-in here too:
    # the checks host no environment. The validator the suite runs needs neither.
    out = subprocess.run(
        [sys.executable, "-c", CHECKER_IMPORTS],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "[]", out.stdout
