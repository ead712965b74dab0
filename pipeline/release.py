"""`nox -s release`: every stage in order, then the records.

lock/sources -> base -> build -> sbom -> push -> anonymous pull + check suite ->
admission preflight of the request -> the dataset's task files (published and read back:
arena) -> provenance.json, attestations/, submission.json -> the dataset's records
(published and read back: arena) -> attach (each signed statement a Sigstore bundle, an OCI
referrer of the image) -> self-audit (the audit `nox -s audit -- --registry` runs, on the
records just written; a SLSA verification summary of it signed, written to dist/ and attached
as a fifth referrer: the releaser's self-check, pipeline.audit.selfcheck) -> report.

The vendor, build, sbom, verify, attest and submission stages are each recorded as an
in-toto link while they run (pipeline.records.links); the last record written is the
release statement that binds every other one (pipeline.records.statement). A release
key that trust.toml does not pin is announced loudly, with the line that pins it.

Fail closed: any stage that fails stops the release with one line and a non-zero
exit. The records and the dataset folder are staged under `.release/staging/` as the
checkout lays them out, attached and self-audited there, and switched into place in one
journaled step (pipeline.records.install) only after every stage passed, the self-audit
included, so a failed or killed release leaves the previous records whole; the next release
completes an install a kill interrupted, and removes what dead runs staged. Whatever the
release started (the local registry, containers) is stopped on the way out, Ctrl-C included.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline import basestage, plan, runs
from pipeline import config as _config
from pipeline import diff as release_diff
from pipeline import inputs as image_inputs
from pipeline._io import write_atomic
from pipeline.audit import selfcheck
from pipeline.checks import external as checks_external
from pipeline.checks import report as checks_report
from pipeline.checks import results as checks_results
from pipeline.checks import runtimes as checks_runtimes
from pipeline.checks.run import references_of, verify_image
from pipeline.errors import (
    CheckFailure,
    NoSpace,
    RegistryError,
    ReleaseError,
    SourceError,
    ToolError,
    is_no_space,
)
from pipeline.image import base, build
from pipeline.image.payload import VendoredTaskFile
from pipeline.imageref import ImageRef
from pipeline.progress import say
from pipeline.records import (
    attest,
    bundles,
    card,
    dataset,
    hub,
    preflight,
    provenance,
    sbom,
    sbom_licenses,
    submission,
    verification,
)
from pipeline.records import install as records_install
from pipeline.records import links as intoto_links
from pipeline.records import sizes as image_sizes
from pipeline.records import statement as release_statement
from pipeline.registry import local as localregistry
from pipeline.registry.push import push_layout
from pipeline.runtime import dockerd
from pipeline.runtime.runtime import ContainerRuntime
from pipeline.sources import dataset as external
from pipeline.sources import lock as runtime_lock
from pipeline.sources import vendor as sources
from pipeline.sources.references import reference_scripts

if TYPE_CHECKING:  # the signing libraries load when the release makes its signer (plan.ReleasePlan.signer)
    from pipeline.records.signing import KeySigner, SigstoreSigner
    from pipeline.registry import referrers

RECORDS = ("provenance.json", "submission.json", "attestations")


# About what each stage writes, for the one line a full disk gives (ENOSPC): the base
# (its layout, and mmdebstrap's rootfs when it is built: basestage says so itself), the
# derived image's layout in dist/, the image in the registry's storage, the pulled image in
# the container engine's storage, the records.
STAGE_NEEDS = {
    "base": 200_000_000,
    "vendor": 10_000_000,
    "build": 150_000_000,
    "sbom": 10_000_000,
    "push": 100_000_000,
    "verify": 400_000_000,
    "records": 20_000_000,
    "install": 20_000_000,
}
# Where each stage writes, when the error names no file (relative to the checkout).
STAGE_WRITES = {
    "base": ".release/base",
    "vendor": "vendor",
    "build": "dist/oci",
    "sbom": ".release/staging",
    "push": ".release/registry/storage",
    "verify": "/var/lib/containers",
    "records": ".release/staging",
    "install": ".release/staging",
}


@dataclass
class Timings:
    """Wall time of each stage, for progress lines and the report; a full disk in a stage
    becomes one NoSpace line (the path, about what the stage needs, the fix)."""

    stages: list[tuple[str, float]] = field(default_factory=list)
    root: Path | None = None

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        runs.pause_at(name.split()[0])
        say(f"==> {name}")
        started = time.monotonic()
        try:
            yield
        except (ToolError, RegistryError) as exc:
            # A tool's own words (podman pulling into its storage, docker-registry's 500); never
            # a check's finding (the environment's own tmpfs limits say the same words).
            if "no space left on device" not in exc.one_line().lower():
                raise
            short = name.split()[0]
            raise NoSpace.at(
                (self.root or Path.cwd()) / STAGE_WRITES.get(short, "."),
                need=STAGE_NEEDS.get(short),
                what=f"the {short} stage: {exc.what}",
            ) from None
        except OSError as exc:
            if not is_no_space(exc):
                raise
            short = name.split()[0]
            # shutil's copies name the source first and the file they were writing second.
            written = getattr(exc, "filename2", None) or exc.filename
            where = Path(written).parent if written else (self.root or Path.cwd()) / STAGE_WRITES.get(short, ".")
            raise NoSpace.at(where, need=STAGE_NEEDS.get(short), what=f"the {short} stage: {exc.strerror}") from None
        finally:
            took = time.monotonic() - started
            self.stages.append((name, took))
            say(f"    {name}: {took:.1f} s")


@dataclass(frozen=True)
class Outcome:
    """What a release produced."""

    image: str
    pushed: str
    records: tuple[Path, ...]
    report: Path
    timings: tuple[tuple[str, float], ...]
    dataset: Path


@dataclass(frozen=True)
class Run:
    """What every stage of one release shares: the checkout, the staging directory the records
    are written to, the signer, and the in-toto links recorded while the stages run."""

    repo: Path
    staging: Path
    signer: KeySigner | SigstoreSigner
    links: intoto_links.StageRecorder
    started_at: datetime
    allow_dirty: bool

    @property
    def att_dir(self) -> Path:
        return self.staging / "attestations"


@dataclass(frozen=True)
class Checkout:
    """The checkout stage: the project commit, the image-input commit and its time."""

    revision: provenance.ProjectRevision
    inputs: provenance.ImageInputs
    source_date_epoch: int
    hf_token: str | None  # read before any work when the profile publishes the dataset


@dataclass(frozen=True)
class Vendored:
    """The vendor stage: the pinned files and external task records in vendor/, and the task
    file the image serves."""

    files: tuple[sources.VendoredFile, ...]
    externals: tuple[external.ExternalRecord, ...]
    task_file: VendoredTaskFile | None


@dataclass(frozen=True)
class Sbom:
    """The sbom stage: the document, the wheel lock it was read against, and its licence figure."""

    document: bytes
    lock_text: str
    coverage: str


@dataclass(frozen=True)
class Made:
    """Every stage's record up to the admission preflight: what the records are written from."""

    checkout: Checkout
    base: provenance.Base
    vendored: Vendored
    built: build.BuildRecord
    sbom: Sbom
    pushed: str  # the pushed image's reference, pulled back anonymously by the verify stage
    suite: checks_results.SuiteResult
    admitted: AdmittedRequest

    @property
    def image(self) -> str:
        return f"{self.built.repository}@{self.built.manifest_digest}"


