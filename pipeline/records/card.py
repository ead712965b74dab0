"""The dataset card (`README.md` of dist/dataset/): front matter and body, from the records.

The front matter is huggingface_hub's `DatasetCardData`, filled from release.toml's
`[dataset]` table and the records: `license: other` with its name and link, language,
tags, the source datasets, and the `default` config whose one data file is tasks.jsonl
(split `train`), with the column types of its lines. The body is generated from the typed
records only (provenance, the request, the release config): the tasks in request order and
the `[curriculum]` they come from, the images by digest, their sizes, the budgets, how to
verify, the licences and the provenance. It holds no clock time and no publication revision (the card is published in
the commit that revision names), so the audit regenerates it byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeline._project import bootstrap_install
from pipeline.config import BUDGET_FIELDS, ReleaseConfig
from pipeline.imageref import ImageRef
from pipeline.records.dataset import (
    CARD,
    FEATURES,
    MANIFEST,
    SPLIT,
    TASKS,
    TaskLine,
    task_lines,
    tasks_jsonl,
    vendor_digests,
)
from pipeline.records.hub import HubTarget
from pipeline.records.provenance import Provenance

if TYPE_CHECKING:  # read through request_order only
    from pipeline.records.submission import Request


@dataclass(frozen=True)
class ImageSize:
    """One image of the release and its compressed size, in the two measures in use.

    `layer_bytes` is the seed release's (the sum of the layer sizes); `platform_bytes` the
    platform's (config blob + layers), None while the records do not carry it.
    """

    image: str
    layer_bytes: int | None
    platform_bytes: int | None


@dataclass(frozen=True)
class Sizes:
    images: tuple[ImageSize, ...]
    total_layer_bytes: int  # the release total, a layer shared between images counted once
    total_platform_bytes: int | None


def sizes(prov: Provenance) -> Sizes:
    """The images' sizes as provenance.json records them, in both measures (an image whose manifest
    was not read has no recorded measure: only the size release.toml declares for it)."""
    if prov.sizes is None:
        return Sizes(images=(), total_layer_bytes=0, total_platform_bytes=None)
    images = tuple(
        ImageSize(i.image, i.seed_bytes if i.measured else None, i.platform_bytes) for i in prov.sizes.images
    )
    return Sizes(images=images, total_layer_bytes=prov.sizes.seed_bytes, total_platform_bytes=prov.sizes.platform_bytes)


def card_data(cfg: ReleaseConfig):
    """The card's front matter as huggingface_hub's DatasetCardData."""
    from huggingface_hub import DatasetCardData

    ds = cfg.dataset
    return DatasetCardData(
        license="other",
        license_name=ds.license_name,
        license_link=ds.license_link,
        language=list(ds.language),
        tags=list(ds.tags),
        source_datasets=list(ds.source_datasets),
        configs=[{"config_name": "default", "data_files": [{"split": SPLIT, "path": TASKS}]}],
        dataset_info={"features": [{"name": n, "dtype": t} for n, t in FEATURES]},
    )


def _n(value: int | None) -> str:
    return "not recorded" if value is None else f"{value:,}"


def _short(image: str) -> str:
    if not ImageRef.is_pinned(image):
        return f"`{image}`"
    ref = ImageRef.parse(image)
    return f"`{ref.name}@{str(ref.digest)[:19]}…`"


def _tasks(lines: tuple[TaskLine, ...]) -> list[str]:
    out = ["| # | task | kind | image | what it is |", "|---|---|---|---|---|"]
    for i, t in enumerate(lines, start=1):
        if t.family is not None:
            what = f"family `{t.family}`, difficulty {t.difficulty}, seed {t.seed}"
            kind = "procedural"
        else:
            row = "row not pinned" if t.row is None else f"row {t.row}"
            sha = f"sha256 `{t.record_sha256}`" if t.record_sha256 else "record sha256 not pinned"
            ref = f"; reference repair: source `{t.reference}`" if t.reference else ""
            what = f"`{t.dataset}` split `{t.split}` {row}, {sha}{ref}"
            kind = "external"
        out.append(f"| {i} | `{t.task_id}` | {kind} | {_short(t.image)} | {what} |")
    return out


def _curriculum(lines: tuple[TaskLine, ...]) -> list[str]:
    """Where the procedural cases come from, with the families, difficulties and seeds the
    lines hold (in request order: the declaration's order)."""
    cases = [t for t in lines if t.family is not None]
    if not cases:
        return []

    def listed(values: list[object]) -> str:
        return ", ".join(f"`{v}`" if isinstance(v, str) else str(v) for v in dict.fromkeys(values))

    return [
        f"The {len(cases)} procedural cases are the curriculum declared in `release.toml`'s `[curriculum]` "
        f"at the project commit: families {listed([t.family for t in cases])}, difficulties "
        f"{listed([t.difficulty for t in cases])} and seeds {listed([t.seed for t in cases])}, one block of "
        "one case per family for each (difficulty, seed) pair, each external task after the block its "
        "`after_block` names.",
        "",
    ]


def _images(s: Sizes, lines: tuple[TaskLine, ...]) -> list[str]:
    out = [
        "| image | tasks | layer bytes (sum of layer sizes) | config + layers (the platform's measure) |",
        "|---|---|---|---|",
    ]
    for i in s.images:
        count = sum(t.image == i.image for t in lines)
        out.append(f"| `{i.image}` | {count} | {_n(i.layer_bytes)} | {_n(i.platform_bytes)} |")
    out.append(
        f"| release total, shared layers once | {len(lines)} | {_n(s.total_layer_bytes)} | "
        f"{_n(s.total_platform_bytes)} |"
    )
    return out


def _budgets(cfg: ReleaseConfig, kinds: list[str]) -> list[str]:
    out = [
        "| budget | " + " | ".join(kinds) + " |",
        "|---|" + "---|" * len(kinds),
        "| request split | " + " | ".join(f"`{cfg.budgets[k].split}`" for k in kinds) + " |",
    ]
    out += [f"| `{f}` | " + " | ".join(f"{cfg.budgets[k].values[f]:,}" for k in kinds) + " |" for f in BUDGET_FIELDS]
    return out


def _files(prov: Provenance) -> list[str]:
    out = [
        "| file | what it is |",
        "|---|---|",
        f"| `{CARD}` | this card |",
        f"| `{TASKS}` | one line per task in request order: task id and image; procedural cases add "
        "family, difficulty and seed; external tasks add the pinned record (dataset, revision, split, row, "
        "record sha256) and the source of their reference repair |",
        f"| `{MANIFEST}` | the environment's OpenEnv manifest (name, app, port, action and observation "
        "models), as the image ships it |",
    ]
    for rel in vendor_digests(prov.sources):
        out.append(f"| `{rel}` | vendored upstream file (see Provenance and Licences) |")
    out += [
        "| `provenance.json` | what went in: upstream revisions and hashes, the project commit, the base, "
        "the image, the external records, where this dataset was published; and what the request leaves out: "
        "each task's check results, both size measures, the budgets |",
        "| `submission.json` | the request: every task with its image by digest and budgets |",
        "| `attestations/` | the signed release statement (`release.*`: its subjects are the image and the "
        "sha256 of every record and of every file of this dataset), the signed provenance, SBOM and "
        "check-result statements, `sbom.cdx.json`, `checks.json`, the in-toto layout and links |",
    ]
    if not prov.sources:
        out += [
            "",
            f"No upstream file is vendored in the `{prov.profile}` profile: its tasks are first-party, "
            "in the image; `vendor/` is absent.",
        ]
    return out


def _licences(cfg: ReleaseConfig, prov: Provenance, project_license: str | None) -> list[str]:
    ds = cfg.dataset
    out = [
        f"The whole is `{ds.license_name}` ({ds.license_link}); each part keeps its own terms:",
        "",
        "| part | licence | terms |",
        "|---|---|---|",
        "| this project's environment and pipeline (in the image) | "
        f"{project_license or 'not declared'} | `LICENSE` of "
        f"{cfg.source_url} at `{prov.project.commit}` |",
    ]
    for s in prov.sources:
        out.append(
            f"| `vendor/{s.vendor_path}` ({s.repository} at `{s.revision}`) | {s.license} | "
            f"`vendor/{s.license_path}` (sha256 `{s.license_sha256}`) |"
        )
    for dataset, licence in sorted({(r.dataset, r.license) for r in prov.external}):
        out.append(
            f"| the external task records (`{dataset}`, referenced by pin, not copied here) | {licence} | "
            "the dataset's own card |"
        )
    return out


def _provenance(cfg: ReleaseConfig, prov: Provenance) -> list[str]:
    out = [
        f"- profile `{prov.profile}`; project {cfg.source_url} at commit `{prov.project.commit}` "
        f"(tree `{prov.project.tree}`, dirty: {str(prov.project.dirty).lower()})"
    ]
    if prov.image_inputs is not None:
        out.append(
            f"- image inputs last changed in `{prov.image_inputs.commit}`; SOURCE_DATE_EPOCH {prov.source_date_epoch}"
        )
    if prov.image is not None:
        out.append(
            f"- image `{prov.image.name}@{prov.image.digest}` ({prov.image.layer_count} layers, "
            f"config `{prov.image.config_digest}`)"
        )
    out.append(f"- base `{prov.base.name}@{prov.base.digest}`")
    out.append(f"- image runtime wheel lock `{prov.wheel_lock.path}` sha256 `{prov.wheel_lock.sha256}`")
    for s in prov.sources:
        out.append(
            f"- source `{s.source}`: {s.repository} at `{s.revision}`, `{s.path}` "
            f"({s.size:,} bytes, sha256 `{s.sha256}`)"
        )
    for r in prov.external:
        state = r.status + (f": {r.reason}" if r.reason else "")
        out.append(
            f"- external record `{r.task_id}`: `{r.dataset}` at `{r.revision}`, split `{r.split}`, "
            f"row {r.row if r.row is not None else 'not pinned'}; {state}"
        )
    out.append(f"- built by pipeline {prov.builder.pipeline_version} on Python {prov.builder.python_version}")
    return out


def _publication(profile: str, target: HubTarget) -> list[str]:
    if target.publish:
        return [
            f"The `{profile}` profile publishes this folder to the dataset `{target.repository}` and names it in "
            "the request's `dataset` field. The Hub revision holding these task files is in "
            "`provenance.json` (`dataset.revision`); the records are added by the next commit, "
            "since a record cannot name the commit that holds it. The release downloaded every file "
            "again anonymously and compared every byte before it wrote its request."
        ]
    return [
        f"The `{profile}` profile writes this folder and does not publish it: it was not uploaded to "
        f"`{target.repository}` (the dataset the request names)."
    ]


def _verify(cfg: ReleaseConfig, prov: Provenance) -> list[str]:
    return [
        "The records bind every file here: `attestations/release.*` is a signed in-toto statement whose "
        "subjects are the image and the sha256 of each record and of each file of this dataset (named "
        "`dist/dataset/<path>`). The audit checks the signatures against the signer the project's "
        "`trust.toml` pins, regenerates this card and `tasks.jsonl` from the records, and re-hashes "
        "every file of `dist/dataset/` when it is there:",
        "",
        "```sh",
        f"git clone {cfg.source_url} && cd {cfg.source_url.rstrip('/').rsplit('/', 1)[-1]}",
        bootstrap_install(),
        "# the commit that holds these records (provenance.json's project commit, or a later records commit)",
        "nox -s audit                 # offline: signatures, every record, every file of this dataset",
        "nox -s reproduce             # rebuild the image here: the digests above come out again",
        f"sudo nox -s verify -- {prov.image.name}@{prov.image.digest}"
        if prov.image is not None
        else "sudo nox -s verify -- <image>",
        "```",
        "",
        "To check a downloaded copy of this dataset, place it at `dist/dataset/` of that clone and run "
        "`nox -s audit` again: a file that differs from the statement's sha256 fails `dataset/folder`.",
    ]


def _runtimes(prov: Provenance) -> list[str]:
    """Each runtime the check suite ran the image under (provenance.json's `runtimes`)."""
    if not prov.runtimes:
        return ["The records do not name the runtimes the check suite ran under."]
    lines = [
        "The whole check suite ran against the image under each runtime; each server reported its "
        "episodes' isolation mode in `GET /metadata`.",
        "",
        "| runtime | engine version | client | container security | isolation | checks passed |",
        "|---|---|---|---|---|---|",
    ]
    for r in prov.runtimes:
        sec = r.get("container_security") or {}
        added = ", ".join(sec.get("cap_add") or []) or "none"
        security = (
            f"seccomp {sec.get('seccomp')}, capabilities added: {added}, "
            f"privileged: {'yes' if sec.get('privileged') else 'no'}, user namespace mode: "
            f"{sec.get('userns_mode') or 'default'}, security options: "
            f"{', '.join(sec.get('security_opt') or []) or 'none'}"
        )
        checks = r.get("checks") or {}
        lines.append(
            f"| {r.get('name')} | {r.get('version')} | `{r.get('client')}` {r.get('client_version')} | "
            f"{security} | `{r.get('isolation')}` | {checks.get('passed')} of {checks.get('total')} |"
        )
    return lines


def render(
    cfg: ReleaseConfig,
    prov: Provenance,
    sub: Request,
    lines: tuple[TaskLine, ...],
    *,
    project_license: str | None,
    target: HubTarget,
) -> bytes:
    """The card's bytes. `lines` are tasks.jsonl's (records.dataset.task_lines); `prov` is read
    without its publication (the card is published in the commit that names it); `target`: the
    dataset the release's profile names, and whether it publishes it."""
    from huggingface_hub import DatasetCard

    procedural = sum(t.family is not None for t in lines)
    external = len(lines) - procedural
    kinds = [k for k, n in (("procedural", procedural), ("external", external)) if n and k in cfg.budgets]
    body = [
        f"# {cfg.name}",
        "",
        f"The task list of the OpenEnv environment release `{cfg.name}`: {len(lines)} tasks in request order "
        f"({procedural} procedural cases served by one image, {external} external repair tasks each served by "
        "its own image), the images pinned by digest, and the signed records of the release. Load it with "
        f"`datasets.load_dataset(...)`: config `default`, split `{SPLIT}`, one row per task of `{TASKS}`. "
        "Everything below is generated from the release records; nothing else is claimed.",
        "",
        "## Files",
        "",
        *_files(prov),
        "",
        "## Tasks",
        "",
        *_curriculum(lines),
        *_tasks(lines),
        "",
        "## Images and sizes",
        "",
        "Compressed bytes as the registry manifests declare them: the sum of the layer sizes (the seed "
        "release's measure), and config blob plus layers (the platform's measure).",
        "",
        *_images(sizes(prov), lines),
        "",
        "## Budgets",
        "",
        "Every task of a kind declares the same budgets (`release.toml`):",
        "",
        *_budgets(cfg, kinds),
        "",
        "## Container runtimes",
        "",
        *_runtimes(prov),
        "",
        "## How to verify",
        "",
        *_verify(cfg, prov),
        "",
        "## Publication",
        "",
        *_publication(prov.profile, target),
        "",
        "## Licences",
        "",
        *_licences(cfg, prov, project_license),
        "",
        "## Provenance",
        "",
        *_provenance(cfg, prov),
        "",
    ]
    card = DatasetCard("---\n" + card_data(cfg).to_yaml() + "\n---\n\n" + "\n".join(body))
    return str(card).encode()


def generate(
    cfg: ReleaseConfig, prov: Provenance, sub: Request, *, project_license: str | None, target: HubTarget
) -> dict[str, bytes]:
    """The folder's generated files, the card and tasks.jsonl, from the typed records (provenance
    read without its publication)."""
    lines = task_lines(cfg, prov, sub)
    return {
        CARD: render(cfg, prov, sub, lines, project_license=project_license, target=target),
        TASKS: tasks_jsonl(lines),
    }
