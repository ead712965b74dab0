"""What changed between two releases: `python -m pipeline diff OLD NEW`.

OLD and NEW are each a records directory (provenance.json, submission.json and
attestations/sbom.cdx.json in it) or a git revision of the repository, whose committed
records are read with git. Each is read by the records' own loaders into a `Release`; the
`ReleaseDiff` of two says, section by section:

    cases, tasks  procedural cases and external tasks added or removed; tasks moved in the
                  request's order
    budgets       each task's request budgets and split, and the [budgets.*] tables
                  provenance.json records whole (the environment's own limits too)
    digests       the image, its config and the base
    layers        each layer's digest, and the files added, removed or changed in it by path
                  (the SBOM's file components, placed in their layer by provenance.json's
                  application layers)
    packages      the SBOM's packages added, removed, or at another version
    sizes         the release's and each image's figures in the seed's and the platform's measures
    pins          source pins: the project and image-input commits, SOURCE_DATE_EPOCH, the wheel
                  lock, each vendored file and each external task record
    toolchain     provenance.json's builder: its versions and, where it lists one, the
                  installed distributions

Two identical releases give an empty diff. Nothing here judges a change: the diff is the
record a release engineer reviews before tagging, and the one an auditor reads.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from pipeline.config import REPO_ROOT
from pipeline.errors import ConfigError, ReleaseError, VerificationError
from pipeline.imageref import ImageRef
from pipeline.records import provenance as provenance_mod
from pipeline.records import submission as submission_mod
from pipeline.records.attest import SBOM_FILE
from pipeline.sources import git

PROVENANCE = "provenance.json"
SUBMISSION = "submission.json"
SBOM = f"attestations/{SBOM_FILE}"
RECORDS = (PROVENANCE, SUBMISSION, SBOM)
BASE_LAYER = "base layer {index}"
OTHER_FILES = "not in an application layer"
# The pins of a vendored file and of an external task record: what names its bytes.
SOURCE_PINS = ("repository", "revision", "path", "sha256", "license_sha256")
EXTERNAL_PINS = ("dataset", "revision", "subset", "split", "row", "sha256", "image")

Value = str | int | bool | None


# ------------------------------------------------------------------ one release, read


@dataclass(frozen=True)
class Package:
    """A package of the SBOM: its ecosystem (the purl type), name and, when the purl says, architecture."""

    ecosystem: str
    name: str
    version: str
    arch: str = ""

    @property
    def key(self) -> str:
        return f"{self.ecosystem}:{self.name}" + (f":{self.arch}" if self.arch else "")


@dataclass(frozen=True)
class SbomFacts:
    """What the diff reads of an SBOM: layer digests (bottom first), packages, files (path -> sha256)."""

    layers: tuple[str, ...]
    packages: Mapping[str, Package]
    files: Mapping[str, str]


@dataclass(frozen=True)
class Release:
    """One release's records, loaded: where they came from, provenance, the request and the SBOM."""

    label: str
    provenance: provenance_mod.Provenance
    request: submission_mod.Request
    sbom: SbomFacts


def read_sbom(data: bytes, where: str) -> SbomFacts:
    """The layers, packages and files of a CycloneDX JSON SBOM (read by cyclonedx-python-lib)."""
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import ComponentType

    try:
        bom = Bom.from_json(json.loads(data))  # type: ignore[attr-defined]
    except (ValueError, TypeError, KeyError) as exc:
        raise VerificationError(
            f"{where} is not a CycloneDX JSON document",
            actual=str(exc).splitlines()[0],
            hint="pass a records directory or a revision whose SBOM was written by a release",
        ) from None
    layers: list[tuple[int, str]] = []
    top = bom.metadata.component
    for prop in top.properties if top is not None else ():
        if prop.name == "arena:layer":
            index, _, digest = (prop.value or "").partition(":")
            layers.append((int(index), digest))
    packages: dict[str, Package] = {}
    files: dict[str, str] = {}
    for c in bom.components:
        if c.type == ComponentType.FILE:
            files[c.name] = next((h.content for h in c.hashes if h.alg.value == "SHA-256"), "")
        elif c.purl is not None:
            p = Package(
                c.purl.type or "",
                c.purl.name,
                c.version or c.purl.version or "",
                (c.purl.qualifiers or {}).get("arch", ""),
            )
            packages[p.key] = p
    return SbomFacts(tuple(d for _, d in sorted(layers)), dict(sorted(packages.items())), dict(sorted(files.items())))


