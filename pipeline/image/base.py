"""The local base image: a minimal Debian rootfs plus the slim OpenEnv runtime.

`mmdebstrap` makes a bookworm rootfs from a Debian mirror (Essential packages, `python3`
— not just `python3-minimal`, which lacks compiled stdlib modules such as `resource` —
and `passwd` for `useradd`; every .deb installed is recorded in `locks/base.json`, see
SNAPSHOT) with SOURCE_DATE_EPOCH set; documentation, man pages,
locales, apt and log leftovers and Debian's timestamp-based bytecode are left out. The
runtime of `locks/runtime.txt` is installed on the host with `installer` (no pip in
the image) into a venv-like prefix at the interpreter path release.toml names
(`/opt/arena-python/bin/python3` -> Debian's `/usr/bin/python3.11`). The rootfs' own
interpreter then compiles the stdlib and the runtime to checked-hash bytecode (no time in
it; without it every server start compiles its imports again). Three deterministic
layers (OS, Python runtime, bytecode) and an OCI config/manifest are written to
an OCI layout under `.release/base/oci/`, pushed to the registry by digest with a
human tag, and pinned in `locks/base.json`; later stages use only that digest.
"""

from __future__ import annotations

import fcntl
import os
import re
import shlex
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath

from pipeline import _proc
from pipeline._io import canonical_json, read_json, sha256_bytes, write_json_atomic
from pipeline.config import REPO_ROOT
from pipeline.errors import ConfigError, ReleaseError
from pipeline.formats import deb822_paragraphs, dpkg_installed
from pipeline.image.oci import layer as oci_layer
from pipeline.image.oci.image import OCI, ConfigChanges, NewLayer, derive
from pipeline.image.oci.layout import Layout
from pipeline.progress import say
from pipeline.sources import lock as runtime_lock

BASE_LOCK_FILE = "locks/base.json"  # in a checkout: the one name of the base lock
BASE_LOCK = REPO_ROOT / BASE_LOCK_FILE
STATE_DIR = REPO_ROOT / ".release" / "base"
REPOSITORY = "arena/base"
TAG = "bookworm"
SUITE = "bookworm"
# The Debian archive the base is named after: snapshot.debian.org at 2025-05-20T00:00:00Z.
# The packages do not come from it. mmdebstrap fetches them from MIRROR (deb.debian.org;
# RELEASE_DEBIAN_MIRROR / --mirror), which serves bookworm as it is now, a newer point
# release than the snapshot's. What pins the base's packages is the .deb list of
# locks/base.json (name, version, architecture and sha256 of each), with the base digest:
# a mirror that has moved on installs other .debs and gives another digest, and
# `reproduce` names the .debs that changed. The snapshot is still an input: it is the apt
# source the image names (/etc/apt/sources.list and the OS layer's history comment, both
# under the digest), it keys the rootfs cache, and its time is SOURCE_DATE_EPOCH.
SNAPSHOT = "20250520T000000Z"


def snapshot_url(snapshot: str) -> str:
    return f"https://snapshot.debian.org/archive/debian/{snapshot}/"


SNAPSHOT_URL = snapshot_url(SNAPSHOT)
MIRROR = "http://deb.debian.org/debian"
SOURCE_DATE_EPOCH = 1747699200  # the snapshot's time
VARIANT = "essential"
PACKAGES = ("python3", "passwd")
# mmdebstrap's merged-usr hooks lay out /usr-merged symlinks and install
# `usr-is-merged` up front; otherwise init-system-helpers' `usrmerge | usr-is-merged`
# pulls usrmerge and with it the whole of perl into the image.
MERGED_USR_HOOKS = "/usr/share/mmdebstrap/hooks/merged-usr"
PATH_ENV = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_DPKG_EXCLUDES = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/lintian/*",
    "path-exclude=/usr/share/doc/*",
    # Licences stay: they are what the SBOM and auditors point at.
    "path-include=/usr/share/doc/*/copyright",
)
# Runs on the host after the packages are installed. Debian's py3compile leaves
# timestamp-checked .pyc files, which would tie the layer to build-time details.
_CLEANUP_HOOK = (
    'rm -rf "$1"/var/cache/* "$1"/var/log/* "$1"/var/lib/apt/lists/* "$1"/etc/resolv.conf'
    ' "$1"/var/lib/dpkg/*-old; '
    'find "$1"/usr -depth -name __pycache__ -type d -exec rm -rf {} +; '
    'printf "arena\\n" > "$1"/etc/hostname'
)
# Beside the rootfs (never in it): the apt indexes the packages were resolved from, so
# the lock can record every .deb's sha256.
_INDEX_SUFFIX = ".Packages"


