"""The slim OpenEnv runtime lock: `locks/runtime.in` -> hash-pinned `locks/runtime.txt`.

`runtime.in` lists, pinned, every distribution the environment server (and the
OpenEnv client) really imports — the import closure found by running them, not
openenv-core's declared dependencies, which pull in UI and LLM libraries the server
never touches. The lock pins each one to the sha256 of its cp311 manylinux x86_64
(or pure-Python) wheel, so `pip install --no-deps --require-hashes -r
locks/runtime.txt` installs exactly that set.

Wheels are kept in a content-addressed cache (`.release/wheels/<sha256>/<file>`) and
re-hashed every time they are used. `install` puts the locked wheels into a
venv-like prefix with `installer` (no pip in the image).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pipeline import _proc
from pipeline._io import sha256_bytes, sha256_file, write_atomic
from pipeline.config import REPO_ROOT
from pipeline.errors import ConfigError, DigestMismatch, ToolError
from pipeline.progress import say

LOCK_IN = REPO_ROOT / "locks" / "runtime.in"
LOCK_FILE = "locks/runtime.txt"  # in a checkout: the one name of the wheel lock
LOCK = REPO_ROOT / LOCK_FILE
WHEEL_CACHE = REPO_ROOT / ".release" / "wheels"

# The image's interpreter is Debian bookworm's CPython 3.11 on x86_64 (glibc 2.36):
# any manylinux wheel up to glibc 2.28 runs there.
PYTHON_VERSION = "3.11"
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_28_x86_64")
_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!_-]+)$")
_LOCK_LINE = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!_-]+)"
    r" --hash=sha256:(?P<sha256>[0-9a-f]{64})$"
)


@dataclass(frozen=True)
class Pin:
    """One `name==version` line of runtime.in."""

    name: str
    version: str

    @property
    def key(self) -> str:
        """The normalised project name (PEP 503), used to match wheel file names."""
        return normalize_name(self.name)


@dataclass(frozen=True)
class LockedWheel:
    name: str
    version: str
    sha256: str

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version} --hash=sha256:{self.sha256}"


@dataclass(frozen=True)
class RuntimeLock:
    """The parsed runtime.txt and the sha256 of its exact bytes (what records pin)."""

    path: Path
    wheels: tuple[LockedWheel, ...]
    sha256: str


@dataclass(frozen=True)
class InstalledSize:
    files: int
    bytes: int

    def human(self) -> str:
        return f"{self.bytes / 1e6:.1f} MB in {self.files} files"


def normalize_name(name: str) -> str:
    """A project name normalised as PEP 503 says (`Foo_Bar.baz` -> `foo-bar-baz`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def allowed_hashes(lock_text: str) -> dict[tuple[str, str], tuple[str, ...]]:
    """(normalised name, version) -> the wheel sha256s a pip hash-pinned lock allows.

    Reads any pip requirements file with hashes (continuation lines, several hashes per
    requirement), for the records that describe a lock; `load_lock` is the strict loader
    of this project's own one-hash-per-line format."""
    out: dict[tuple[str, str], tuple[str, ...]] = {}
    joined = re.sub(r"\\\s*\n", " ", lock_text)
    for line in joined.splitlines():
        line = line.split("#", 1)[0].strip() if not line.strip().startswith("--hash") else line
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;]+)", line)
        if m:
            hashes = tuple(sorted(re.findall(r"--hash[= ]sha256:([0-9a-f]{64})", line)))
            out[(normalize_name(m.group(1)), m.group(2))] = hashes
    return out


def read_pins(path: Path = LOCK_IN) -> tuple[Pin, ...]:
    """Parse runtime.in: one `name==version` per line, `#` comments allowed."""
    pins: list[Pin] = []
    for n, raw in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = _PIN.match(line)
        if m is None:
            raise ConfigError(f"{path}:{n}: not an exact pin", expected="name==version", actual=line)
        pins.append(Pin(m["name"], m["version"]))
    keys = [p.key for p in pins]
    if len(set(keys)) != len(keys):
        raise ConfigError(f"{path}: a distribution is pinned twice", actual=sorted(keys))
    return tuple(pins)


