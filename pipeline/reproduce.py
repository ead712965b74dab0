"""`nox -s reproduce`: what a rebuilder runs, from a clean clone, with nothing else present.

1. Reads provenance.json and checks out the commit it records (`project.commit`, the
   exact tree the release ran from) as a git worktree; this checkout's (HEAD's)
   pipeline code does the rebuilding. It says which image inputs and which image-builder
   modules changed between that commit and HEAD (stale records).
2. The base: read by its recorded digest from a registry when one serves it (the local
   registry if it runs, or --base-registry); otherwise, for the local base, rebuilt
   from the recorded commit's locks/base.json (mmdebstrap from a Debian mirror, which
   must still serve the .debs the lock lists, plus the wheel lock) into an OCI layout,
   no registry involved, and its digest compared. A drifted base names the .deb files
   that changed.
3. The derived image is rebuilt from that base source and the whole image digest is
   compared. "Not rebuilt" is a failure; `--layers-only` compares the application
   layers only and says the result is PARTIAL.
4. A mismatch is explained layer by layer, file by file (content, mode, owner, mtime,
   order) and config field by field; with Debian's diffoscope installed and the
   recorded blob readable from a registry, diffoscope's report is added.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pipeline import config as _config
from pipeline import inputs as image_inputs
from pipeline import plan
from pipeline.errors import ConfigError, ReleaseError, SourceError, VerificationError
from pipeline.image import base as _base
from pipeline.image.build import build
from pipeline.image.imageconfig import ImageConfigValues
from pipeline.image.layerdiff import AppLayer, explain, members_of_blob
from pipeline.image.oci.layer import write_layer, zlib_version
from pipeline.image.oci.layout import Layout
from pipeline.image.payload import VendoredTaskFile, app_layers
from pipeline.imageref import ImageRef
from pipeline.progress import say
from pipeline.records import provenance
from pipeline.registry import local as localregistry
from pipeline.registry.basesource import BaseSource
from pipeline.registry.client import RegistryClient
from pipeline.sources import git
from pipeline.sources import lock as runtime_lock

# The modules that turn the image inputs into the derived image's bytes: when HEAD's
# differ from the recorded commit's, a mismatch may come from the code, not the inputs.
IMAGE_BUILDER = (
    *(f"pipeline/{m}" for m in _base.BUILDER_MODULES),
    "pipeline/image/build.py",
    "pipeline/image/payload.py",
    "pipeline/image/imageconfig.py",
    "pipeline/curriculum.py",
)
DIFFOSCOPE_LINES = 200
# The ref name of a reproduced image in the layout it is kept in (dist/oci holds the build's too).
KEPT_REF = "reproduce"


@dataclass(frozen=True)
class LayerComparison:
    name: str
    recorded: AppLayer
    digest: str
    diff_id: str
    differences: tuple[str, ...]

    @property
    def same(self) -> bool:
        return (self.digest, self.diff_id) == (self.recorded.digest, self.recorded.diff_id)


@dataclass(frozen=True)
class Staleness:
    """What changed between the recorded commit and HEAD."""

    recorded: str
    head: str
    inputs: tuple[str, ...]
    builder: tuple[str, ...]


@dataclass(frozen=True)
class BaseOutcome:
    """How the base was obtained and whether it is the recorded one."""

    recorded: str
    rebuilt: str | None
    how: str
    differences: tuple[str, ...] = ()

    @property
    def same(self) -> bool:
        return self.rebuilt == self.recorded


@dataclass(frozen=True)
class Reproduction:
    commit: str
    staleness: Staleness
    layers: tuple[LayerComparison, ...]
    image_recorded: str
    image_rebuilt: str | None
    base: BaseOutcome | None
    config_differences: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    diffoscope: tuple[str, ...] = ()
    # --layers-only: the base and the image were deliberately not rebuilt.
    partial: bool = False

    @property
    def ok(self) -> bool:
        layers = all(l.same for l in self.layers)
        if self.partial:
            return layers
        return layers and self.image_rebuilt == self.image_recorded


def compare_app_layers(
    repo: Path,
    cfg: _config.ReleaseConfig,
    vendored: VendoredTaskFile | None,
    image: provenance.Image,
    sde: int,
    work: Path,
) -> list[LayerComparison]:
    """Rebuild each application layer and compare it with the recorded one."""
    specs = app_layers(repo, cfg.app_dir, vendored, _config.curriculum_file(cfg))
    recorded = {l.name: l for l in image.app_layers}
    if [s.name for s in specs] != [l.name for l in image.app_layers]:
        raise VerificationError(
            "the application layers are not the recorded ones",
            expected=[l.name for l in image.app_layers],
            actual=[s.name for s in specs],
        )
    out = []
    for spec in specs:
        layer = write_layer(spec.entries, work, source_date_epoch=sde)
        rec = recorded[spec.name]
        diffs: tuple[str, ...] = ()
        if (layer.digest, layer.diff_id) != (rec.digest, rec.diff_id):
            diffs = tuple(explain(list(rec.members), members_of_blob(layer.path)))
            if not diffs:
                diffs = (
                    "every member is identical; the tar or gzip bytes differ "
                    f"(zlib here {zlib_version()}; see provenance.json builder.zlib_version)",
                )
        out.append(LayerComparison(spec.name, rec, layer.digest, layer.diff_id, diffs))
    return out


def compare_config(recorded: ImageConfigValues | None, rebuilt: ImageConfigValues) -> list[str]:
    """The config fields that differ, one line each."""
    if recorded is None:
        return ["config: provenance.json predates recorded config values; not compared"]
    old, new = recorded.to_json(), rebuilt.to_json()
    lines = []
    for key in sorted(old):
        a, b = old[key], new[key]
        if isinstance(a, dict):
            for k in sorted(a.keys() | b.keys()):
                if a.get(k) != b.get(k):
                    lines.append(f"config {key}[{k}]: recorded {a.get(k)!r}, rebuilt {b.get(k)!r}")
        elif a != b:
            lines.append(f"config {key}: recorded {a!r}, rebuilt {b!r}")
    return lines


# ------------------------------------------------------------------ the recorded commit


def check_commit(repo: Path, commit: str) -> None:
    """A clear error when the recorded commit is not in this clone's history."""
    git.check_revision(commit, where="provenance.json project.commit")
    if git.has_commit(repo, commit):
        return
    hint = (
        "this is a shallow clone: run `git fetch --unshallow` (or clone without --depth)"
        if git.is_shallow(repo)
        else "fetch the branch the records were made on (git fetch origin), or reproduce "
        "from the clone that holds that commit"
    )
    raise SourceError(
        f"the recorded commit {commit} is not in the history of {repo}",
        expected=f"commit {commit}",
        actual="absent",
        hint=hint,
    )


