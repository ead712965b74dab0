"""`nox -s reproduce`: rebuild from this checkout and compare with the recorded digests.

The application layers are a pure function of the checkout and the recorded
SOURCE_DATE_EPOCH, so their diff_ids and digests are always compared (no registry
needed). The whole image digest is compared too when the recorded base can be read
by digest. A mismatch is explained layer by layer and file by file.
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import config as _config
from . import localregistry, provenance
from .build import build, vendored_task_file
from .errors import ReleaseError, VerificationError
from .layerdiff import AppLayer, explain, members_of_blob
from .oci.layer import write_layer, zlib_version
from .oci.registry import Reference, RegistryClient
from .payload import VendoredTaskFile, app_layers
from .progress import say


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
class Reproduction:
    layers: tuple[LayerComparison, ...]
    image_recorded: str
    image_rebuilt: str | None
    image_note: str

    @property
    def ok(self) -> bool:
        return all(l.same for l in self.layers) and self.image_rebuilt in (None, self.image_recorded)


def compare_app_layers(repo: Path, cfg: _config.ReleaseConfig, vendored: VendoredTaskFile | None,
                       image: provenance.Image, sde: int, work: Path) -> list[LayerComparison]:
    """Rebuild each application layer and compare it with the recorded one."""
    specs = app_layers(repo, cfg.app_dir, vendored)
    recorded = {l.name: l for l in image.app_layers}
    if [s.name for s in specs] != [l.name for l in image.app_layers]:
        raise VerificationError("the application layers are not the recorded ones",
                                expected=[l.name for l in image.app_layers],
                                actual=[s.name for s in specs])
    out = []
    for spec in specs:
        layer = write_layer(spec.entries, work, source_date_epoch=sde)
        rec = recorded[spec.name]
        diffs: tuple[str, ...] = ()
        if (layer.digest, layer.diff_id) != (rec.digest, rec.diff_id):
            diffs = tuple(explain(list(rec.members), members_of_blob(layer.path)))
            if not diffs:
                diffs = ("every member is identical; the tar or gzip bytes differ "
                         f"(zlib here {zlib_version()}; see provenance.json builder.zlib_version)",)
        out.append(LayerComparison(spec.name, rec, layer.digest, layer.diff_id, diffs))
    return out


def _base_candidates(prov: provenance.Provenance, profile: _config.Profile) -> list[str]:
    """Where the recorded base digest may be read: the pinned image itself, or for a local
    base (recorded by repository only) this machine's local registry if it runs."""
    if not profile.local:
        return [f"{prov.base.name}@{prov.base.digest}"]
    state = localregistry.status()
    return [f"{state.address}/{prov.base.name}@{prov.base.digest}"] if state else []


def _available(ref: str) -> bool:
    r = Reference.parse(ref)
    try:
        return RegistryClient(r.registry, attempts=1).head_manifest(r.repository, r.digest) is not None
    except ReleaseError:
        return False


def reproduce(repo: Path, records: Path, cfg: _config.ReleaseConfig) -> Reproduction:
    prov = provenance.load(records / "provenance.json")
    if prov.image is None:
        raise VerificationError("provenance.json records no image to reproduce",
                                hint="run `nox -s release` to make the records")
    profile = cfg.profile(prov.profile)
    sde = prov.source_date_epoch
    vendored = vendored_task_file(cfg, profile, repo / "vendor")
    with tempfile.TemporaryDirectory(prefix="reproduce-") as tmp:
        layers = compare_app_layers(repo, cfg, vendored, prov.image, sde, Path(tmp) / "layers")
        rebuilt, note = None, ""
        found = next((ref for ref in _base_candidates(prov, profile) if _available(ref)), None)
        if found is None:
            note = (f"base {prov.base.name}@{prov.base.digest} is not reachable here: compared the "
                    "application layers only")
        else:
            record = build(cfg, repo=repo, base_ref=found, repository=prov.image.name,
                           tag="reproduce", source_revision=prov.project.commit,
                           source_date_epoch=sde, vendored=vendored,
                           out=Path(tmp) / "image")
            rebuilt, note = record.manifest_digest, f"base read from {found}"
    return Reproduction(tuple(layers), prov.image.digest, rebuilt, note)


def render(result: Reproduction) -> str:
    lines = []
    for l in result.layers:
        mark = "same" if l.same else "DIFFERS"
        lines.append(f"layer {l.name:<9} {mark:<8} recorded {l.recorded.digest}  rebuilt {l.digest}")
        if not l.same and l.diff_id != l.recorded.diff_id:
            lines.append(f"  diff_id recorded {l.recorded.diff_id}  rebuilt {l.diff_id}")
        lines += [f"  {d}" for d in l.differences]
    if result.image_rebuilt is None:
        lines.append(f"image digest: not rebuilt ({result.image_note})")
    else:
        mark = "same" if result.image_rebuilt == result.image_recorded else "DIFFERS"
        lines.append(f"image {mark}: recorded {result.image_recorded}  rebuilt {result.image_rebuilt} "
                     f"({result.image_note})")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """`python -m pipeline reproduce [--records DIR]`."""
    ap = argparse.ArgumentParser(prog="python -m pipeline reproduce",
                                 description="Rebuild and compare with the recorded digests.")
    ap.add_argument("--repo", type=Path, default=_config.REPO_ROOT, help="the checkout to rebuild")
    ap.add_argument("--records", type=Path, default=None,
                    help="directory holding provenance.json (default: the checkout)")
    ap.add_argument("--config", type=Path, default=None)
    args = ap.parse_args(argv)
    repo = args.repo.resolve()
    cfg = _config.load(args.config or repo / "release.toml")
    say("reproduce: rebuilding the application layers from this checkout")
    result = reproduce(repo, (args.records or repo).resolve(), cfg)
    print(render(result))
    if not result.ok:
        bad = [l.name for l in result.layers if not l.same]
        raise VerificationError("the rebuild does not reproduce the recorded digests",
                                expected="identical digests",
                                actual=f"differing layers: {', '.join(bad) or 'none'}; "
                                       f"image {result.image_rebuilt or 'not rebuilt'}",
                                hint="the explanation above names each differing file")
    print("reproduced: every compared digest is identical")
    return 0
