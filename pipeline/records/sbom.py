"""CycloneDX 1.6 SBOM of a built image, read from the image's own layers.

Nothing here looks at the build host: the layers of the image in an OCI layout are
applied in order (whiteouts included, pipeline.image.oci.files) to an in-memory view
that keeps only the files an SBOM needs (`wanted`): the dpkg status database, os-release, the packages' copyright
files under /usr/share/doc (and the links between those directories), every
dist-info's METADATA, RECORD and licence files, and every file under the app directory. Licences
are read from those files (pipeline.records.sbom_licenses). The document is a
pure function of the image (plus the wheel lock for wheel hashes), so two runs give
the same bytes: the serial number is derived from the manifest digest, the
timestamp is SOURCE_DATE_EPOCH, components are sorted by the library.
"""

from __future__ import annotations

import email.parser
import json
import os
import posixpath
import re
import uuid
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from packaging.utils import canonicalize_name

from pipeline import __version__
from pipeline._io import sha256_bytes
from pipeline.config import REPO_ROOT, Source
from pipeline.errors import ConfigError, ReleaseError
from pipeline.formats import dpkg_installed
from pipeline.image.oci import digest as oci_digest
from pipeline.image.oci.files import FileView, LayoutImage, open_image, read_view
from pipeline.progress import say
from pipeline.records import sbom_licenses
from pipeline.sources.lock import LOCK, allowed_hashes

SPEC_VERSION = "1.6"
DEFAULT_OUT = REPO_ROOT / "attestations" / "sbom.cdx.json"
DEFAULT_LAYOUT = REPO_ROOT / "dist" / "oci"
DEFAULT_LOCK = LOCK
# Namespace of the SBOM serial numbers: uuid5(this, "sha256:<manifest digest>").
SERIAL_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/akseljoonas/openenv-arena-release/sbom")

# A dist-info's METADATA and RECORD, and the licence files its metadata may name (License-File:
# under licenses/ since metadata 2.4, at its top or in a folder of it before).
_DIST_INFO = re.compile(
    r"(?:^|/)(?:site|dist)-packages/[^/]+\.dist-info/(?:METADATA|RECORD|(?:licenses|LICENSES)/.+"
    r"|[^/]*(?:LICEN[CS]E|COPYING|NOTICE)[^/]*)$"
)
# A package's copyright file, and its doc directory when that is a link to another
# package's (Debian allows it between packages of one source).
_DOC = re.compile(r"usr/share/doc/[^/]+(?:/copyright)?")
_STATUS_FILES = ("var/lib/dpkg/status",)
_OS_RELEASE = ("etc/os-release", "usr/lib/os-release")


# ------------------------------------------------------------------ which files it reads


def wanted(path: str, app_dir: str) -> bool:
    """Whether the SBOM needs this image path (relative, no leading slash)."""
    return (
        path in _STATUS_FILES
        or path in _OS_RELEASE
        or path.startswith(app_dir + "/")
        or bool(_DIST_INFO.search(path))
        or _DOC.fullmatch(path) is not None
    )


def read_sbom_view(image: LayoutImage, app_dir: str) -> FileView:
    """The files of the image an SBOM needs (`wanted`), after applying every layer."""
    rel_app = app_dir.strip("/")
    return read_view(image, lambda path: wanted(path, rel_app))


# ------------------------------------------------------------------ what the files say


@dataclass(frozen=True)
class DebPackage:
    name: str
    version: str
    arch: str
    source: str


@dataclass(frozen=True)
class PyDist:
    name: str
    version: str
    location: str  # the dist-info directory, absolute in the image
    record_sha256: str
    license: str | None


@dataclass(frozen=True)
class AppFile:
    path: str  # absolute in the image
    sha256: str
    size: int


def parse_dpkg_status(text: str) -> list[DebPackage]:
    """Installed packages of a dpkg status file (half-installed or removed ones are skipped)."""
    return [
        DebPackage(
            name=p["Package"],
            version=p.get("Version", ""),
            arch=p.get("Architecture", "all"),
            source=p.get("Source", p["Package"]).split(" ")[0],
        )
        for p in dpkg_installed(text)
    ]