def _load_dir(directory: Path, label: str) -> Release:
    missing = [name for name in RECORDS if not (directory / name).is_file()]
    if missing:
        raise ConfigError(
            f"{label} is not a records directory: {', '.join(missing)} missing",
            expected=", ".join(RECORDS),
            actual=f"{len(RECORDS) - len(missing)} of them",
            hint="pass the directory holding a release's records (the checkout, or a copy)",
        )
    return Release(
        label,
        provenance_mod.load(directory / PROVENANCE),
        submission_mod.load(directory / SUBMISSION),
        read_sbom((directory / SBOM).read_bytes(), f"{label}: {SBOM}"),
    )


def _load_revision(repo: Path, revision: str, commit: str) -> Release:
    label = revision if revision == commit else f"{revision} ({commit[:12]})"
    entries = {e.path: e for e in git.tree_files(repo, commit, RECORDS)}
    missing = [name for name in RECORDS if name not in entries]
    if missing:
        raise ConfigError(
            f"commit {commit[:12]} ({revision}) holds no release records: {', '.join(missing)} missing",
            expected=", ".join(RECORDS),
            actual=f"{len(RECORDS) - len(missing)} of them",
            hint="name a revision that committed a release's records",
        )
    with tempfile.TemporaryDirectory(prefix="release-diff-") as tmp:
        for name, entry in entries.items():
            (Path(tmp) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / name).write_bytes(git.blob(repo, entry.oid))
        try:
            return _load_dir(Path(tmp), label)
        except ReleaseError as exc:  # named by the revision, not by the temporary copy
            raise type(exc)(
                exc.what.replace(tmp + "/", label + ": "), expected=exc.expected, actual=exc.actual, hint=exc.hint
            ) from exc


def load(spec: str | Path, *, repo: Path = REPO_ROOT) -> Release:
    """The release `spec` names: a records directory, else a git revision of `repo`."""
    text = str(spec)
    if Path(text).is_dir():
        return _load_dir(Path(text), text)
    commit = git.commit_of(repo, text)
    if commit is None:
        raise ConfigError(
            f"{text!r} is neither a records directory nor a revision of the git repository {repo}",
            expected="a directory holding provenance.json, submission.json and attestations/, "
            "or a commit, branch or tag",
            actual="no such directory, and git names no commit by it",
        )
    return _load_revision(repo, text, commit)


# ------------------------------------------------------------------ the diff


@dataclass(frozen=True)
class Change:
    """One value that differs: what it is, its old and its new value (None: absent)."""

    what: str
    old: Value
    new: Value


@dataclass(frozen=True)
class Moved:
    """A task both releases request, at another position among the tasks they share (1-based)."""

    task_id: str
    old: int
    new: int


@dataclass(frozen=True)
class FileChange:
    """A file at the same path with other content: its sha256 in each release."""

    path: str
    old: str
    new: str


@dataclass(frozen=True)
class LayerChange:
    """A layer whose digest, or whose files, differ: paths added, removed and changed (content)."""

    name: str
    old: str | None
    new: str | None
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[FileChange, ...] = ()


@dataclass(frozen=True)
class Upgrade:
    """A package (or distribution) at another version."""

    package: str
    old: str
    new: str


@dataclass(frozen=True)
class Packages:
    added: tuple[Package, ...] = ()
    removed: tuple[Package, ...] = ()
    upgraded: tuple[Upgrade, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.upgraded)


@dataclass(frozen=True)
class ReleaseDiff:
    """Every difference between two releases, by section (see the module doc)."""

    old: str
    new: str
    cases_added: tuple[str, ...] = ()
    cases_removed: tuple[str, ...] = ()
    tasks_added: tuple[str, ...] = ()
    tasks_removed: tuple[str, ...] = ()
    tasks_moved: tuple[Moved, ...] = ()
    budgets: tuple[Change, ...] = ()
    digests: tuple[Change, ...] = ()
    layers: tuple[LayerChange, ...] = ()
    packages: Packages = field(default_factory=Packages)
    sizes: tuple[Change, ...] = ()
    pins: tuple[Change, ...] = ()
    toolchain: tuple[Change, ...] = ()
    distributions: Packages = field(default_factory=Packages)

    @property
    def changed(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self) if f.name not in ("old", "new"))

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["changed"] = self.changed
        return data


def _kinds(r: Release) -> dict[str, str]:
    """task id -> kind ("procedural" cases, "external" tasks), from provenance.json's task records."""
    return {t.task_id: t.kind for t in r.provenance.tasks}


