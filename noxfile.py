"""Sessions: each is a few lines that call the pipeline's API (`python -m pipeline ...`).

`nox -l` lists them. `tests` is the default; release-only sessions are
`default=False` and tagged "release".
"""

from __future__ import annotations

import os
import tomllib

import nox

nox.needs_version = ">=2024.3.2"
# uv makes every session's virtualenv and installs the locks (the README installs it beside
# nox). Without it nothing is made: a venv-made virtualenv failed late (setuptools is not in
# uv.lock) and, reused, kept failing after uv was installed. Each session stops at once, in
# `_install`, saying what to install.
# The uv pin is pyproject.toml's (tool.openenv-arena.bootstrap, tests/test_bootstrap_pins.py).
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "pyproject.toml"), "rb") as _pyproject:
    UV_PIN = next(
        spec for spec in tomllib.load(_pyproject)["tool"]["openenv-arena"]["bootstrap"] if spec.startswith("uv==")
    )
UV_MISSING = (
    f"uv is not installed; install it beside nox (`python3 -m pip install {UV_PIN}`, "
    "README, Set-up), then run nox again"
)
nox.options.default_venv_backend = "uv" if nox.virtualenv.HAS_UV else "none"
# uv checks TLS against this machine's trust store, as pip does (a proxy's CA may be there).
os.environ.setdefault("UV_NATIVE_TLS", "1")
nox.options.sessions = ["tests"]
nox.options.reuse_venv = "yes"

PYTHON = "3.11"
RUNTIME_LOCK = "locks/runtime.txt"
# CPython 3.12, the arena base's interpreter: this machine kind ships one under pyenv
# (its `python3.12` shim is not on the default version list, so nox cannot find it).
# RELEASE_PYTHON312_HOME names another build (tests/e2e/pyromat_standin.py copies the same one).
PYTHON312_HOME = os.environ.get("RELEASE_PYTHON312_HOME", "/root/.pyenv/versions/3.12.1")
PYTHON312 = os.environ.get("RELEASE_PYTHON312", os.path.join(PYTHON312_HOME, "bin", "python3.12"))
RUNTIME_LOCK_CP312 = "locks/runtime-cp312.txt"


def _group_lock(group: str) -> str:
    """pyproject.toml's dependency group `group`, exported hash-pinned from uv.lock with every
    distribution it needs (`nox -s lock-toolchain` writes it; pipeline/sources/toolchain.py)."""
    return f"locks/{group}.txt"


def _require_uv(session: nox.Session) -> None:
    """Stop the session at once, in one line, when there is no uv (nothing was made)."""
    if not nox.virtualenv.HAS_UV:
        session.error(UV_MISSING)


def _install(session: nox.Session, *groups: str, bytecode: bool = False) -> None:
    """The slim OpenEnv runtime and the named groups, each exactly as its hash-pinned lock says;
    with `bytecode`, compiled at install (uv does not by default, pip does).

    `--no-deps`: each export is its group's whole closure already, and the runtime lock is
    openenv-core without the UI/LLM libraries its metadata asks for."""
    _require_uv(session)
    env = {"UV_COMPILE_BYTECODE": "1"} if bytecode else {}
    # The runtime first and on its own: installed together, uv would take the exports' other
    # wheels of the same versions as allowed too, and pick another build than the image's.
    session.install("--no-deps", "--require-hashes", "-r", RUNTIME_LOCK, env=env)
    if groups:
        session.install("--no-deps", "--require-hashes", *(a for g in groups for a in ("-r", _group_lock(g))), env=env)


def _uv_env() -> dict[str, str]:
    """`UV` for the pipeline's uv adapter: the uv nox uses, even when it is not on PATH."""
    return {"UV": nox.virtualenv.UV} if nox.virtualenv.HAS_UV else {}


def _setup_host(session: nox.Session) -> None:
    """Install missing system tools (podman, registry, nginx, mmdebstrap) as root."""
    session.run("python", "-m", "pipeline", "setup")


# Ctrl-C reaches the pipeline too: give it this long to remove what it started (containers,
# the local registry) before nox's default of 0.3 s and SIGTERM would cut that short.
INTERRUPT_TIMEOUT_S = 120


def _pipeline(session: nox.Session, command: str, *args: str) -> None:
    session.run(
        "python",
        "-m",
        "pipeline",
        command,
        *args,
        *session.posargs,
        env=_uv_env(),
        interrupt_timeout=INTERRUPT_TIMEOUT_S,
    )