def distro_of(os_release: bytes | None) -> str:
    """`debian-12` from os-release (ID + VERSION_ID); `debian` when unknown."""
    values = {}
    for line in (os_release or b"").decode(errors="replace").splitlines():
        k, sep, v = line.partition("=")
        if sep:
            values[k.strip()] = v.strip().strip('"')
    dist = values.get("ID", "debian")
    return f"{dist}-{values['VERSION_ID']}" if values.get("VERSION_ID") else dist


def python_dists(
    view: FileView, reviewed: sbom_licenses.ReviewedTable | None = None, changed: Callable[[str], None] | None = None
) -> list[PyDist]:
    """Every dist-info with METADATA in the view. A distribution whose metadata names no
    licence gets the one `reviewed` gives its licence file (License-File), if any."""
    dists = []
    for path, data in view.files.items():
        if not path.endswith(".dist-info/METADATA"):
            continue
        meta = email.parser.BytesHeaderParser().parsebytes(data)
        location = posixpath.dirname(path)
        record = view.files.get(location + "/RECORD", b"")
        name = meta.get("Name", "").strip()
        lic = sbom_licenses.python_license(meta)
        if lic is None and reviewed is not None:
            for rel in sbom_licenses.license_files(meta):
                text = view.files.get(f"{location}/{rel}")
                if text is not None:
                    lic = reviewed.licence(
                        "pypi", canonicalize_name(name), text, where=f"/{location}/{rel}", changed=changed
                    )
                if lic is not None:
                    break
        dists.append(
            PyDist(
                name=name,
                version=meta.get("Version", "").strip(),
                location="/" + location,
                record_sha256=sha256_bytes(record),
                license=lic,
            )
        )
    return dists


def app_files(view: FileView, app_dir: str) -> list[AppFile]:
    prefix = app_dir.strip("/") + "/"
    return [
        AppFile(path="/" + p, sha256=sha256_bytes(d), size=len(d))
        for p, d in view.files.items()
        if p.startswith(prefix)
    ]


# ------------------------------------------------------------------ the document


@dataclass(frozen=True)
class ImageIdentity:
    """Name (registry/repository) and manifest digest of the image described."""

    name: str
    digest: str

    @property
    def purl(self) -> str:
        from packageurl import PackageURL

        last = self.name.rsplit("/", 1)[-1].lower()
        quals = {"repository_url": self.name} if "/" in self.name else None
        return PackageURL(type="oci", name=last, version=self.digest, qualifiers=quals).to_string()


def serial_number(image_digest: str) -> uuid.UUID:
    """The SBOM serial number: a name-based UUID of the manifest digest."""
    return uuid.uuid5(SERIAL_NAMESPACE, oci_digest.parse(image_digest, what="image digest"))


def source_date_epoch(config: dict) -> int:
    """$SOURCE_DATE_EPOCH, else the image config's `created` (itself set from it)."""
    env = os.environ.get("SOURCE_DATE_EPOCH")
    if env:
        if not env.isdigit():
            raise ConfigError("SOURCE_DATE_EPOCH is not a number of seconds", actual=env)
        return int(env)
    created = config.get("created")
    if not created:
        raise ConfigError(
            "no SOURCE_DATE_EPOCH and no `created` in the image config",
            hint="export SOURCE_DATE_EPOCH (the source commit time)",
        )
    return int(datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp())


def _vendored_source(path: str, app_dir: str, sources: Iterable[Source]) -> Source | None:
    for s in sources:
        if path.startswith(f"{app_dir.rstrip('/')}/vendor/{s.name}/"):
            return s
    return None


def _licence_file_licence(
    path: str, app_dir: str, sources: Iterable[Source], first_party_license: str | None
) -> str | None:
    """The licence of a file of the image's licences directory: `LICENSE` is the project's
    own licence file (pipeline.image.payload), `<source>.<file>` a vendored source's."""
    rest = path[len(app_dir.rstrip("/") + "/licenses/") :]
    if rest == "LICENSE":
        return first_party_license
    for s in sources:
        if rest.startswith(s.name + "."):
            return s.license
    return None