def staleness(repo: Path, commit: str, profile: str) -> Staleness:
    head = git.head_commit(repo)
    return Staleness(
        commit,
        head,
        tuple(image_inputs.differences(repo, commit, head, profile)),
        tuple(git.changed_between(repo, commit, head, IMAGE_BUILDER)),
    )


@contextmanager
def worktree(repo: Path, commit: str, parent: Path) -> Iterator[Path]:
    path = parent / "checkout"
    git.worktree_add(repo, path, commit)
    try:
        yield path
    finally:
        git.worktree_remove(repo, path)


# ------------------------------------------------------------------ the base


def _served(registry: str, repository: str, digest: str) -> tuple[bool, str]:
    """Whether `registry` serves the manifest `digest`, and if not, why not."""
    try:
        found = RegistryClient(registry, attempts=1).head_manifest(repository, digest)
    except ReleaseError as exc:
        return False, exc.one_line()
    return (True, "") if found == digest else (False, "not there")


def _registry_of(name: str, target: plan.Target, registry: str | None) -> tuple[str | None, str]:
    """Which registry to read the recorded image `name` from, and its repository there:
    `registry` if given, else the local registry when it runs (local profile) or the
    registry the name carries; None when there is none."""
    if target.local:
        state = None if registry else localregistry.status()
        return registry or (state.address if state else None), name
    ref = ImageRef.parse(name, registry=True)
    return registry or ref.registry, ref.repository


