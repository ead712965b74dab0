"""Install the host tools a release needs (Debian/Ubuntu, as root).

`python -m pipeline setup` is idempotent: it installs only what is missing, runs
`apt-get update` at most once, and says exactly what it is doing.
"""

from __future__ import annotations

import os
import shutil

from pipeline import _proc
from pipeline.errors import ToolError
from pipeline.progress import say

# tool on PATH -> Debian package that provides it
TOOLS: dict[str, str] = {
    "git": "git",
    "podman": "podman",
    "runc": "runc",
    "skopeo": "skopeo",
    "docker-registry": "docker-registry",
    "nginx": "nginx-light",
    "mmdebstrap": "mmdebstrap",
    # only the reproducibility tests use it: the same build an hour later
    "faketime": "faketime",
    # the independent variation harness (tests) and reproduce's explanation of a mismatch
    "reprotest": "reprotest",
    "disorderfs": "disorderfs",
    "diffoscope": "diffoscope-minimal",
    # reprotest's user_group variation runs the build as another user through sudo
    "sudo": "sudo",
}
# packages without a tool of their own that podman needs for rootful networking
EXTRA_PACKAGES = ("uidmap", "slirp4netns", "fuse-overlayfs", "containernetworking-plugins")


def missing_packages() -> list[str]:
    """Debian packages whose tools are not on PATH (extras only when podman is missing)."""
    missing = [pkg for tool, pkg in TOOLS.items() if shutil.which(tool) is None]
    if "podman" in missing:
        missing += list(EXTRA_PACKAGES)
    return missing


def ensure_tools() -> list[str]:
    """Install missing tools with apt-get; return what was installed."""
    missing = missing_packages()
    if not missing:
        return []
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ToolError(
            "missing host tools: " + ", ".join(missing),
            hint="install them as root (Debian: apt-get install " + " ".join(missing) + ")",
        )
    say(f"setup: installing {' '.join(missing)} with apt-get")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    _proc.run(["apt-get", "update", "-qq"], env=env, timeout=900)
    _proc.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
              env=env, timeout=1800)
    still = missing_packages()
    if still:
        raise ToolError("apt-get finished but tools are still missing", expected="none",
                        actual=", ".join(still))
    if "podman" in missing:
        _first_use("podman")
    return missing


def _first_use(engine: str) -> None:
    """Let one process make the engine's store, database and network set-up on a new
    machine, before anything starts containers side by side: on a machine whose first two
    containers were started at the same moment by one release, podman never removed their
    CNI port forwards (DNAT of two loopback ports to addresses nobody holds), and every
    later server that got one of those ports by chance was unreachable."""
    _proc.run([engine, "info"], check=False, timeout=120)