@dataclass(frozen=True)
class Finished:
    """The stages after the records: where the dataset went, the referrers attached, the
    self-audit, and what changed since the committed records (the report's tables)."""

    published: Published
    attached: tuple[referrers.Pushed, ...]
    checked: selfcheck.SelfCheck
    changes: tuple[str, ...]


def _report(
    path: Path, cfg: _config.ReleaseConfig, rp: plan.ReleasePlan, made: Made, done: Finished, timings: Timings
) -> None:
    def figure(n: int | None) -> str:
        return "unknown (manifest not read)" if n is None else f"{n:,}"

    record, admitted, suite, published = made.built, made.admitted, made.suite, done.published
    request, sizes = admitted.request, admitted.sizes
    lines = [
        f"# Release report ({rp.profile} profile)",
        "",
        f"- image: `{made.image}`",
        f"- pushed and pulled back anonymously: `{made.pushed}`",
        f"- base: `{record.base}`",
        f"- image inputs last changed in: `{record.source_revision}` (the revision label; "
        f"SOURCE_DATE_EPOCH {record.source_date_epoch})",
        f"- request: `{request.submission_id}`, dataset `{request.dataset}`, source {request.source}",
        f"- compressed size: {record.compressed_size:,} bytes in "
        f"{len(record.base_layers) + len(record.app_layers)} layers "
        f"(application layers {record.app_size:,} bytes)",
        f"- release total, the seed's measure ({image_sizes.SEED_MEASURE}): {sizes.seed_bytes:,} bytes",
        f"- release total, the platform's measure ({image_sizes.PLATFORM_MEASURE}): "
        f"{figure(sizes.platform_bytes)} bytes",
        f"- SBOM licences: {made.sbom.coverage}",
        "",
        "## Image sizes",
        "",
        "| image | layers | seed measure (bytes) | platform measure (bytes) |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| `{s.image}` | {s.layer_count if s.layer_count is not None else '-'} | {s.seed_bytes:,}"
        f"{'' if s.measured else ' (declared in release.toml)'} | {figure(s.platform_bytes)} |"
        for s in sizes.images
    ]
    lines += [
        "",
        "## Budgets",
        "",
        "| kind | split | " + " | ".join(_config.BUDGET_FIELDS) + " |",
        "|---|---|" + "---|" * len(_config.BUDGET_FIELDS),
    ]
    lines += [
        f"| {kind} | {b.split} | " + " | ".join(str(b.values[k]) for k in _config.BUDGET_FIELDS) + " |"
        for kind, b in sorted(cfg.budgets.items())
    ]
    lines += [
        "",
        "`observation_tokens` is a limit of the environment, not a request field.",
        "",
        "## Admission preflight",
        "",
        "```",
        admitted.admission.render(),
        "```",
        "",
        "## Application layers",
        "",
        "| layer | digest | diff_id | bytes |",
        "|---|---|---|---|",
    ]
    lines += [f"| {l.name} | `{l.digest}` | `{l.diff_id}` | {l.size:,} |" for l in record.app_layers]
    lines += [
        "",
        "## Checks",
        "",
        "```",
        checks_report.summary(suite),
        "```",
        "",
        "## Tasks",
        "",
        "| task | image | status | passed | failed |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {t.task_id} | `{str(ImageRef.parse(t.image).digest)[:19]}` | {t.verification.status} | "
        f"{t.verification.passed} | {t.verification.failed} |"
        for t in admitted.tasks
    ]
    lines += ["", "## External repair checks", "", checks_report.external_markdown(suite)]
    lines += ["", "## Dataset", "", f"- `{dataset.FOLDER}/`: {published.files} files"]
    pub = published.task_files
    lines += (
        [
            f"- published to `{pub.url}` (task files; provenance.json's `dataset.revision`), records added in "
            f"`{published.records_revision}`; every file read back anonymously, every byte equal"
        ]
        if pub.published
        else [f"- {pub.reason}"]
    )
    lines += [
        "",
        "## Attestations in the registry",
        "",
        "Sigstore bundles v0.3, each an OCI referrer of the image manifest:",
        "",
        "| predicate type | referrer manifest | listed by |",
        "|---|---|---|",
    ]
    lines += [
        f"| `{a.descriptor.annotations.get(bundles.PREDICATE_TYPE, '')}` | `{a.descriptor.digest}` | {a.listed_by} |"
        for a in done.attached
    ]
    checked = done.checked
    ok = sum(c.status == "pass" for c in checked.rows)
    lines += [
        "",
        f"The verification summary (`{checked.path.relative_to(path.parent.parent)}`, not a record) "
        f"is the release's audit of its own records: {ok} of {len(checked.rows)} checks passed, "
        f"the rest information or not verified "
        f"({', '.join(c.id for c in checked.rows if c.status == 'skipped')}), against "
        f"{checked.trust_root}. It is the releaser's self-check, signed by the release's own "
        "signer, not an independent verifier's: an auditor runs `nox -s audit -- --registry`.",
    ]
    lines += [
        "",
        "## Changes since the committed records",
        "",
        "`nox -s diff -- HEAD .` prints this table; [docs/diff.md](../docs/diff.md) says what it compares.",
        "",
        *done.changes,
    ]
    lines += ["", "## Stage timings", "", "| stage | seconds |", "|---|---|"]
    lines += [f"| {name} | {secs:.1f} |" for name, secs in timings.stages]
    lines += [f"| total | {sum(s for _, s in timings.stages):.1f} |", ""]
    write_atomic(path, "\n".join(lines).encode())