def _order(old: Sequence[str], new: Sequence[str]) -> tuple[Moved, ...]:
    shared = set(old) & set(new)
    a, b = [t for t in old if t in shared], [t for t in new if t in shared]
    if a == b:
        return ()
    at = {t: i for i, t in enumerate(b)}
    return tuple(Moved(t, i + 1, at[t] + 1) for i, t in enumerate(a) if at[t] != i)


def _budgets(old: Release, new: Release) -> list[Change]:
    out = []
    before = {t.task_id: t for t in old.request.tasks}
    for task in new.request.tasks:
        was = before.get(task.task_id)
        if was is None:
            continue
        if was.split != task.split:
            out.append(Change(f"{task.task_id} split", was.split, task.split))
        for name in sorted(set(was.budgets) | set(task.budgets)):
            if was.budgets.get(name) != task.budgets.get(name):
                out.append(Change(f"{task.task_id} {name}", was.budgets.get(name), task.budgets.get(name)))
    tables_old, tables_new = old.provenance.budgets or {}, new.provenance.budgets or {}
    for kind in sorted(set(tables_old) | set(tables_new)):
        a, b = tables_old.get(kind, {}), tables_new.get(kind, {})
        out += [
            Change(f"[budgets.{kind}] {k}", a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)
        ]
    return out


def _compare(pairs: Iterable[tuple[str, Value, Value]]) -> list[Change]:
    return [Change(what, a, b) for what, a, b in pairs if a != b]


def _digests(old: Release, new: Release) -> list[Change]:
    a, b = old.provenance, new.provenance
    return _compare(
        [
            ("image", a.image.name if a.image else None, b.image.name if b.image else None),
            ("image digest", a.image.digest if a.image else None, b.image.digest if b.image else None),
            (
                "image config digest",
                a.image.config_digest if a.image else None,
                b.image.config_digest if b.image else None,
            ),
            ("base", a.base.name, b.base.name),
            ("base digest", a.base.digest, b.base.digest),
        ]
    )


def _named_layers(r: Release) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """[(layer name, digest)] bottom first, and file path -> the name of the layer holding it."""
    app = r.provenance.image.app_layers if r.provenance.image else ()
    names = {l.digest: l.name for l in app}
    base = len(r.sbom.layers) - len(app)
    layers = [
        (names[d] if i >= base and d in names else BASE_LAYER.format(index=i), d) for i, d in enumerate(r.sbom.layers)
    ]
    holder = {"/" + m.path: l.name for l in app for m in l.members}
    return layers, holder


def _layers(old: Release, new: Release) -> list[LayerChange]:
    layers_a, holder_a = _named_layers(old)
    layers_b, holder_b = _named_layers(new)
    digest_a, digest_b = dict(layers_a), dict(layers_b)
    files_a: dict[str, dict[str, str]] = {}
    files_b: dict[str, dict[str, str]] = {}
    for files, sbom, holder in ((files_a, old.sbom, holder_a), (files_b, new.sbom, holder_b)):
        for path, sha in sbom.files.items():
            files.setdefault(holder.get(path, OTHER_FILES), {})[path] = sha
    order = [n for n, _ in layers_b] + [n for n, _ in layers_a if n not in digest_b]
    order += sorted((set(files_a) | set(files_b)) - set(order))
    out = []
    for name in order:
        a, b = files_a.get(name, {}), files_b.get(name, {})
        change = LayerChange(
            name,
            digest_a.get(name),
            digest_b.get(name),
            added=tuple(sorted(set(b) - set(a))),
            removed=tuple(sorted(set(a) - set(b))),
            changed=tuple(FileChange(p, a[p], b[p]) for p in sorted(set(a) & set(b)) if a[p] != b[p]),
        )
        if change.old != change.new or change.added or change.removed or change.changed:
            out.append(change)
    return out


def _packages(old: Mapping[str, Package], new: Mapping[str, Package]) -> Packages:
    return Packages(
        added=tuple(new[k] for k in sorted(set(new) - set(old))),
        removed=tuple(old[k] for k in sorted(set(old) - set(new))),
        upgraded=tuple(
            Upgrade(k, old[k].version, new[k].version)
            for k in sorted(set(old) & set(new))
            if old[k].version != new[k].version
        ),
    )


