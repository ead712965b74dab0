"""Sessions: each is a few lines that call the pipeline's API (`python -m pipeline ...`).

`nox -l` lists them. `tests` is the default; release-only sessions are
`default=False` and tagged "release".
"""

from __future__ import annotations

import os

import nox

nox.needs_version = ">=2024.3.2"
nox.options.default_venv_backend = "venv"
nox.options.sessions = ["tests"]
nox.options.reuse_venv = "yes"

PYTHON = "3.11"
PYPROJECT = nox.project.load_toml("pyproject.toml")
RUNTIME_LOCK = "locks/runtime.txt"


def _install(session: nox.Session, *groups: str) -> None:
    """The slim OpenEnv runtime from the hash-pinned lock, then the named groups."""
    session.install("--no-deps", "--require-hashes", "-r", RUNTIME_LOCK)
    for group in groups:
        session.install(*nox.project.dependency_groups(PYPROJECT, group))


def _setup_host(session: nox.Session) -> None:
    """Install missing system tools (podman, registry, nginx, mmdebstrap) as root."""
    session.run("python", "-m", "pipeline", "setup")


def _pipeline(session: nox.Session, command: str, *args: str) -> None:
    session.run("python", "-m", "pipeline", command, *args, *session.posargs)


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Run the whole test suite (unit, integration with real registry/podman, end-to-end release)."""
    _install(session, "pipeline", "test")
    _setup_host(session)
    session.run("pytest", *(session.posargs or ["-q", "--durations=20"]))


@nox.session(python=PYTHON)
def serve(session: nox.Session) -> None:
    """Serve the built image in a container (nox -s serve -- --host-mode: on this host, changing it)."""
    _install(session, "pipeline")
    _pipeline(session, "serve")


@nox.session(python=PYTHON, default=False, tags=["release"])
def registry(session: nox.Session) -> None:
    """Start, stop or show the local loopback registry: nox -s registry -- start|stop|status."""
    _install(session, "pipeline")
    _setup_host(session)
    _pipeline(session, "registry")


@nox.session(python=PYTHON, default=False, tags=["release"])
def lock(session: nox.Session) -> None:
    """Regenerate the hash-pinned runtime wheel lock (locks/runtime.txt) from locks/runtime.in."""
    _install(session, "pipeline")
    _pipeline(session, "lock")


@nox.session(python=PYTHON, default=False, tags=["release"])
def base(session: nox.Session) -> None:
    """Build the local base image (mmdebstrap + slim runtime), push it, pin it in locks/base.json."""
    _install(session, "pipeline")
    _setup_host(session)
    _pipeline(session, "base")


@nox.session(python=PYTHON, default=False, tags=["release"])
def vendor(session: nox.Session) -> None:
    """Fetch and verify the pinned upstream sources into vendor/ (-- --profile P --mirror DIR)."""
    _install(session, "pipeline")
    _pipeline(session, "vendor")


@nox.session(python=PYTHON, default=False, tags=["release"])
def build(session: nox.Session) -> None:
    """Build the derived image daemonlessly from the base digest; push it to the registry."""
    _install(session, "pipeline")
    _setup_host(session)
    _pipeline(session, "build")


@nox.session(python=PYTHON, default=False, tags=["release"])
def verify(session: nox.Session) -> None:
    """Pull an image anonymously by digest and run the whole check suite: -- <name@digest> [--shard I/N]."""
    _install(session, "pipeline")
    _setup_host(session)
    _pipeline(session, "verify")


@nox.session(python=PYTHON, default=False, tags=["release", "ci"])
def checks(session: nox.Session) -> None:
    """The suite against running servers (-- --url URL [--shard I/N]), or -- merge SHARD.json..."""
    _install(session, "pipeline")
    _pipeline(session, "checks")


@nox.session(python=PYTHON, default=False, tags=["release"])
def release(session: nox.Session) -> None:
    """The whole release: vendor, build, SBOM, attest, sign, push, pull back, verify, records."""
    _install(session, "pipeline")
    _setup_host(session)
    _pipeline(session, "release")


@nox.session(python=PYTHON, default=False, tags=["release", "ci"])
def reproduce(session: nox.Session) -> None:
    """Rebuild the commit provenance.json records (base from a registry or from its lock) and
    compare the whole image digest, explaining any difference."""
    _install(session, "pipeline")
    # mmdebstrap rebuilds the base when no registry serves it; diffoscope explains a mismatch.
    _setup_host(session)
    _pipeline(session, "reproduce")


@nox.session(python=PYTHON, default=False, tags=["release", "ci"])
def audit(session: nox.Session) -> None:
    """Verify the committed release records offline: signatures, subjects, SBOM, pins."""
    _install(session, "pipeline")
    _pipeline(session, "audit")


@nox.session(python=PYTHON, default=False, tags=["bench"])
def bench(session: nox.Session) -> None:
    """Run the benchmarks and print their figures (-- NAME to run one)."""
    _install(session, "pipeline", "test")
    _setup_host(session)
    names = session.posargs or sorted(
        f[len("bench_"):-3] for f in os.listdir("benchmarks") if f.startswith("bench_") and f.endswith(".py")
    )
    for name in names:
        session.run("python", f"benchmarks/bench_{name}.py")