def _clear_leftovers(repo: Path) -> None:
    """What releases that are gone left behind: their check containers and PID-named
    temporary files, one line each (their staging directories and an interrupted install:
    records_install.recover; their local registry: the registry stage)."""
    state = repo / ".release"
    line = runs.remove_dead_temp_files(
        [state, repo / "dist"], skip=[state / "base" / "rootfs", state / "registry", state / "staging"]
    )
    if line:
        say(line)
    line = dockerd.stop_unused()  # its check containers go with it
    if line:
        say(line)
    try:
        gone = ContainerRuntime().remove_orphans()
    except ReleaseError:
        return  # no container runtime: the verify stage says so
    if gone:
        say(f"removed {len(gone)} check container(s) of releases that are gone: {', '.join(c[:12] for c in gone)}")


def _check_base_lock(cfg: _config.ReleaseConfig) -> None:
    """Stop before any work when the committed locks/base.json does not describe the base
    these inputs and this code build: the release would rewrite it, and its records
    would then name a dirty checkout."""
    record = base.load_record()
    lock = runtime_lock.load_lock()
    if record is None or not record.built_from(base.BaseSpec(), lock.sha256, cfg.python):
        raise SourceError(
            "locks/base.json is not the base of this commit's inputs and base-builder code",
            expected="a current, committed base lock",
            actual="missing" if record is None else f"pinned {record.digest}, made from other inputs or code",
            hint="run `nox -s base` and commit locks/base.json, then release",
        )