# Relative to pipeline/: the modules whose code makes the base's bytes (formats.py: the
# config's `created` time).
BUILDER_MODULES = ("image/base.py", "sources/lock.py", "image/oci/layer.py", "image/oci/image.py", "formats.py")


@dataclass(frozen=True)
class BaseSpec:
    """Every input of the OS rootfs; equal specs give equal rootfs caches."""

    suite: str = SUITE
    snapshot: str = SNAPSHOT
    source_date_epoch: int = SOURCE_DATE_EPOCH
    variant: str = VARIANT
    packages: tuple[str, ...] = PACKAGES
    # Where the packages are downloaded from. The image does not name it (so it is not in
    # the cache key), but what it serves is what gets installed: see SNAPSHOT.
    mirror: str = MIRROR

    def cache_key(self, mmdebstrap_version: str) -> str:
        fields = {
            **asdict(self),
            "packages": list(self.packages),
            "dpkg": list(_DPKG_EXCLUDES),
            "hook": _CLEANUP_HOOK,
            "hook_dir": MERGED_USR_HOOKS,
            "mmdebstrap": mmdebstrap_version,
        }
        del fields["mirror"]
        return sha256_bytes(canonical_json(fields))[:32]


@dataclass(frozen=True)
class LayerRecord:
    """One layer of the base as recorded in locks/base.json."""

    role: str
    digest: str
    diff_id: str
    size: int


@dataclass(frozen=True)
class Deb:
    """One Debian package that went into the OS layer."""

    name: str
    version: str
    architecture: str
    sha256: str

    def __str__(self) -> str:
        return f"{self.name}_{self.version}_{self.architecture}.deb"


@dataclass(frozen=True)
class BaseRecord:
    """locks/base.json: the base image, pinned by digest, and what made it."""

    name: str
    digest: str
    media_type: str
    config_digest: str
    layers: tuple[LayerRecord, ...]
    runtime_lock_sha256: str
    python: str
    python_version: str
    debian_suite: str
    debian_snapshot: str
    debian_snapshot_url: str
    packages: tuple[str, ...]
    debs: tuple[Deb, ...]
    source_date_epoch: int
    mmdebstrap_version: str
    zlib_version: str
    builder_sha256: str
    # The Debian mirror mmdebstrap fetched the .debs from (BaseSpec.mirror); None in locks
    # written before it was recorded. Where they came from, not what pins them: see SNAPSHOT.
    debian_mirror: str | None = None

    @property
    def reference(self) -> str:
        return f"{self.name}@{self.digest}"

    def pull_reference(self, registry: str) -> str:
        """`registry/repository@digest`: where this base is read in `registry`."""
        return f"{registry}/{self.name}@{self.digest}"

    @property
    def compressed_size(self) -> int:
        return sum(layer.size for layer in self.layers)

    def built_from(self, spec: BaseSpec, lock_sha256: str, python: str) -> bool:
        """Whether this record was built from exactly these inputs, by this code."""
        return (
            self.debian_suite,
            self.debian_snapshot,
            self.source_date_epoch,
            self.packages,
            self.runtime_lock_sha256,
            self.python,
            self.builder_sha256,
        ) == (spec.suite, spec.snapshot, spec.source_date_epoch, spec.packages, lock_sha256, python, builder_sha256())

    def spec(self, mirror: str = MIRROR) -> BaseSpec:
        """The rootfs inputs this record was built from (packages fetched from `mirror`)."""
        return BaseSpec(
            suite=self.debian_suite,
            snapshot=self.debian_snapshot,
            source_date_epoch=self.source_date_epoch,
            packages=self.packages,
            mirror=mirror,
        )