def _registry_base(
    prov: provenance.Provenance, target: plan.Target, registry: str | None
) -> tuple[BaseSource | None, list[str]]:
    """The recorded base from a registry that serves it, else None and why not."""
    name, digest = prov.base.name, prov.base.digest
    where, repository = _registry_of(name, target, registry)
    if where is None:
        return None, ["no local registry runs here"]
    ok, why = _served(where, repository, digest)
    if not ok:
        return None, [f"{where}: {why}"]
    return BaseSource(name=name, digest=digest, registry=where, repository=repository), []


def rebuild_base(
    checkout: Path, prov: provenance.Provenance, *, mirror: str, work: Path
) -> tuple[BaseSource | None, BaseOutcome]:
    """Rebuild the local base from the recorded commit's lock into an OCI layout."""
    try:
        record = _base.load_record(checkout / _base.BASE_LOCK_FILE)
    except ConfigError as exc:
        raise VerificationError(
            f"the base lock at {prov.project.commit[:12]} cannot be rebuilt by this code",
            expected="locks/base.json with the Debian snapshot and every .deb",
            actual=exc.one_line(),
            hint="serve the recorded base by digest (--base-registry), or reproduce records "
            "made by a release of this code",
        ) from None
    if record is None:
        raise SourceError(
            f"no locks/base.json at {prov.project.commit}", hint="the recorded commit must pin the local base"
        )
    if record.digest != prov.base.digest:
        raise VerificationError(
            "locks/base.json and provenance.json name different bases",
            expected=prov.base.digest,
            actual=record.digest,
            hint="the records do not belong to this commit",
        )
    lock = runtime_lock.load_lock(checkout / provenance.WHEEL_LOCK)
    if lock.sha256 != record.runtime_lock_sha256:
        raise VerificationError(
            "the wheel lock is not the one the base was built from",
            expected=record.runtime_lock_sha256,
            actual=lock.sha256,
        )
    say(f"reproduce: rebuilding the base from locks/base.json ({len(record.debs)} .debs from {mirror}; about a minute)")
    # No rootfs cache: a cached tree would hide a drift of the mirror's packages.
    built = _base.build(
        record.spec(mirror), lock, python=record.python, state_dir=work, rootfs_cache=work / "rootfs", use_cache=False
    )
    how = f"rebuilt from locks/base.json ({len(record.debs)} locked .debs from {mirror})"
    if built.manifest_digest == record.digest:
        return (
            BaseSource.from_layout(built.layout, record.name, record.digest),
            BaseOutcome(record.digest, built.manifest_digest, how),
        )
    diffs = [
        f"layer {new.role}: recorded {old.digest}, rebuilt {new.digest}"
        for old, new in zip(record.layers, built.layers)
        if old != new
    ]
    diffs += _base.changed_debs(record.debs, built.debs) or [
        "every .deb is the recorded one (name, version, architecture, sha256)"
    ]
    if record.builder_sha256 != _base.builder_sha256():
        diffs.append("the base-builder modules differ from those that made the lock")
    return None, BaseOutcome(record.digest, built.manifest_digest, how, tuple(diffs))


# ------------------------------------------------------------------ diffoscope