@dataclass(frozen=True)
class AdmittedRequest:
    """The request and what it rests on, made and preflighted before any record is signed."""

    request: submission.Request
    tasks: tuple[verification.TaskRecord, ...]
    sizes: image_sizes.Sizes
    admission: preflight.Report


def admitted_request(
    cfg: _config.ReleaseConfig,
    rp: plan.ReleasePlan,
    suite: checks_results.SuiteResult,
    *,
    image: str,
    source_revision: str,
    registry: str,
) -> AdmittedRequest:
    """The request of this release, after the platform's admission checks (preflight) passed on it.

    Not checked is never a pass: the arena profile stops on it; the local profile, which
    cannot reach ghcr.io, carries on and says which checks it could not run."""
    tasks = verification.build(cfg, rp.external, suite, image=image)
    sizes = image_sizes.measure(image_sizes.descriptors(suite, image, cfg.external.tasks))
    request = submission.build(cfg, rp.request, tasks, image=image, source_revision=source_revision)
    report = preflight.run(
        submission.to_json(request),
        evidence=preflight.Evidence(suite, tasks, sizes),
        admission=cfg.admission,
        resolve=preflight.resolver({rp.target.image_name: registry}),
    )
    say(report.render())
    report.enforce(strict=rp.external.required)
    if report.not_checked:
        say(
            f"WARNING: {len(report.not_checked)} admission check(s) NOT CHECKED here "
            f"(profile {rp.profile} carries on): {', '.join(sorted({o.name for o in report.not_checked}))}"
        )
    return AdmittedRequest(request, tasks, sizes, report)


@dataclass(frozen=True)
class Published:
    """The dataset folder of a release: how many files, and where the Hub holds them."""

    files: int
    task_files: provenance.DatasetPublication  # what provenance.json records
    records_revision: str | None  # the Hub commit that added the records (None: not published)