def builder_sha256() -> str:
    """sha256 over the modules that turn the inputs into the image (a change rebuilds)."""
    package = Path(__file__).resolve().parent.parent
    parts = [(package / rel).read_bytes() for rel in BUILDER_MODULES]
    return sha256_bytes(b"".join(sha256_bytes(p).encode() for p in parts))


def load_record(path: Path = BASE_LOCK) -> BaseRecord | None:
    """The one loader of locks/base.json; None when there is none yet."""
    path = Path(path)
    if not path.exists():
        return None
    raw = read_json(path)
    try:
        return BaseRecord(
            name=raw["name"],
            digest=raw["digest"],
            media_type=raw["media_type"],
            config_digest=raw["config_digest"],
            layers=tuple(LayerRecord(**layer) for layer in raw["layers"]),
            runtime_lock_sha256=raw["runtime_lock_sha256"],
            python=raw["python"],
            python_version=raw["python_version"],
            debian_suite=raw["debian_suite"],
            debian_snapshot=raw["debian_snapshot"],
            debian_snapshot_url=raw["debian_snapshot_url"],
            packages=tuple(raw["packages"]),
            debs=tuple(Deb(**d) for d in raw["debs"]),
            source_date_epoch=raw["source_date_epoch"],
            mmdebstrap_version=raw["mmdebstrap_version"],
            zlib_version=raw["zlib_version"],
            builder_sha256=raw["builder_sha256"],
            debian_mirror=raw.get("debian_mirror"),
        )
    except (KeyError, TypeError) as exc:
        raise ConfigError(
            f"{path} is not a base record: {exc}", hint="delete it and run `python -m pipeline base`"
        ) from None


def write_record(record: BaseRecord, path: Path = BASE_LOCK) -> None:
    """The one writer of locks/base.json (atomic; `reference` added for readers)."""
    data = asdict(record)
    data["reference"] = record.reference
    data["compressed_size"] = record.compressed_size
    write_json_atomic(Path(path), data)


# ------------------------------------------------------------------ the OS rootfs


def mmdebstrap_version() -> str:
    out = _proc.run([_proc.which("mmdebstrap"), "--version"]).stdout.decode().strip()
    return out.split()[-1]


def _mmdebstrap(spec: BaseSpec, target: Path, scratch: Path) -> None:
    argv: list[str | Path] = [
        _proc.which("mmdebstrap"),
        "--quiet",
        "--mode=root",
        "--format=directory",
        f"--variant={spec.variant}",
        "--include=" + ",".join(spec.packages),
        '--aptopt=APT::Install-Recommends "false"',
        f"--hook-dir={MERGED_USR_HOOKS}",
    ]
    argv += [f"--dpkgopt={opt}" for opt in _DPKG_EXCLUDES]
    index = shlex.quote(str(target) + _INDEX_SUFFIX)
    argv += [
        f'--customize-hook=for f in "$1"/var/lib/apt/lists/*_Packages*; do '
        f'/usr/lib/apt/apt-helper cat-file "$f"; done > {index}',
        f"--customize-hook={_CLEANUP_HOOK}",
        # mmdebstrap writes the mirror it used; the image names the snapshot instead
        # (a name only: the packages came from the mirror, see SNAPSHOT).
        f'--customize-hook=printf "deb {snapshot_url(spec.snapshot)} {spec.suite} main\\n" > "$1"/etc/apt/sources.list',
        spec.suite,
        target,
        spec.mirror,
    ]
    # The system's PATH, not the caller's: mmdebstrap runs `python3 mmtarfilter` for every
    # .deb it unpacks and apt/dpkg run maintainer scripts; a user's shims first on PATH
    # (pyenv's are bash scripts that start a dozen processes) would run them instead of
    # Debian's, and cost a few seconds of CPU per build.
    # TMPDIR: mmdebstrap's own temporary files (its gpg home, apt's configuration) go to
    # `scratch`, beside the tree, not to /tmp, where a killed build would leave them for
    # good; mmdebstrap unsets it inside the chroot, so the rootfs never sees it.
    env = {
        "PATH": PATH_ENV,
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
        "TMPDIR": str(scratch),
        "SOURCE_DATE_EPOCH": str(spec.source_date_epoch),
    }
    # mmdebstrap's root mode bind-mounts the host's /dev, /proc and /sys into the target.
    # In a mount namespace of its own they go when it ends, even when it is killed; in
    # the host's they would stay, and removing the tree would then remove the host's
    # /dev entries (/dev/shm's files among them).
    _proc.run([_proc.which("unshare"), "--mount", "--propagation", "private", *argv], env=env, timeout=3600)