def _sizes(old: Release, new: Release) -> list[Change]:
    a, b = old.provenance.sizes, new.provenance.sizes
    pairs: list[tuple[str, Value, Value]] = [
        ("release seed_bytes", a.seed_bytes if a else None, b.seed_bytes if b else None),
        ("release platform_bytes", a.platform_bytes if a else None, b.platform_bytes if b else None),
        (
            "image compressed_size",
            old.provenance.image.compressed_size if old.provenance.image else None,
            new.provenance.image.compressed_size if new.provenance.image else None,
        ),
    ]

    # Images are named by digest, so they are paired by repository and place among its images.
    def keyed(sizes) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for img in sizes.images if sizes else ():
            repo = ImageRef.parse(img.image).name
            n = sum(k.startswith(repo + "#") for k in out)
            out[f"{repo}#{n + 1}"] = img
        return out

    ia, ib = keyed(a), keyed(b)
    for key in list(ib) + [k for k in ia if k not in ib]:
        x, y = ia.get(key), ib.get(key)
        label = key.removesuffix("#1") if key.endswith("#1") and f"{key[:-2]}#2" not in ia | ib else key
        for attr in ("seed_bytes", "platform_bytes", "layer_count"):
            pairs.append((f"{label} {attr}", getattr(x, attr) if x else None, getattr(y, attr) if y else None))
    return _compare(pairs)


def _pin_values(r: Release) -> dict[str, Value]:
    p = r.provenance
    values: dict[str, Value] = {
        "project commit": p.project.commit,
        "project dirty": p.project.dirty,
        "profile": p.profile,
        "image-input commit": p.image_inputs.commit if p.image_inputs else None,
        "image inputs sha256": p.image_inputs.sha256 if p.image_inputs else None,
        "SOURCE_DATE_EPOCH": p.source_date_epoch,
        "wheel lock sha256": p.wheel_lock.sha256,
    }
    values.update({f"source {s.source} {k}": getattr(s, k) for s in p.sources for k in SOURCE_PINS})
    values.update({f"external {e.task_id} {k}": getattr(e, k) for e in p.external for k in EXTERNAL_PINS})
    return values


def _pins(old: Release, new: Release) -> list[Change]:
    a, b = _pin_values(old), _pin_values(new)
    return _compare((k, a.get(k), b.get(k)) for k in list(b) + [k for k in a if k not in b])


def _builder(r: Release) -> tuple[dict[str, Value], dict[str, Package] | None]:
    """The builder's scalar values, and its toolchain: each installed distribution with its
    version and the locked file it came from (None: records written before it was recorded)."""
    builder = r.provenance.builder
    scalars: dict[str, Value] = {
        name: value for name, value in asdict(builder).items() if isinstance(value, (str, int, bool)) or value is None
    }
    if not builder.toolchain:
        return scalars, None
    dists = {}
    for d in builder.toolchain:
        p = Package("dist", d.name, d.version if d.file.endswith(".whl") else f"{d.version} (sdist)")
        dists[p.key] = p
    return scalars, dists


def _toolchain(old: Release, new: Release) -> tuple[list[Change], Packages]:
    (sa, da), (sb, db) = _builder(old), _builder(new)
    changes = _compare((k, sa.get(k), sb.get(k)) for k in list(sb) + [k for k in sa if k not in sb])
    if da is None or db is None:
        if (da is None) != (db is None):
            changes.append(
                Change(
                    "installed distributions",
                    "not recorded" if da is None else f"{len(da)} recorded",
                    "not recorded" if db is None else f"{len(db)} recorded",
                )
            )
        return changes, Packages()
    return changes, _packages(da, db)


def diff(old: Release, new: Release) -> ReleaseDiff:
    """Every difference between release `old` and release `new`."""
    kinds_a, kinds_b = _kinds(old), _kinds(new)
    ids_a = [t.task_id for t in old.request.tasks]
    ids_b = [t.task_id for t in new.request.tasks]

    def of_kind(ids: Iterable[str], kinds: Mapping[str, str], case: bool) -> list[str]:
        return [t for t in ids if (kinds.get(t) == "procedural") == case]

    added = [t for t in ids_b if t not in set(ids_a)]
    removed = [t for t in ids_a if t not in set(ids_b)]
    toolchain, distributions = _toolchain(old, new)
    return ReleaseDiff(
        old=old.label,
        new=new.label,
        cases_added=tuple(of_kind(added, kinds_b, True)),
        cases_removed=tuple(of_kind(removed, kinds_a, True)),
        tasks_added=tuple(of_kind(added, kinds_b, False)),
        tasks_removed=tuple(of_kind(removed, kinds_a, False)),
        tasks_moved=_order(ids_a, ids_b),
        budgets=tuple(_budgets(old, new)),
        digests=tuple(_digests(old, new)),
        layers=tuple(_layers(old, new)),
        packages=_packages(old.sbom.packages, new.sbom.packages),
        sizes=tuple(_sizes(old, new)),
        pins=tuple(_pins(old, new)),
        toolchain=tuple(toolchain),
        distributions=distributions,
    )