def _dataset_task_files(
    cfg: _config.ReleaseConfig,
    rp: plan.ReleasePlan,
    prov: provenance.Provenance,
    sub: submission.Request,
    folder: Path,
    *,
    repo: Path,
    hf_token: str | None,
) -> provenance.DatasetPublication:
    """The folder's task files (card, tasks.jsonl, openenv.yaml, vendor/: provenance's vendored files, in
    the checkout's vendor/) into `folder`; published and read back when the profile publishes the dataset."""
    generated = card.generate(cfg, prov, sub, project_license=sbom.project_license(repo), target=rp.dataset)
    paths = dataset.write_content(
        folder, generated, {**dataset.manifest_file(repo), **dataset.vendor_files(prov.sources, repo / "vendor")}
    )
    if not rp.dataset.publish:
        say(
            f"    dataset: {dataset.FOLDER}/ written ({len(paths)} task files); NOT PUBLISHED: the {rp.profile} "
            f"profile does not upload it to {rp.dataset.repository}"
        )
        return rp.dataset.not_published()
    say(f"    dataset: publishing {len(paths)} task files to {rp.dataset.url}")
    return hub.publish_files(rp.dataset, folder, paths, token=hf_token or rp.dataset.token())


def _write_records(cfg: _config.ReleaseConfig, rp: plan.ReleasePlan, run: Run, made: Made) -> Published:
    """Every record into the staging directory: the dataset's task files (published first, since
    provenance records where), provenance and statements, submission.json, the links and layout,
    the README, the records copied into the dataset folder, and last the release statement that
    binds them all; then the folder's records published (when the profile publishes)."""
    staging, signer, links, att_dir = run.staging, run.signer, run.links, run.att_dir
    folder = staging / dataset.FOLDER
    record, admitted = made.built, made.admitted
    subject = attest.Subject(rp.target.image_name, record.manifest_digest)
    prov = replace(
        provenance.assemble(
            run.repo,
            rp.profile,
            base=made.base,
            sources=made.vendored.files,
            external=made.vendored.externals,
            inputs=made.checkout.inputs,
            allow_dirty=run.allow_dirty,
        ),
        image=provenance.Image.of_build(rp.target.image_name, record),
        tasks=admitted.tasks,
        sizes=admitted.sizes,
        budgets=provenance.budgets_record(cfg.budgets),
        runtimes=tuple(checks_runtimes.provenance_runtimes(made.suite)),
    )
    task_files = _dataset_task_files(
        cfg, rp, prov, admitted.request, folder, repo=run.repo, hf_token=made.checkout.hf_token
    )
    prov = replace(prov, dataset=task_files)
    with links.step("attest"):
        provenance.write(staging / "provenance.json", prov)
        files = attest.write_attestations(
            cfg,
            attest.Evidence(
                subject,
                prov,
                lock_text=made.sbom.lock_text,
                sbom_bytes=made.sbom.document,
                checks=made.suite,
                checks_bytes=(att_dir / attest.CHECKS_FILE).read_bytes(),
            ),
            attest.Invocation(rp.parameters, started=run.started_at, finished=datetime.now(UTC)),
            signer=signer,
            out_dir=att_dir,
        )
    with links.step("submission"):
        submission.write_submission(staging / "submission.json", admitted.request)
    released_on = datetime.now(UTC)
    links.write(
        att_dir,
        signer.functionary(),
        sign=signer.sign_envelope,
        released_on=released_on,
        days=intoto_links.valid_days(cfg),
    )
    attest.write_readme(att_dir, subject, signer, files, source_url=cfg.source_url)
    # The statement binds the folder's copies of the records too: copied before it is signed,
    # then once more to add the statement itself.
    dataset.add_records(folder, staging)
    release_statement.write(
        staging, signer, subject, source_url=cfg.source_url, profile=rp.profile, released_on=released_on, dataset=folder
    )
    everything = dataset.add_records(folder, staging)
    records_revision = None
    if rp.dataset.publish:
        records_revision = hub.publish_records(
            rp.dataset,
            folder,
            dataset.record_files(everything),
            everything,
            token=made.checkout.hf_token or rp.dataset.token(),
            task_files=task_files,
        )
    return Published(len(everything), task_files, records_revision)