def _unescape_mount_point(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounts_under(path: Path, pid: int | str = "self") -> list[str]:
    """The mount points at or under `path` in the mount namespace of process `pid` (this
    process's by default); none when that process is gone."""
    root = os.path.realpath(path).rstrip("/") or "/"
    try:
        lines = Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
    except OSError:  # gone, or exiting (EINVAL)
        return []
    points = [_unescape_mount_point(line.split()[4]) for line in lines]
    return sorted(p for p in points if p == root or p.startswith(root + "/"))


def _outermost(points: list[str]) -> list[str]:
    return [p for p in points if not any(p.startswith(q + "/") for q in points if q != p)]


def remove_tree(path: Path) -> None:
    """`rm -r` of a rootfs tree, refused while anything is mounted in it (a bind mount of
    the host's /dev would take the host's device files with it)."""
    mounted = mounts_under(path)
    if mounted:
        raise ReleaseError(
            f"{path} has mounts in it; it is not removed",
            expected="no mount point under it",
            actual=", ".join(mounted[:5]) + (" ..." if len(mounted) > 5 else ""),
            hint="unmount them, then run the release again: umount -R "
            + " ".join(shlex.quote(p) for p in _outermost(mounted)),
        )
    shutil.rmtree(path)


@contextmanager
def rootfs(spec: BaseSpec, cache_dir: Path, *, use_cache: bool = True) -> Iterator[Path]:
    """The mmdebstrap rootfs for `spec`, built once per spec into `cache_dir/<key>`, and held
    while the caller reads it: an exclusive lock on `<key>.lock` beside it. Another build on
    this machine that shares the cache (a second release, a test) waits for it rather than
    removing a tree that is being written or read."""
    version = mmdebstrap_version()
    target = Path(cache_dir) / spec.cache_key(version)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(target.name + ".lock"), "a") as guard:
        try:
            fcntl.flock(guard, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"rootfs: waiting for another build that holds {target}")
            fcntl.flock(guard, fcntl.LOCK_EX)
        yield _rootfs(spec, target, version, use_cache=use_cache)


def _rootfs(spec: BaseSpec, target: Path, version: str, *, use_cache: bool) -> Path:
    marker = target.with_name(target.name + ".complete")
    if use_cache and marker.exists() and target.is_dir():
        say(f"rootfs: reusing {target}")
        return target
    marker.unlink(missing_ok=True)
    if target.exists():
        remove_tree(target)
    partial = target.with_name(target.name + ".partial")
    scratch = target.with_name(target.name + ".tmp")
    for stale in (partial, scratch):  # a build that was killed
        if stale.exists():
            remove_tree(stale)
    say(
        f"rootfs: mmdebstrap {version} {spec.suite} ({', '.join(spec.packages)}) from "
        f"{spec.mirror}, SOURCE_DATE_EPOCH={spec.source_date_epoch} (about a minute)"
    )
    started = time.monotonic()
    scratch.mkdir(mode=0o700)
    try:
        _mmdebstrap(spec, partial, scratch)
    finally:
        remove_tree(scratch)
    os.replace(partial.with_name(partial.name + _INDEX_SUFFIX), target.with_name(target.name + _INDEX_SUFFIX))
    os.replace(partial, target)
    # The marker lives beside the tree, so it never ends up in the layer.
    marker.touch()
    say(f"rootfs: done in {time.monotonic() - started:.0f} s")
    return target


# Device nodes come from the container runtime, not the image. apt is not in the
# image; mmdebstrap recreates its state directories after the hooks, with an owner
# that depends on how apt ran (`_apt` or root), so they are left out.
_NOT_IN_LAYER = ("dev", "var/lib/apt", "var/cache/apt")