# ------------------------------------------------------------------ the table


def _sha256(hexdigest: str) -> str:
    """A file's content in a table row: the start of its sha256 (the JSON has all of it)."""
    return f"sha256:{hexdigest[:12]}"


def _show(value: Value, *, figure: bool = False) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}" if figure else str(value)
    return value


def rows(d: ReleaseDiff) -> list[tuple[str, str, str, str]]:
    """The table's rows: (section, what, old, new); "-" where a side has none."""
    out: list[tuple[str, str, str, str]] = []
    out += [("case", t, "-", "added") for t in d.cases_added]
    out += [("case", t, "removed", "-") for t in d.cases_removed]
    out += [("task", t, "-", "added") for t in d.tasks_added]
    out += [("task", t, "removed", "-") for t in d.tasks_removed]
    out += [("order", m.task_id, f"position {m.old}", f"position {m.new}") for m in d.tasks_moved]
    for section, changes in (("budget", d.budgets), ("digest", d.digests)):
        out += [(section, c.what, _show(c.old), _show(c.new)) for c in changes]
    for layer in d.layers:
        if layer.old != layer.new:
            out.append(("layer", layer.name, _show(layer.old), _show(layer.new)))
        out += [("file", f"{layer.name}: {p}", "-", "added") for p in layer.added]
        out += [("file", f"{layer.name}: {p}", "removed", "-") for p in layer.removed]
        out += [("file", f"{layer.name}: {c.path}", _sha256(c.old), _sha256(c.new)) for c in layer.changed]
    for section, pkgs in (("package", d.packages), ("toolchain", d.distributions)):
        out += [(section, p.key, "-", p.version) for p in pkgs.added]
        out += [(section, p.key, p.version, "-") for p in pkgs.removed]
        out += [(section, u.package, u.old, u.new) for u in pkgs.upgraded]
    out += [("size", c.what, _show(c.old, figure=True), _show(c.new, figure=True)) for c in d.sizes]
    for section, changes in (("pin", d.pins), ("toolchain", d.toolchain)):
        out += [(section, c.what, _show(c.old), _show(c.new)) for c in changes]
    return out


def summary(d: ReleaseDiff) -> str:
    """One line: "no change", or how many of each kind of difference."""
    if not d.changed:
        return "no change"
    counts: dict[str, int] = {}
    for section, *_ in rows(d):
        counts[section] = counts.get(section, 0) + 1
    return ", ".join(f"{n} {section}{'s' if n > 1 else ''}" for section, n in counts.items())


def render_table(d: ReleaseDiff) -> str:
    """The diff as a text table, headed by what was compared; "no change" when there is none."""
    head = [f"old: {d.old}", f"new: {d.new}"]
    if not d.changed:
        return "\n".join([*head, "no change"])
    table = [("section", "what", "old", "new"), *rows(d)]
    widths = [max(len(r[i]) for r in table) for i in range(3)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r[:3], widths)) + "  " + r[3] for r in table]
    return "\n".join([*head, *lines, f"{len(table) - 1} difference(s): {summary(d)}"])


def render_markdown(d: ReleaseDiff) -> list[str]:
    """The diff as Markdown lines (the release report's section body)."""
    lines = [f"- old: `{d.old}`", f"- new: `{d.new}`", ""]
    if not d.changed:
        return [*lines, "no change"]
    lines += [f"{len(rows(d))} difference(s): {summary(d)}", "", "| section | what | old | new |", "|---|---|---|---|"]
    lines += [f"| {s} | `{w}` | {o} | {n} |" for s, w, o, n in rows(d)]
    return lines


def against_committed(repo: Path) -> tuple[str, list[str]]:
    """The checkout's records (a release just placed them) against those committed at HEAD:
    a one-line summary and the release report's Markdown lines. Records that cannot be
    compared (none committed yet, or of an older schema) are said so, with why."""
    try:
        result = diff(load("HEAD", repo=repo), _load_dir(Path(repo), "the records this release wrote"))
    except ReleaseError as exc:
        why = f"not compared with the committed records: {exc.one_line()}"
        return why, [why]
    return summary(result), render_markdown(result)