def build_bom(
    image: LayoutImage,
    view: FileView,
    *,
    name: str,
    app_dir: str,
    epoch: int,
    sources: Iterable[Source] = (),
    first_party_license: str | None = None,
    lock_text: str = "",
    reviewed: sbom_licenses.ReviewedTable | None = None,
):
    """The cyclonedx Bom object for an image whose wanted files are in `view`. Licences of
    free-form copyright files come from `reviewed` (default: the repository's reviewed table);
    a package whose file is not the one reviewed gets none, and is named on stderr."""
    from cyclonedx.model import HashAlgorithm, HashType, Property
    from cyclonedx.model.bom import Bom, BomMetaData
    from cyclonedx.model.bom_ref import BomRef
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.model.tool import ToolRepository
    from packageurl import PackageURL

    def sha256(hexdigest: str) -> list:
        return [HashType(alg=HashAlgorithm.SHA_256, content=hexdigest)]

    def licences(expr: str | None) -> list:
        return sbom_licenses.cyclonedx_licenses([expr])

    sources = tuple(sources)
    reviewed = reviewed if reviewed is not None else sbom_licenses.reviewed_table()
    changed: list[str] = []
    ident = ImageIdentity(name=name, digest=image.digest)
    img = Component(
        type=ComponentType.CONTAINER,
        name=name,
        version=image.digest,
        bom_ref=BomRef(ident.purl),
        purl=PackageURL.from_string(ident.purl),
        hashes=sha256(oci_digest.hex_of(image.digest)),
        properties=[Property(name="arena:layer", value=f"{i}:{d}") for i, (d, _) in enumerate(image.layers)],
    )
    tools = ToolRepository(
        components=[
            Component(
                type=ComponentType.APPLICATION,
                name="openenv-arena-release pipeline.sbom",
                version=__version__,
                bom_ref=BomRef("tool:pipeline.sbom"),
            )
        ]
    )
    bom = Bom(
        serial_number=serial_number(image.digest),
        metadata=BomMetaData(component=img, timestamp=datetime.fromtimestamp(epoch, UTC), tools=tools),
    )

    status = view.read(_STATUS_FILES[0])
    distro = distro_of(view.read(_OS_RELEASE[0]) or view.read(_OS_RELEASE[1]))
    components = []
    for p in parse_dpkg_status(status.decode(errors="replace")) if status else []:
        purl = PackageURL(
            type="deb",
            namespace="debian",
            name=p.name,
            version=p.version,
            qualifiers={"arch": p.arch, "distro": distro},
        )
        props = [Property(name="arena:location", value="/var/lib/dpkg/status")]
        if p.source != p.name:
            props.append(Property(name="arena:deb-source", value=p.source))
        copyright_path = view.resolve(sbom_licenses.COPYRIGHT.format(package=p.name))
        found = sbom_licenses.debian_licenses(view.files[copyright_path]) if copyright_path else ()
        if copyright_path:  # read for its licences when machine-readable; named either way
            props.append(Property(name="arena:copyright-file", value="/" + copyright_path))
        if copyright_path and not found:  # free-form: only a reading of this very file counts
            read = reviewed.licence(
                "deb", p.name, view.files[copyright_path], where="/" + copyright_path, changed=changed.append
            )
            if read is not None:
                found = (read,)
                props.append(Property(name="arena:license-reviewed", value=reviewed.source))
        components.append(
            Component(
                type=ComponentType.LIBRARY,
                name=p.name,
                version=p.version,
                purl=purl,
                bom_ref=BomRef(purl.to_string()),
                properties=props,
                licenses=sbom_licenses.cyclonedx_licenses(found),
            )
        )
    locked = allowed_hashes(lock_text)
    dists = python_dists(view, reviewed, changed.append)
    counts: dict[str, int] = {}
    for d in dists:
        counts[canonicalize_name(d.name) + d.version] = counts.get(canonicalize_name(d.name) + d.version, 0) + 1
    for d in dists:
        purl = PackageURL(type="pypi", name=canonicalize_name(d.name), version=d.version)
        ref = purl.to_string()
        if counts[canonicalize_name(d.name) + d.version] > 1:
            ref += "#" + d.location  # the same distribution installed in two prefixes
        wheels = locked.get((canonicalize_name(d.name), d.version), ())
        # The component's hash is the wheel's, as the lock pins it: what a consumer
        # matches against PyPI. Installed files have no single hash; the sha256 of the
        # dist-info RECORD (which lists each installed file's hash) is kept under its own
        # name. A lock allowing several wheels gives no single component hash: each is a
        # property then.
        props = [
            Property(name="arena:location", value=d.location),
            Property(name="arena:dist-info-RECORD-sha256", value=d.record_sha256),
        ]
        props += [Property(name="arena:wheel-sha256", value=h) for h in wheels]
        components.append(
            Component(
                type=ComponentType.LIBRARY,
                name=d.name,
                version=d.version,
                purl=purl,
                bom_ref=BomRef(ref),
                hashes=sha256(wheels[0]) if len(wheels) == 1 else [],
                licenses=licences(d.license),
                properties=props,
            )
        )
    for f in app_files(view, app_dir):
        src = _vendored_source(f.path, app_dir, sources)
        props = [Property(name="arena:size", value=str(f.size))]
        lic: str | None
        if src is not None:
            props += [
                Property(name="arena:source", value=src.name),
                Property(name="arena:source-repository", value=src.repository),
                Property(name="arena:source-revision", value=src.revision),
                Property(name="arena:source-path", value=src.path),
            ]
            lic = src.license
        elif f.path.startswith(app_dir.rstrip("/") + "/licenses/"):
            lic = _licence_file_licence(f.path, app_dir, sources, first_party_license)
        else:
            lic = first_party_license
        components.append(
            Component(
                type=ComponentType.FILE,
                name=f.path,
                bom_ref=BomRef("file:" + f.path),
                hashes=sha256(f.sha256),
                licenses=licences(lic),
                properties=props,
            )
        )
    for line in changed:
        say(f"sbom: {line}")
    for c in components:
        bom.components.add(c)
    bom.register_dependency(img, components)
    return bom