def _in_rootfs(rel: str) -> bool:
    """Whether a rootfs path belongs in the OS layer (`dev` itself stays, empty)."""
    return not any(rel.startswith(d + "/") for d in _NOT_IN_LAYER) and rel not in _NOT_IN_LAYER[1:]


def installed_debs(root: Path) -> tuple[Deb, ...]:
    """Every package installed in the rootfs with the sha256 of the .deb apt resolved."""
    root = Path(root)
    index_path = root.with_name(root.name + _INDEX_SUFFIX)
    if not index_path.is_file():
        raise ReleaseError(
            f"no apt index beside the rootfs ({index_path})",
            hint="rebuild the rootfs: python -m pipeline base --force --no-cache",
        )
    installed = dpkg_installed((root / "var/lib/dpkg/status").read_text(encoding="utf-8"))
    index = {
        (p["Package"], p["Version"], p.get("Architecture", "")): p.get("SHA256", "")
        for p in deb822_paragraphs(index_path.read_text(encoding="utf-8"), {pkg["Package"] for pkg in installed})
    }
    debs = []
    for pkg in installed:
        key = (pkg["Package"], pkg["Version"], pkg["Architecture"])
        if key not in index:
            raise ReleaseError(
                f"installed package {key[0]} {key[1]} is not in the apt index",
                hint="the rootfs and its index do not match: rebuild with --no-cache",
            )
        debs.append(Deb(*key, sha256=index[key]))
    return tuple(sorted(debs, key=lambda d: d.name))


def changed_debs(recorded: tuple[Deb, ...], rebuilt: tuple[Deb, ...]) -> list[str]:
    """What differs between two package sets, one line per package."""
    old, new = {d.name: d for d in recorded}, {d.name: d for d in rebuilt}
    lines = [f"{old[n]}: missing from the rebuild" for n in sorted(old.keys() - new.keys())]
    lines += [f"{new[n]}: not in the lock" for n in sorted(new.keys() - old.keys())]
    lines += [
        f"{n}: recorded {old[n]} sha256 {old[n].sha256[:16]}, rebuilt {new[n]} sha256 {new[n].sha256[:16]}"
        for n in sorted(old.keys() & new.keys())
        if old[n] != new[n]
    ]
    return lines


def debian_python_version(root: Path) -> str:
    """Upstream version of the rootfs' python3.11 package (e.g. 3.11.2)."""
    status = (Path(root) / "var/lib/dpkg/status").read_text(encoding="utf-8")
    versions = [p.get("Version", "") for p in dpkg_installed(status) if p["Package"] == "python3.11"]
    m = re.match(r"\d+\.\d+\.\d+", versions[0]) if versions else None
    if m is None:
        raise ReleaseError(
            "python3.11 is not installed in the base rootfs", hint=f"check that PACKAGES includes python3 ({root})"
        )
    return m[0]


# ------------------------------------------------------------------ the Python runtime


def python_prefix(python: str) -> str:
    """`/opt/arena-python` for `/opt/arena-python/bin/python3`."""
    path = PurePosixPath(python)
    if not path.is_absolute() or path.parent.name != "bin":
        raise ConfigError("release.python must be <prefix>/bin/<python>", actual=python)
    return str(path.parent.parent)


def minor_version(python_version: str) -> str:
    """`3.11` for `3.11.2`: the part that names the interpreter and its stdlib directory."""
    return ".".join(python_version.split(".")[:2])


def stage_runtime(wheels: tuple[Path, ...], dest: Path, *, python: str, python_version: str) -> None:
    """Lay out the venv-like prefix under `dest` (a staging root, not the image)."""
    prefix = python_prefix(python)
    short = minor_version(python_version)
    runtime_lock.install(wheels, destdir=dest, prefix=prefix, interpreter=python, python_version=short)
    root = Path(dest) / prefix.lstrip("/")
    bindir = root / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    name = PurePosixPath(python).name
    os.symlink(f"/usr/bin/python{short}", bindir / name)
    for alias in ("python", f"python{short}"):
        if alias != name:
            os.symlink(name, bindir / alias)
    (root / "pyvenv.cfg").write_text(
        f"home = /usr/bin\ninclude-system-site-packages = false\nversion = {python_version}\n", encoding="utf-8"
    )


# ------------------------------------------------------------------ bytecode

