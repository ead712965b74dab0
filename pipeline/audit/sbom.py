"""Audit checks of the SBOM: its schema and licences, its signed statement, and its layers and
components against the image's own layers (from dist/oci, or pulled with --registry); the
independent licence and coverage checks are pipeline.audit.sbom_checks'."""

from __future__ import annotations

import functools
import json
import tempfile
from pathlib import Path

from pipeline._io import canonical_json, sha256_bytes
from pipeline.audit import sbom_checks
from pipeline.audit.rows import Rows, State, equal
from pipeline.errors import VerificationError
from pipeline.image.oci.files import FileView, LayoutImage, open_image_by_digest, read_view
from pipeline.records import attest, sbom_licenses
from pipeline.records import sbom as sbom_mod


def audit_sbom(r: Rows, s: State, registry: bool) -> None:
    path = s.att_dir / attest.SBOM_FILE
    rec = f"attestations/{attest.SBOM_FILE}"

    def valid() -> dict:
        data = path.read_bytes()
        sbom_mod.validate(data)
        return json.loads(data)

    doc = r.run("sbom/schema", rec, valid)
    if doc is None:
        return
    r.run("sbom/licenses", rec, lambda: sbom_checks.check_licences(doc))
    r.run("sbom/license-coverage", rec, lambda: sbom_licenses.coverage_line(doc.get("components") or []), info=True)
    stmt = (s.statements or {}).get("sbom")
    if stmt is None:
        r.not_checked("sbom/attested", rec, "the SBOM statement did not verify")
    else:
        r.run(
            "sbom/attested",
            rec,
            lambda: equal(
                f"{rec} vs the SBOM in the signed SBOM statement (canonical JSON sha256)",
                sha256_bytes(canonical_json(stmt.get("predicate"))),
                sha256_bytes(canonical_json(doc)),
                hint="the SBOM file was replaced or edited after signing",
            ),
        )
    image = s.image
    if image is None:
        return
    r.run(
        "sbom/image",
        rec,
        lambda: equal(
            "metadata.component.version and serialNumber of the SBOM",
            (image.digest, f"urn:uuid:{sbom_mod.serial_number(image.digest)}"),
            (doc.get("metadata", {}).get("component", {}).get("version"), doc.get("serialNumber")),
        ),
    )
    if s.prov is not None and s.prov.image is not None:
        r.run("sbom/layers", rec, lambda: _layers_match(doc, s.prov.image))
    _sbom_components(r, s, image, doc, rec, registry)


def _sbom_layers(doc: dict) -> list[str]:
    props = doc.get("metadata", {}).get("component", {}).get("properties", [])
    layers = sorted(
        (int(p["value"].split(":", 1)[0]), p["value"].split(":", 1)[1]) for p in props if p.get("name") == "arena:layer"
    )
    return [d for _, d in layers]


def _layers_match(doc: dict, image) -> None:
    layers = _sbom_layers(doc)
    equal("number of image layers the SBOM lists vs provenance.json", image.layer_count, len(layers))
    app = [l.digest for l in image.app_layers]
    equal("application layers the SBOM lists vs provenance.json", app, layers[len(layers) - len(app) :])