def _strict_validator():
    """CycloneDX 1.6's strict JSON validator (jsonschema with its format checks; the IRI
    grammar is built only if a value of that format is checked: pipeline.records._iri)."""
    from pipeline.records._iri import defer_iri_grammar

    defer_iri_grammar()
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    return JsonStrictValidator(SchemaVersion.V1_6)


def render(bom) -> bytes:
    """Serialize as CycloneDX 1.6 JSON and validate with the strict schema validator."""
    from cyclonedx.output.json import JsonV1Dot6

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the library warns about incomplete graphs of leaf components
        text = JsonV1Dot6(bom).output_as_string(indent=2)
    error = _strict_validator().validate_str(text)
    if error is not None:
        raise ReleaseError(
            "the generated SBOM does not validate against CycloneDX 1.6 (strict)", actual=str(error).splitlines()[0]
        )
    # Re-serialize with sorted keys so the bytes do not depend on the library's field order.
    return (json.dumps(json.loads(text), indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def validate(data: bytes) -> None:
    """Raise unless `data` is a CycloneDX 1.6 JSON document (strict schema)."""
    error = _strict_validator().validate_str(data.decode())
    if error is not None:
        raise ReleaseError("SBOM does not validate against CycloneDX 1.6 (strict)", actual=str(error).splitlines()[0])


def generate(
    layout: Path,
    *,
    name: str,
    app_dir: str,
    ref: str | None = None,
    sources: Iterable[Source] = (),
    first_party_license: str | None = None,
    lock_text: str = "",
    reviewed: sbom_licenses.ReviewedTable | None = None,
) -> bytes:
    """SBOM bytes of the image in an OCI layout (validated, deterministic)."""
    image = open_image(layout, ref)
    view = read_sbom_view(image, app_dir)
    bom = build_bom(
        image,
        view,
        name=name,
        app_dir=app_dir,
        epoch=source_date_epoch(image.config),
        sources=sources,
        first_party_license=first_party_license,
        lock_text=lock_text,
        reviewed=reviewed,
    )
    return render(bom)


def project_license(root: Path = REPO_ROOT) -> str | None:
    """The first-party code's licence (pyproject's `project.license` in `root`)."""
    import tomllib

    try:
        data = tomllib.loads((Path(root) / "pyproject.toml").read_text())
    except FileNotFoundError:
        return None
    lic = data.get("project", {}).get("license")
    return lic if isinstance(lic, str) else None