# Where the compile sees its inputs and writes its output inside the rootfs (bind mounts
# in a mount namespace of its own; both directories are in Debian's base-files).
_RUNTIME_MOUNT = "/mnt"
_PYC_MOUNT = "/tmp"


def compile_bytecode(root: Path, runtime: Path, out: Path, *, prefix: str, python_version: str) -> None:
    """Compile the stdlib of `root` and the runtime tree `runtime` (staged for `prefix`)
    with the rootfs' own interpreter, chrooted, into `out` (PYTHONPYCACHEPREFIX's layout:
    `out/usr/lib/python3.11/json/decoder.cpython-311.pyc`, `out/mnt/lib/...` for the runtime).

    Checked-hash .pyc files name no time (each holds its source's hash, which the
    interpreter checks at import); one process compiles each tree in sorted order with a
    fixed hash seed (a frozenset constant's order follows string hashes), under umask 022,
    forced and with PYTHONDONTWRITEBYTECODE (else the modules the compiler itself imports
    would first be cached as timestamp .pyc files, which compileall then keeps). Neither
    tree is written to."""
    short = minor_version(python_version)
    interpreter = f"/usr/bin/python{short}"
    stdlib = [
        d
        for d in (f"/usr/lib/python{short}", "/usr/lib/python3/dist-packages")
        if (Path(root) / d.lstrip("/")).is_dir()
    ]
    compileall = f"{interpreter} -m compileall -q -f --invalidation-mode checked-hash"
    inner = f"{compileall} {' '.join(stdlib)} && {compileall} -s {_RUNTIME_MOUNT} -p {prefix} {_RUNTIME_MOUNT}/lib"
    script = (
        'set -e; umask 022; mount --bind "$2" "$1"' + _RUNTIME_MOUNT + "; "
        'mount --bind "$3" "$1"' + _PYC_MOUNT + "; "
        'exec chroot "$1" /usr/bin/env -i PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE=1 '
        f"PYTHONPYCACHEPREFIX={_PYC_MOUNT} "
        f'LC_ALL=C.UTF-8 PATH={PATH_ENV} /bin/sh -c "$4"'
    )
    _proc.run(
        [
            _proc.which("unshare"),
            "--mount",
            "--propagation",
            "private",
            "/bin/sh",
            "-c",
            script,
            "compile-bytecode",
            root,
            runtime,
            out,
            inner,
        ],
        env={"PATH": PATH_ENV},
        timeout=1800,
    )


def bytecode_entries(out: Path, *, prefix: str) -> list[oci_layer.FileEntry]:
    """The layer's entries for the .pyc files `compile_bytecode` wrote: each in the
    `__pycache__` directory beside its source, root-owned, 0644 (directories 0755)."""
    entries: dict[str, oci_layer.FileEntry] = {}
    runtime = _RUNTIME_MOUNT.strip("/")
    for pyc in sorted(Path(out).rglob("*.pyc")):
        rel = pyc.relative_to(out)
        parent = rel.parent.as_posix()
        if parent == runtime or parent.startswith(runtime + "/"):
            parent = prefix.strip("/") + parent[len(runtime) :]
        cache_dir = f"{parent}/__pycache__"
        entries.setdefault(cache_dir, oci_layer.FileEntry(cache_dir, "dir", 0o755))
        path = f"{cache_dir}/{rel.name}"
        entries[path] = oci_layer.FileEntry(path, "file", 0o644, source=pyc)
    return list(entries.values())


# ------------------------------------------------------------------ image


@dataclass(frozen=True)
class BuiltBase:
    layout: Path
    ref_name: str
    debs: tuple[Deb, ...]
    manifest_digest: str
    media_type: str
    config_digest: str
    layers: tuple[LayerRecord, ...]
    python_version: str


def build(
    spec: BaseSpec,
    lock: runtime_lock.RuntimeLock,
    *,
    python: str,
    state_dir: Path,
    wheel_cache: Path = runtime_lock.WHEEL_CACHE,
    rootfs_cache: Path | None = None,
    use_cache: bool = True,
) -> BuiltBase:
    """Rootfs + runtime -> three layers (OS, runtime, bytecode), config and manifest in
    `state_dir/oci`."""
    with rootfs(spec, rootfs_cache or Path(state_dir) / "rootfs", use_cache=use_cache) as root:
        return _build(spec, lock, root, python=python, state_dir=state_dir, wheel_cache=wheel_cache)