def load_lock(path: Path = LOCK) -> RuntimeLock:
    """The one loader of runtime.txt; ConfigError names the first malformed line."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"runtime lock {path} not found",
                          hint="run `python -m pipeline lock` to generate it") from None
    wheels: list[LockedWheel] = []
    for n, raw in enumerate(data.decode("utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LOCK_LINE.match(line)
        if m is None:
            raise ConfigError(f"{path}:{n}: not a hash-pinned requirement",
                              expected="name==version --hash=sha256:<64 hex>", actual=line)
        wheels.append(LockedWheel(m["name"], m["version"], m["sha256"]))
    if not wheels:
        raise ConfigError(f"runtime lock {path} pins nothing")
    return RuntimeLock(path=path, wheels=tuple(wheels), sha256=sha256_bytes(data))


def write_lock(path: Path, wheels: tuple[LockedWheel, ...], size: InstalledSize) -> RuntimeLock:
    """The one writer of runtime.txt (sorted by name; header states the installed size)."""
    lines = [
        "# The slim OpenEnv runtime of the image: generated from runtime.in by",
        "# `python -m pipeline lock`; install with",
        "# pip install --no-deps --require-hashes -r locks/runtime.txt",
        f"# Installed size (no bytecode): {size.bytes} bytes in {size.files} files.",
    ]
    lines += [w.requirement for w in sorted(wheels, key=lambda w: w.name.lower())]
    write_atomic(Path(path), ("\n".join(lines) + "\n").encode())
    return load_lock(path)


def _pip_download(requirements: Path, dest: Path, *, require_hashes: bool) -> None:
    argv: list[str | Path] = [
        sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
        "--no-deps", "--only-binary=:all:", "--implementation", "cp",
        "--python-version", PYTHON_VERSION, "-d", dest, "-r", requirements,
    ]
    for platform in PLATFORMS:
        argv += ["--platform", platform]
    if require_hashes:
        argv.append("--require-hashes")
    _proc.run(argv)


def _wheel_key(filename: str) -> str:
    return re.sub(r"[-_.]+", "-", filename.split("-", 1)[0]).lower()


def _cache_put(wheel: Path, cache: Path) -> Path:
    digest = sha256_file(wheel)
    target = cache / digest / wheel.name
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{wheel.name}.tmp")
        tmp.write_bytes(wheel.read_bytes())
        os.replace(tmp, target)
    return target


def cached_wheel(wheel: LockedWheel, cache: Path = WHEEL_CACHE) -> Path | None:
    """The cached wheel file for a lock entry, re-hashed; None when not cached."""
    folder = Path(cache) / wheel.sha256
    files = sorted(folder.glob("*.whl")) if folder.is_dir() else []
    if not files:
        return None
    path = files[0]
    actual = sha256_file(path)
    if actual != wheel.sha256:
        raise DigestMismatch(
            f"cached wheel {path} for {wheel.name}=={wheel.version} does not match the lock",
            expected=f"sha256:{wheel.sha256}", actual=f"sha256:{actual}",
            hint=f"delete {folder} and run again to re-download it",
        )
    return path


def fetch(lock: RuntimeLock, cache: Path = WHEEL_CACHE) -> tuple[Path, ...]:
    """Paths of every locked wheel, downloading the missing ones with hash checking."""
    cache = Path(cache)
    missing = [w for w in lock.wheels if cached_wheel(w, cache) is None]
    if missing:
        say(f"downloading {len(missing)} of {len(lock.wheels)} locked wheels")
        with tempfile.TemporaryDirectory(prefix="wheels-") as tmp:
            req = Path(tmp) / "missing.txt"
            req.write_text("".join(w.requirement + "\n" for w in missing), encoding="utf-8")
            _pip_download(req, Path(tmp) / "dl", require_hashes=True)
            for f in sorted((Path(tmp) / "dl").glob("*.whl")):
                _cache_put(f, cache)
    paths = []
    for w in lock.wheels:
        path = cached_wheel(w, cache)
        if path is None:
            raise ToolError(f"pip did not deliver a wheel for {w.name}=={w.version}",
                            hint="check that the version has a cp311 manylinux or pure wheel")
        paths.append(path)
    return tuple(paths)


def install(wheels: tuple[Path, ...], *, destdir: Path, prefix: str, interpreter: str,
            python_version: str = PYTHON_VERSION) -> None:
    """Install wheels into `destdir/prefix` laid out like a venv, without bytecode.

    Console scripts get `interpreter` as their shebang (the path inside the image).
    """
    from installer import install as install_wheel
    from installer.destinations import SchemeDictionaryDestination
    from installer.sources import WheelFile

    prefix = prefix.rstrip("/")
    site = f"{prefix}/lib/python{python_version}/site-packages"
    scheme = {
        "purelib": site,
        "platlib": site,
        "headers": f"{prefix}/include/site/python{python_version}",
        "scripts": f"{prefix}/bin",
        "data": prefix,
    }
    destination = SchemeDictionaryDestination(
        scheme, interpreter=interpreter, script_kind="posix",
        bytecode_optimization_levels=(), destdir=str(destdir),
    )
    for wheel in wheels:
        with WheelFile.open(wheel) as source:
            install_wheel(source, destination, additional_metadata={"INSTALLER": b"pipeline\n"})


def installed_size(root: Path) -> InstalledSize:
    """Files and bytes under root (regular files only; links cost nothing here)."""
    files = total = 0
    for dirpath, _, names in os.walk(root):
        for name in names:
            p = Path(dirpath) / name
            if p.is_file() and not p.is_symlink():
                files += 1
                total += p.stat().st_size
    return InstalledSize(files=files, bytes=total)


def measure(wheels: tuple[Path, ...]) -> InstalledSize:
    """Installed size of the wheels in a scratch prefix, the way the base installs them."""
    with tempfile.TemporaryDirectory(prefix="runtime-size-") as tmp:
        install(wheels, destdir=Path(tmp), prefix="/opt/runtime", interpreter="/usr/bin/python3")
        return installed_size(Path(tmp))


def generate(pins_path: Path = LOCK_IN, lock_path: Path = LOCK,
             cache: Path = WHEEL_CACHE) -> tuple[RuntimeLock, InstalledSize]:
    """Download one wheel per pin, hash it, measure the install, write the lock."""
    pins = read_pins(pins_path)
    say(f"resolving {len(pins)} pinned wheels for cp{PYTHON_VERSION.replace('.', '')} x86_64")
    with tempfile.TemporaryDirectory(prefix="wheels-") as tmp:
        req = Path(tmp) / "pins.txt"
        req.write_text("".join(f"{p.name}=={p.version}\n" for p in pins), encoding="utf-8")
        _pip_download(req, Path(tmp) / "dl", require_hashes=False)
        by_key = {_wheel_key(f.name): f for f in sorted((Path(tmp) / "dl").glob("*.whl"))}
        locked, paths = [], []
        for pin in pins:
            wheel = by_key.get(pin.key)
            if wheel is None:
                raise ToolError(f"no wheel downloaded for {pin.name}=={pin.version}",
                                hint="is there a cp311 manylinux or py3-none-any wheel?")
            cached = _cache_put(wheel, Path(cache))
            locked.append(LockedWheel(pin.name, pin.version, cached.parent.name))
            paths.append(cached)
    size = measure(tuple(paths))
    return write_lock(lock_path, tuple(locked), size), size