def _sbom_components(r: Rows, s: State, image: attest.Subject, doc: dict, rec: str, registry: bool) -> None:
    layout = s.root / "dist" / "oci"
    if s.cfg is None or s.prov is None or s.plan is None:
        for cid in ("sbom/components", "sbom/coverage"):
            r.not_checked(cid, rec, "release.toml, provenance.json or the release statement did not load")
        return
    has_image = (layout / "blobs" / "sha256" / image.digest.split(":", 1)[1]).is_file()
    if not has_image and not registry:
        for cid in ("sbom/components", "sbom/coverage"):
            r.not_checked(
                cid,
                rec,
                f"the image's layers are not here (no dist/oci holding {image.digest}, and no "
                "--registry to pull them); to rebuild the recorded image into dist/oci, run "
                "`nox -s reproduce` first",
            )
        return

    app_dir = s.cfg.app_dir
    rel_app, coverage_paths = app_dir.strip("/"), sbom_checks.coverage_paths(app_dir)

    def sbom_paths(path: str) -> bool:
        return sbom_mod.wanted(path, rel_app)

    @functools.cache
    def layers(layout: Path) -> tuple[LayoutImage, FileView]:
        # Read (decompressed and parsed) once for both rows; each narrows the files to
        # the ones it reads, as its own reading would have kept them.
        opened = open_image_by_digest(layout, image.digest)
        return opened, read_view(opened, lambda path: sbom_paths(path) or coverage_paths(path))

    def covered(layout: Path) -> None:
        opened, files = layers(layout)
        sbom_checks.check_coverage(doc, opened, app_dir, read=files)

    def regenerate(layout: Path) -> None:
        opened, files = layers(layout)
        view = files.only(sbom_paths)
        lock = s.root / s.prov.wheel_lock.path
        # The licences a person read from free-form files: the audited checkout's own table.
        table = s.root / "pipeline" / "records" / sbom_licenses.REVIEWED.name
        bom = sbom_mod.build_bom(
            opened,
            view,
            name=image.name,
            app_dir=s.cfg.app_dir,
            epoch=s.prov.source_date_epoch,
            sources=s.plan.sources,
            first_party_license=sbom_mod.project_license(s.root),
            lock_text=lock.read_text() if lock.is_file() else "",
            reviewed=sbom_licenses.reviewed_table(table, s.root) if table.is_file() else None,
        )
        regenerated = json.loads(sbom_mod.render(bom))
        _component_difference(regenerated, doc)

    if has_image:
        r.run("sbom/components", rec, lambda: regenerate(layout))
        r.run("sbom/coverage", rec, lambda: covered(layout))
        return
    with tempfile.TemporaryDirectory(prefix="audit-pull-") as tmp:
        pulled_to = Path(tmp) / "oci"

        def pulled() -> None:
            from pipeline.registry import pull

            if s.registry is None:
                raise VerificationError("no registry to pull the image from", hint="see registry/reference")
            pull.pull(f"{s.registry.name}@{image.digest}", pulled_to)
            regenerate(pulled_to)

        r.run("sbom/components", rec, pulled)
        if pulled_to.is_dir():
            r.run("sbom/coverage", rec, lambda: covered(pulled_to))
        else:
            r.not_checked(
                "sbom/coverage", rec, f"the image could not be pulled from {image.name} (sbom/components says why)"
            )


def _component_difference(expected: dict, actual: dict) -> None:
    """Name the first component that the image's layers and the SBOM file disagree on."""

    def by_ref(doc: dict) -> dict[str, str]:
        return {c.get("bom-ref"): json.dumps(c, sort_keys=True) for c in doc.get("components", [])}

    refs = [c.get("bom-ref") for c in actual.get("components", [])]
    repeated = sorted({str(ref) for ref in refs if refs.count(ref) > 1})
    if repeated:
        raise VerificationError(
            "the SBOM lists a component more than once", expected="each bom-ref once", actual=", ".join(repeated[:3])
        )
    e, a = by_ref(expected), by_ref(actual)
    missing, extra = sorted(set(e) - set(a)), sorted(set(a) - set(e))
    changed = sorted(k for k in set(e) & set(a) if e[k] != a[k])
    if missing or extra or changed:
        raise VerificationError(
            "SBOM components differ from the image's layers",
            expected="the components read from the layer blobs",
            actual="; ".join(
                x
                for x in (
                    f"missing {', '.join(missing[:3])}" if missing else "",
                    f"not in the image {', '.join(extra[:3])}" if extra else "",
                    f"changed {', '.join(changed[:3])}" if changed else "",
                )
                if x
            ),
        )
    equal(
        "SBOM regenerated from the image's layers (canonical JSON sha256)",
        sha256_bytes(canonical_json(expected)),
        sha256_bytes(canonical_json(actual)),
    )