def release(
    cfg: _config.ReleaseConfig,
    rp: plan.ReleasePlan,
    *,
    repo: Path,
    allow_dirty: bool = False,
    mirror: Path | None = None,
    parallel: int = 2,
    command: Sequence[str] | None = None,
) -> Outcome:
    """Run every stage of the resolved profile `rp` (`plan.resolve`) from the checkout at
    `repo`; see the module doc.

    `command` is what the in-toto links record as the command that ran (default: the
    `python -m pipeline release` command line for the profile).
    """
    repo = Path(repo).resolve()
    dist, vendor_dir = repo / "dist", repo / "vendor"
    # Before anything else: complete an install a kill interrupted; clear dead runs' staging.
    records_install.recover(repo)
    _clear_leftovers(repo)
    timings = Timings(root=repo)
    started_at = datetime.now(UTC)
    started_registry = installed = False
    target = rp.target
    signer = rp.signer()
    image_name = target.image_name
    # Before any work: who signs, and whether the audit will trust them (sigstore: the token is needed now).
    unpinned = rp.unpinned_warning(signer)
    if unpinned:
        say(unpinned)
    staging = records_install.new_staging(repo)
    run = Run(
        repo,
        staging,
        signer,
        intoto_links.StageRecorder(
            repo, staging, command or ("python", "-m", "pipeline", "release", "--profile", rp.profile), signer.suffix
        ),
        started_at=started_at,
        allow_dirty=allow_dirty,
    )
    att_dir, links = run.att_dir, run.links
    try:
        att_dir.mkdir(parents=True)
        with timings.stage("checkout"):
            revision = provenance.project_revision(repo, allow_dirty=allow_dirty)
            inputs = image_inputs.image_inputs(repo, rp.profile)
            sde = provenance.source_date_epoch(inputs)
            say(
                f"    source {revision.commit} (dirty: {revision.dirty}); image inputs last "
                f"changed in {inputs.commit[:12]}, SOURCE_DATE_EPOCH {sde}"
            )
            if rp.base.local and not allow_dirty:
                _check_base_lock(cfg)
            # A profile that publishes the dataset needs its credentials before any work.
            checkout = Checkout(revision, inputs, sde, rp.dataset.token() if rp.dataset.publish else None)
        if target.local:
            with timings.stage("registry"):
                orphan = localregistry.stop_orphaned()
                if orphan:
                    say(f"    {orphan}")
                started_registry = localregistry.status() is None
                state = localregistry.start(owner=runs.current())
                say(f"    local registry at {state.address}")
                # Its storage is ours: a blob that does not hash to its digest is removed (and
                # pushed again below), not served to the base, the build and the check suite.
                corrupt = localregistry.corrupt_blobs(state.root, storage=state.storage)
                if corrupt:
                    say(
                        f"    removed {len(corrupt)} corrupt blob(s) from the local registry's storage "
                        f"({', '.join(d[:19] for d in corrupt)}); pushed again from the layouts"
                    )
        client = target.client()
        with timings.stage("base"):
            if rp.base.local:
                ensured = basestage.ensure(client)
                say(f"    base {ensured.what}: {ensured.record.pull_reference(client.registry)}")
            base_src = rp.base.source(registry=client.registry)
            base_pin = (
                provenance.local_base(repo, base_src.name, base_src.digest)
                if rp.base.local
                else provenance.Base(base_src.name, base_src.digest)
            )
        with timings.stage("vendor"), links.step("vendor"):
            vendored = Vendored(
                sources.vendor(rp.sources, vendor_dir, mirror=mirror),
                external.fetch_records(cfg, rp.external, vendor_dir, mirror=mirror),
                rp.task_file(vendor_dir),
            )
        with timings.stage("build"), links.step("build"):
            record = build.build(
                cfg,
                repo=repo,
                base=base_src,
                repository=image_name,
                tag=target.tag,
                source_revision=inputs.commit,
                source_date_epoch=sde,
                vendored=vendored.task_file,
                out=dist,
            )
            build.write_record(record, dist / "build.json")
        image = f"{image_name}@{record.manifest_digest}"
        with timings.stage("sbom"), links.step("sbom"):
            lock_text = (repo / provenance.WHEEL_LOCK).read_text()
            sbom_bytes = sbom.generate(
                Path(record.layout),
                name=image_name,
                app_dir=cfg.app_dir,
                ref=record.tag,
                sources=rp.sources,
                first_party_license=sbom.project_license(),
                lock_text=lock_text,
            )
            write_atomic(att_dir / attest.SBOM_FILE, sbom_bytes)
            components = json.loads(sbom_bytes).get("components", [])
            sbom_made = Sbom(sbom_bytes, lock_text, sbom_licenses.coverage_line(components))
            say(f"    sbom: {sbom_made.coverage}")
            missing = sbom_licenses.unlicensed_line(components)
            if missing:
                say(f"    sbom: {missing}")
        with timings.stage("push"):
            pushed = push_layout(
                client,
                target.repository,
                Path(record.layout),
                ref_name=record.tag,
                tag=target.tag,
                mount_from=plan.same_registry_repos(client, base_src),
            )
        with timings.stage("verify (anonymous pull + check suite)"), links.step("verify"):
            # External images are pulled, started and repair-checked wherever reachable.
            references = references_of(reference_scripts(cfg, rp.sources, vendor_dir))
            # Under every engine release.toml names (not RELEASE_RUNTIME_VERIFY's): the audit
            # holds the records to the file.
            suite = verify_image(
                pushed.reference,
                cfg=cfg,
                parallel=parallel,
                start_external=True,
                references=references,
                engines=cfg.runtime.verify,
            )
            checks_results.write(dist / "checks.json", suite)
            say(checks_report.summary(suite))
            if not suite.ok:
                raise CheckFailure(
                    f"{suite.counts()['failed']} check(s) failed against {pushed.reference}",
                    expected="every check passes",
                    actual=", ".join(c.id for c in suite.failures[:10]),
                    hint=f"observed vs expected for each is in {dist / 'checks.json'}",
                )
            checks_external.enforce([checks_external.ExternalResult.from_json(e) for e in suite.external], rp.external)
            # Every engine of [runtime] verify ran the whole suite, its mode read from /metadata,
            # nothing loosened: what the audit holds checks.json to (checks/runtimes).
            checks_runtimes.check(suite, cfg.runtime.verify, where=str(dist / "checks.json"))
            # The committed copy of the results the checks statement is about.
            write_atomic(att_dir / attest.CHECKS_FILE, (dist / "checks.json").read_bytes())
        with timings.stage("admission preflight"):
            admitted = admitted_request(
                cfg, rp, suite, image=image, source_revision=revision.commit, registry=client.registry
            )
        made = Made(checkout, base_pin, vendored, record, sbom_made, pushed.reference, suite, admitted)
        with timings.stage("records"):
            published = _write_records(cfg, rp, run, made)
        with timings.stage("attach"):
            attached = bundles.attach(client, target.repository, record.manifest_digest, att_dir, suffix=signer.suffix)
        with timings.stage("self-audit (verification summary)"):
            # The staged set, beside the checkout's other files: nothing is in place yet.
            view = records_install.audit_view(repo, staging)
            checked = selfcheck.run(
                view, signer=signer, pinned=unpinned is None, profile=rp.profile, image=image, out_dir=dist
            )
            say(
                f"    audit of the records PASSED against {checked.trust_root}; summary {checked.path} "
                "(the releaser's self-check)"
            )
            attached.append(selfcheck.attach(client, target.repository, record.manifest_digest, checked))
        with timings.stage("install (the records, in one journaled step)"):
            placed = [p for p in records_install.commit(repo, staging) if p.name in RECORDS]
            installed = True
        report = dist / "report.md"
        changed, changes = release_diff.against_committed(repo)
        say(f"    changes since the committed records: {changed}")
        _report(report, cfg, rp, made, Finished(published, tuple(attached), checked, tuple(changes)), timings)
        if unpinned:
            say(unpinned)
        return Outcome(image, pushed.reference, tuple(placed), report, tuple(timings.stages), repo / dataset.FOLDER)
    except ReleaseError:
        # Said here, where it is known: past the install (attach, self-audit) the records are
        # this release's, not the previous ones.
        if installed:
            say(
                f"release stopped after it wrote its records ({', '.join(RECORDS)}); they are "
                "in place but not released: fix the cause, then release again"
            )
        else:
            say(f"release stopped; the previous records are untouched ({', '.join(RECORDS)})")
        raise
    finally:
        if not records_install.journaled(repo, staging):
            shutil.rmtree(staging, ignore_errors=True)
        if started_registry:
            localregistry.stop()
            say("    stopped the local registry this release started")
