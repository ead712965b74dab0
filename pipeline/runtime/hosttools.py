"""Install the host tools a release needs (Debian/Ubuntu, as root).

`python -m pipeline setup` is idempotent: it installs only what is missing, runs
`apt-get update` at most once, and says exactly what it is doing.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from pipeline import _proc
from pipeline.errors import ToolError
from pipeline.progress import say
from pipeline.runtime import dockerd

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
    # sigstore-js, the second implementation that verifies the registry's bundles (tests)
    "node": "nodejs",
    "npm": "npm",
}
# packages without a tool of their own that podman needs for rootful networking
EXTRA_PACKAGES = ("uidmap", "slirp4netns", "fuse-overlayfs", "containernetworking-plugins")
# Files looked for by path, not on PATH -> the Debian package that provides them: the private
# Docker engine is Debian's docker.io, engine and client (another `docker` may come first on
# PATH: pipeline/runtime/dockerd.py).
FILES: dict[str, str] = {
    dockerd.DOCKERD: dockerd.PACKAGE,
    dockerd.DOCKER_CLIENT: dockerd.PACKAGE,
    dockerd.CONTAINERD: "containerd",
}


def missing_packages() -> list[str]:
    """Debian packages whose tools are not on PATH or at their path (extras only when podman
    is missing)."""
    missing = [pkg for tool, pkg in TOOLS.items() if shutil.which(tool) is None]
    if "podman" in missing:
        missing += list(EXTRA_PACKAGES)
    missing += [pkg for path, pkg in FILES.items() if not os.access(path, os.X_OK) and pkg not in missing]
    return list(dict.fromkeys(missing))


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
    _proc.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], env=env, timeout=1800)
    still = missing_packages()
    if still:
        raise ToolError("apt-get finished but tools are still missing", expected="none", actual=", ".join(still))
    if "podman" in missing:
        _first_use("podman")
    return missing


def _first_use(engine: str) -> None:
    """Let one process make the engine's store and database on a new machine, before
    anything starts containers side by side."""
    _proc.run([engine, "info"], check=False, timeout=120)


# Where rootful podman (and `ip netns`) bind-mount each container's network namespace.
NETNS_RUN_DIR = "/run/netns"


def _propagation(path: str) -> str | None:
    """How the topmost mount at exactly `path` propagates ("shared", "slave", "private"),
    from /proc/self/mountinfo; None when `path` is not a mount point."""
    found = None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]) != path:
            continue
        optional = fields[6 : fields.index("-")]
        found = (
            "shared"
            if any(f.startswith("shared:") for f in optional)
            else "slave"
            if any(f.startswith("master:") for f in optional)
            else "private"
        )
    return found


def shared_netns_dir(path: str = NETNS_RUN_DIR) -> bool:
    """Make `path` a shared mount point of its own, as podman does the first time it makes a
    container's network namespace; True when it had to. Done once, here, before anything
    starts containers side by side: podman checks, then bind-mounts the directory on itself
    in two steps, and two containers started at the same moment on a new machine both did
    it. One container's namespace was then mounted under the other's bind mount, its network
    teardown failed when it was removed, and its CNI port forward (a DNAT of a loopback port
    to an address nobody holds) stayed, taking that port from every later server."""
    state = _propagation(path)
    if state == "shared":
        return False
    os.makedirs(path, mode=0o755, exist_ok=True)
    if state is None:
        _proc.run(["mount", "--rbind", path, path])
    _proc.run(["mount", "--make-rshared", path])
    return True


def prepare_engine() -> list[str]:
    """What a root podman needs before containers start side by side (idempotent); the
    steps it took, for the log."""
    if os.geteuid() != 0 or shutil.which("podman") is None:
        return []  # rootless podman keeps its namespaces under XDG_RUNTIME_DIR; docker has a daemon
    return [f"made {NETNS_RUN_DIR} a shared mount point"] if shared_netns_dir() else []