# The suite makes and removes hundreds of thousands of files (clones, virtualenvs, rootfs
# trees, the 100,000-file attacks). CI's machines keep / on ext4 without a journal, where
# creating a file after many were deleted costs a scan of the recently freed inodes (20,000
# small files: 9 s of system time there, 0.6 s on a tmpfs). So the run's temporary files
# go to /dev/shm when it is a tmpfs with room for them (pytest keeps only failed tests'
# directories: pyproject.toml), unless TMPDIR names a place already.
SCRATCH_TMPFS = "/dev/shm"
SCRATCH_MIN_FREE_GIB = 8


def _scratch_tmpdir() -> str | None:
    if os.environ.get("TMPDIR"):
        return None
    try:
        with open("/proc/self/mounts", encoding="utf-8") as mounts:
            tmpfs = any(line.split()[1:3] == [SCRATCH_TMPFS, "tmpfs"] for line in mounts)
        st = os.statvfs(SCRATCH_TMPFS)
    except OSError:
        return None
    free_gib = st.f_bavail * st.f_frsize / 2**30
    if not tmpfs or free_gib < SCRATCH_MIN_FREE_GIB or not os.access(SCRATCH_TMPFS, os.W_OK):
        return None
    return SCRATCH_TMPFS


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Run the whole test suite (unit, integration with real registry/podman, end-to-end release)."""
    # Compiled once here rather than in every process: where PYTHONDONTWRITEBYTECODE is set
    # (CI's machines) each `python -m pipeline` and `openenv` run of the suite (hundreds)
    # would compile what it imports from source again, 1.5 s of CPU each; compiling all of
    # it takes 15 s once. Sessions that run a few processes skip it. Not the test group:
    # pytest and its workers import those packages, and they write their bytecode (below);
    # compiling them all (pandas, numpy and pyarrow, for datasets) took 15 s more, mostly
    # for modules no test imports.
    _install(session, "pipeline", bytecode=True)
    session.install("--no-deps", "--require-hashes", "-r", _group_lock("test"), "-r", _group_lock("lint"))
    # The linter and the type checker first: a finding fails the run in seconds, before the hour of tests.
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")
    _setup_host(session)
    # Without PYTHONDONTWRITEBYTECODE (CI's machines set it) for the same reason: pytest
    # caches the modules it rewrites for assertions, and Python the checkout's own modules,
    # in __pycache__ (ignored by git, never in the image); with it, each of the six workers
    # parsed, rewrote and compiled every test module again, about 40 s of CPU a run.
    env: dict[str, str | None] = {"PYTHONDONTWRITEBYTECODE": None, **_uv_env()}
    scratch = _scratch_tmpdir()
    if scratch:
        session.log(f"temporary files in {scratch} (a tmpfs); set TMPDIR to choose another place")
        env["TMPDIR"] = scratch
    session.run("pytest", *(session.posargs or ["-q", "--durations=20"]), env=env)


def _command_session(name: str, doc: str, *, host_tools: bool, tags: tuple[str, ...]) -> None:
    """Register session `name`: install the pipeline (and, with `host_tools`, the system
    tools it drives), then `python -m pipeline <name> <posargs>`."""

    def run(session: nox.Session) -> None:
        _install(session, "pipeline")
        if host_tools:
            _setup_host(session)
        _pipeline(session, name)

    run.__doc__ = doc
    nox.session(run, python=PYTHON, name=name, default=False, tags=list(tags))


# One session per pipeline command (pipeline/cli.py lists them all):
# name, needs host tools (podman, registry, nginx, mmdebstrap, diffoscope), tags, what it does.
for _name, _host_tools, _tags, _doc in (
    (
        "serve",
        False,
        (),
        "Serve the last build's image (from dist/oci) in a container on 127.0.0.1:8000 "
        "(-- --port N; -- --engine docker: the private Docker engine; -- --host-mode: on "
        "this host, changing it).",
    ),
    (
        "registry",
        True,
        ("release",),
        "Start, stop or show the local loopback registry: nox -s registry -- start|stop|status.",
    ),
    (
        "docker-engine",
        False,
        ("release",),
        "Start, stop or show the pipeline's private Docker engine "
        "(a socket of its own under .release/docker): "
        "nox -s docker-engine -- start|stop|status.",
    ),
    (
        "lock",
        False,
        ("release",),
        "Regenerate the hash-pinned runtime wheel locks (locks/runtime.txt, and "
        "locks/runtime-cp312.txt for the arena base's CPython 3.12) from "
        "locks/runtime.in.",
    ),
    (
        "lock-toolchain",
        False,
        (),
        "Re-lock the pipeline's toolchain: uv.lock from pyproject.toml's "
        "dependency groups, and each group's hashed export locks/<group>.txt "
        "(-- --check: fail if either is stale).",
    ),
    (
        "base",
        True,
        ("release",),
        "Build the local base image (mmdebstrap + slim runtime), push it, pin it in locks/base.json.",
    ),
    (
        "vendor",
        False,
        ("release",),
        "Fetch and verify the pinned upstream sources into vendor/ (-- --profile P --mirror DIR).",
    ),
    (
        "build",
        True,
        ("release",),
        "Build the derived image daemonlessly from the base digest; push it to the registry.",
    ),
    (
        "verify",
        True,
        ("release",),
        "Pull an image anonymously by digest and run the whole check suite "
        "under podman and the private Docker engine: -- <name@digest> [--shard I/N].",
    ),
    (
        "repair-checks",
        True,
        ("release",),
        "Repair-check any MiMo repair image: -- <name@digest> --task TASK_ID --reference SCRIPT [--out FILE.json].",
    ),
    (
        "checks",
        False,
        ("release", "ci"),
        "The suite against running servers (-- --url URL [--shard I/N]), or -- merge SHARD.json...",
    ),
    (
        "release",
        True,
        ("release",),
        "The whole release: vendor, build, SBOM, attest, sign, push, pull back, verify, records.",
    ),
    # mmdebstrap rebuilds the base when no registry serves it; diffoscope explains a mismatch.
    (
        "reproduce",
        True,
        ("release", "ci"),
        "Rebuild the commit provenance.json records (base from a registry "
        "or from its lock) and compare the whole image digest, explaining "
        "any difference.",
    ),
    (
        "audit",
        False,
        ("release", "ci"),
        "Verify the committed release records offline: signatures, subjects, SBOM, pins.",
    ),
    (
        "key",
        False,
        ("release",),
        "Show the release key's keyid and its trust.toml pin (creating the key if "
        "missing); -- --public prints its public key for auditors.",
    ),
    (
        "diff",
        False,
        ("release", "ci"),
        "What changed between two releases: -- OLD NEW, each a records directory or a git revision [--json] [--allow].",
    ),
    (
        "preflight",
        False,
        ("release", "ci"),
        "The platform's admission checks by name on a request: -- [FILE] (default submission.json) [--strict].",
    ),
):
    _command_session(_name, _doc, host_tools=_host_tools, tags=_tags)


@nox.session(python=PYTHON, default=False)
def lint(session: nox.Session) -> None:
    """ruff (lint and format) and mypy, as pyproject.toml configures them (the tests session runs
    them first too); `nox -s lint -- --fix` applies the fixes and the formatting ruff can make."""
    # mypy reads the libraries the code imports (pydantic's plugin among them): the pipeline's too.
    _install(session, "pipeline")
    session.install("--no-deps", "--require-hashes", "-r", _group_lock("lint"))
    session.run("ruff", "check", ".", *session.posargs)
    session.run("ruff", "format", *(() if "--fix" in session.posargs else ("--check",)), ".")
    session.run("mypy")


@nox.session(python=False, default=False)
def env312(session: nox.Session) -> None:
    """The environment's tests on CPython 3.12 (the arena base's interpreter) with exactly
    locks/runtime-cp312.txt: the derived arena image runs its server there. The host-mode
    test is left out: it drives the pipeline (`python -m pipeline serve`), not the env."""
    if not os.path.isfile(PYTHON312):
        session.skip(
            f"no CPython 3.12 at {PYTHON312}: set RELEASE_PYTHON312_HOME to a CPython 3.12 build (README, Set-up)"
        )
    venv = os.path.join(".nox", "env312")
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        session.run(PYTHON312, "-m", "venv", venv, external=True)
    pip = (python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check")
    session.run(
        *pip, "--no-deps", "--require-hashes", "-r", RUNTIME_LOCK_CP312, "-r", _group_lock("pytest"), external=True
    )
    session.run(
        python,
        "-m",
        "pytest",
        *(session.posargs or ["-q", "tests/env", "--ignore", "tests/env/test_server_host_mode.py"]),
        external=True,
    )


@nox.session(python=PYTHON, default=False, tags=["bench"])
def bench(session: nox.Session) -> None:
    """Run the benchmarks and print their figures (-- NAME to run one)."""
    _install(session, "pipeline", "test", bytecode=True)  # as the tests session's, for the same reason
    _setup_host(session)
    names = session.posargs or sorted(
        f[len("bench_") : -3] for f in os.listdir("benchmarks") if f.startswith("bench_") and f.endswith(".py")
    )
    for name in names:
        session.run("python", f"benchmarks/bench_{name}.py")