def _diffoscope(
    image: provenance.Image, target: plan.Target, registry: str | None, pairs: list[tuple[str, Path]], work: Path
) -> list[str]:
    """diffoscope's report for each (recorded digest, rebuilt blob) whose recorded blob a
    registry serves; nothing when diffoscope is not installed."""
    tool = shutil.which("diffoscope")
    if tool is None or not pairs:
        return []
    where, repository = _registry_of(image.name, target, registry)
    if where is None:
        return [
            f"diffoscope: the recorded blobs are not readable here (no registry serves {image.name}@{image.digest})"
        ]
    out = []
    client = RegistryClient(where, attempts=1)
    for digest, rebuilt in pairs:
        recorded = work / f"recorded-{digest[7:19]}{rebuilt.suffix}"
        try:
            client.get_blob(repository, digest, recorded)
        except ReleaseError as exc:
            out.append(f"diffoscope: recorded blob {digest} not readable: {exc.one_line()}")
            continue
        proc = subprocess.run(
            [tool, "--no-progress", "--text", "-", str(recorded), str(rebuilt)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        lines = proc.stdout.splitlines()
        out.append(f"diffoscope {digest} (recorded) vs rebuilt:")
        out += [f"  {l}" for l in lines[:DIFFOSCOPE_LINES]]
        if len(lines) > DIFFOSCOPE_LINES:
            out.append(f"  ... {len(lines) - DIFFOSCOPE_LINES} more lines")
    return out


# ------------------------------------------------------------------ reproduce


def reproduce(
    repo: Path,
    records: Path,
    *,
    layers_only: bool = False,
    registry: str | None = None,
    mirror: str = _base.MIRROR,
    vendor_dir: Path | None = None,
    keep: Path | None = None,
) -> Reproduction:
    """Rebuild what `records/provenance.json` describes from its commit in `repo`.

    With `keep`, a rebuilt image whose digest equals the recorded one is added to the OCI
    layout there (what `audit` reads to check the SBOM against the image's layers); the
    images already in it (a build's) stay."""
    prov = provenance.load(records / "provenance.json")
    if prov.image is None:
        raise VerificationError(
            "provenance.json records no image to reproduce", hint="run `nox -s release` to make the records"
        )
    commit = prov.project.commit
    check_commit(repo, commit)
    stale = staleness(repo, commit, prov.profile)
    notes = []
    if prov.project.dirty:
        notes.append(
            f"the release was made from a dirty checkout ({', '.join(prov.project.dirty_paths)}); "
            "the commit does not hold those changes"
        )
    scratch = _config.REPO_ROOT / ".release"
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="reproduce-", dir=scratch) as tmp_name:
        tmp = Path(tmp_name)
        with worktree(repo, commit, tmp) as checkout:
            cfg = _config.load(checkout / "release.toml")
            rp = plan.resolve(cfg, prov.profile, trust=False)  # trusts no key
            inputs = image_inputs.image_inputs(checkout, prov.profile)
            if prov.image_inputs is not None and prov.image_inputs.commit != inputs.commit:
                raise VerificationError(
                    "provenance.json's image-input commit is not the last commit before "
                    f"{commit[:12]} that changed what reaches the image",
                    expected=prov.image_inputs.commit,
                    actual=inputs.commit,
                )
            revision = prov.image_inputs.commit if prov.image_inputs else commit
            sde = prov.source_date_epoch
            vendored = rp.task_file(vendor_dir or repo / "vendor")
            say(f"reproduce: application layers of {commit[:12]}")
            layers = compare_app_layers(checkout, cfg, vendored, prov.image, sde, tmp / "layers")
            if layers_only:
                return Reproduction(
                    commit, stale, tuple(layers), prov.image.digest, None, None, notes=tuple(notes), partial=True
                )
            source, reasons = _registry_base(prov, rp.target, registry)
            if source is not None:
                outcome = BaseOutcome(prov.base.digest, prov.base.digest, f"read from {source}")
            elif rp.target.local:
                notes.append("base not read from a registry (" + "; ".join(reasons) + ")")
                source, outcome = rebuild_base(checkout, prov, mirror=mirror, work=tmp / "base")
            else:
                outcome = BaseOutcome(
                    prov.base.digest,
                    None,
                    "cannot be read (" + "; ".join(reasons) + ") and a remote base cannot be rebuilt here",
                )
            if source is None:
                return Reproduction(commit, stale, tuple(layers), prov.image.digest, None, outcome, notes=tuple(notes))
            say(f"reproduce: derived image on {source}")
            record = build(
                cfg,
                repo=checkout,
                base=source,
                repository=prov.image.name,
                tag="reproduce",
                source_revision=revision,
                source_date_epoch=sde,
                vendored=vendored,
                out=tmp / "image",
            )
            config_diffs: list[str] = []
            report: list[str] = []
            if record.manifest_digest != prov.image.digest:
                config_diffs = compare_config(prov.image.config, record.config)
                if record.config_digest != prov.image.config_digest:
                    config_diffs.append(
                        f"config blob: recorded {prov.image.config_digest}, rebuilt {record.config_digest}"
                    )
                blobs = Path(record.layout) / "blobs" / "sha256"
                pairs = [(l.recorded.digest, blobs / l.digest[7:]) for l in layers if not l.same]
                if record.config_digest != prov.image.config_digest:
                    pairs.append((prov.image.config_digest, blobs / record.config_digest[7:]))
                report = _diffoscope(prov.image, rp.target, registry, pairs, tmp)
            elif keep is not None:
                Layout.init(keep).copy_image(
                    Layout.open(Path(record.layout)), record.manifest_digest, ref_name=KEPT_REF
                )
                notes.append(
                    f"the rebuilt image is kept in the OCI layout {keep} (ref {KEPT_REF}), "
                    "where `nox -s audit` reads its layers"
                )
    return Reproduction(
        commit,
        stale,
        tuple(layers),
        prov.image.digest,
        record.manifest_digest,
        outcome,
        tuple(config_diffs),
        tuple(notes),
        tuple(report),
    )


def render(result: Reproduction) -> str:
    s = result.staleness
    lines = [f"recorded commit {s.recorded} (HEAD {s.head})"]
    if s.inputs:
        lines.append(f"records are stale: {', '.join(s.inputs)} changed since {s.recorded[:12]}")
    else:
        lines.append("records are current: no image input changed since the recorded commit")
    if s.builder:
        lines.append(
            f"image-builder code differs from the recorded commit's: {', '.join(s.builder)} (HEAD's code rebuilds)"
        )
    lines += [f"note: {n}" for n in result.notes]
    if result.base is not None:
        b = result.base
        mark = "same" if b.same else ("NOT REBUILT" if b.rebuilt is None else "DIFFERS")
        lines.append(
            f"base  {mark:<8} recorded {b.recorded}  {b.how}"
            + (f"  rebuilt {b.rebuilt}" if b.rebuilt and not b.same else "")
        )
        lines += [f"  {d}" for d in b.differences]
    for l in result.layers:
        mark = "same" if l.same else "DIFFERS"
        lines.append(f"layer {l.name:<9} {mark:<8} recorded {l.recorded.digest}  rebuilt {l.digest}")
        if not l.same and l.diff_id != l.recorded.diff_id:
            lines.append(f"  diff_id recorded {l.recorded.diff_id}  rebuilt {l.diff_id}")
        lines += [f"  {d}" for d in l.differences]
    lines += result.config_differences
    if result.partial:
        lines.append("image not rebuilt (--layers-only)")
    elif result.image_rebuilt is None:
        lines.append(f"image NOT REBUILT: recorded {result.image_recorded} (the base could not be obtained)")
    else:
        mark = "same" if result.image_rebuilt == result.image_recorded else "DIFFERS"
        lines.append(f"image {mark}: recorded {result.image_recorded}  rebuilt {result.image_rebuilt}")
    lines += result.diffoscope
    return "\n".join(lines)