def _build(
    spec: BaseSpec, lock: runtime_lock.RuntimeLock, root: Path, *, python: str, state_dir: Path, wheel_cache: Path
) -> BuiltBase:
    version = debian_python_version(root)
    short = minor_version(version)
    prefix = python_prefix(python)
    wheels = runtime_lock.fetch(lock, wheel_cache)
    layout = Layout.init(Path(state_dir) / "oci")
    blobs = layout.root / "blobs" / "sha256"
    sde = spec.source_date_epoch
    say("layer 1/3: OS rootfs")
    os_entries = oci_layer.tree_entries(root, skip=lambda rel: not _in_rootfs(rel))
    os_layer = oci_layer.write_layer(os_entries, blobs, source_date_epoch=sde, mtime_policy="clamp")
    say(f"  {os_layer.digest} {os_layer.size / 1e6:.1f} MB")
    say(f"layer 2/3: Python runtime ({len(lock.wheels)} wheels) at {prefix}")
    with tempfile.TemporaryDirectory(prefix="base-runtime-", dir=state_dir) as tmp:
        stage_runtime(wheels, Path(tmp), python=python, python_version=version)
        py_entries = oci_layer.tree_entries(Path(tmp), normalize=oci_layer.normalized)
        py_layer = oci_layer.write_layer(py_entries, blobs, source_date_epoch=sde, mtime_policy="clamp")
        say(f"  {py_layer.digest} {py_layer.size / 1e6:.1f} MB")
        say(f"layer 3/3: bytecode of the stdlib and the runtime (checked-hash, by the rootfs' python{short})")
        with tempfile.TemporaryDirectory(prefix="base-bytecode-") as out:
            compile_bytecode(root, Path(tmp) / prefix.lstrip("/"), Path(out), prefix=prefix, python_version=version)
            pyc_layer = oci_layer.write_layer(bytecode_entries(Path(out), prefix=prefix), blobs, source_date_epoch=sde)
    say(f"  {pyc_layer.digest} {pyc_layer.size / 1e6:.1f} MB")
    layers = (
        NewLayer(
            os_layer.digest,
            os_layer.diff_id,
            os_layer.size,
            created_by=f"mmdebstrap {spec.variant} {spec.suite} +{','.join(spec.packages)}",
            comment=f"debian snapshot {snapshot_url(spec.snapshot)}",
        ),
        NewLayer(
            py_layer.digest,
            py_layer.diff_id,
            py_layer.size,
            created_by=f"installer: locks/runtime.txt -> {prefix}",
            comment=f"runtime lock sha256:{lock.sha256}",
        ),
        NewLayer(
            pyc_layer.digest,
            pyc_layer.diff_id,
            pyc_layer.size,
            created_by=f"python{short} -m compileall --invalidation-mode checked-hash /usr/lib/python3* {prefix}/lib",
            comment="bytecode: PYTHONHASHSEED=0, sorted, one process per tree",
        ),
    )
    changes = ConfigChanges(cmd=(python,), env={"PATH": PATH_ENV, "LANG": "C.UTF-8"})
    image = derive(None, layers, changes, source_date_epoch=sde, family=OCI)
    layout.put_bytes(image.config_bytes)
    ref_name = f"{REPOSITORY}:{TAG}"
    layout.add_manifest(image.manifest_bytes, image.media_type, ref_name=ref_name)
    return BuiltBase(
        layout=layout.root,
        ref_name=ref_name,
        debs=installed_debs(root),
        manifest_digest=image.manifest_digest,
        media_type=image.media_type,
        config_digest=image.config_digest,
        layers=(
            LayerRecord("os", os_layer.digest, os_layer.diff_id, os_layer.size),
            LayerRecord("python-runtime", py_layer.digest, py_layer.diff_id, py_layer.size),
            LayerRecord("bytecode", pyc_layer.digest, pyc_layer.diff_id, pyc_layer.size),
        ),
        python_version=version,
    )
