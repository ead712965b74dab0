"""The release statement: one signed in-toto Statement binding every committed record.

Its subjects are the image (name and manifest digest) and the sha256 of every record
file: provenance.json, submission.json and each file under attestations/ (the SBOM,
checks.json, the signed statements, the in-toto layout and links, the README), except
the statement itself and the publishing aids that are never trusted (the public key,
its keyid, the sigstore identity); then every file of the dataset folder (the card,
tasks.jsonl, openenv.yaml, vendor/ and its copies of the records, by the same rule), named
`dist/dataset/<path>`. dist/ is not committed: those subjects are checked by the audit's
dataset checks (the folder when it is there, else regenerated from the records), not
here. Its predicate says which profile was released,
when, and how it was signed. Signed by the release signer in both modes
(`attestations/release.dsse.json` or `release.sigstore.json`), so no record can be
edited, swapped or removed without the audit noticing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from pipeline._io import canonical_json, is_tree_path, sha256_file, write_atomic
from pipeline.errors import VerificationError
from pipeline.formats import parse_utc_time, utc_time
from pipeline.records import signing
from pipeline.records.attest import STATEMENT_TYPE, Subject
from pipeline.records.dataset import FOLDER as DATASET_FOLDER
from pipeline.records.dataset import MANIFEST_SOURCE as DATASET_MANIFEST_SOURCE

NAME = "release"
RECORD_FILES = ("provenance.json", "submission.json")
# Publishing aids for other tools; the audit never trusts them, so they are not bound.
UNBOUND = (signing.PUBLIC_KEY_FILE, signing.KEYID_FILE, signing.IDENTITY_FILE)
REQUIRED = (
    "provenance.json",
    "submission.json",
    "attestations/sbom.cdx.json",
    "attestations/checks.json",
    "attestations/layout.json",
)


def predicate_type(source_url: str) -> str:
    return f"{source_url.rstrip('/')}/release-statement/v1"


def path(att_dir: Path, suffix: str) -> Path:
    return Path(att_dir) / f"{NAME}{suffix}"


def is_statement_file(name: str) -> bool:
    return name in (f"{NAME}{signing.DSSE_SUFFIX}", f"{NAME}{signing.BUNDLE_SUFFIX}")


def bound_files(root: Path) -> list[str]:
    """Every record file the statement binds, relative to the records root, sorted."""
    root = Path(root)
    files = [f for f in RECORD_FILES if (root / f).is_file()]
    att = root / "attestations"
    if att.is_dir():
        for p in sorted(att.rglob("*")):
            if p.is_file() and not is_unbound(p.relative_to(root).as_posix()):
                files.append(p.relative_to(root).as_posix())
    return sorted(files)


def is_unbound(rel: str) -> bool:
    """The statement itself and the publishing aids, in attestations/ (of the records or a copy)."""
    parent, _, name = rel.rpartition("/")
    return parent == "attestations" and (name in UNBOUND or is_statement_file(name))


def dataset_name(rel: str) -> str:
    """The subject name of the dataset folder's file `rel`."""
    return f"{DATASET_FOLDER}/{rel}"


def is_dataset_subject(name: object) -> bool:
    return isinstance(name, str) and name.startswith(DATASET_FOLDER + "/")


def dataset_subjects(stmt: Mapping[str, Any]) -> dict[str, Any]:
    """The dataset folder's files the statement binds: path in the folder -> sha256."""
    return {
        s.get("name")[len(DATASET_FOLDER) + 1 :]: (s.get("digest") or {}).get("sha256")
        for s in (stmt.get("subject") or [])[1:]
        if is_dataset_subject(s.get("name"))
    }


# What the audit reads besides the statement's subjects: the policy, the inputs it re-hashes,
# the project licence the SBOM names, the OpenEnv manifest the dataset's copy is held to and the
# built image it regenerates the SBOM from.
READ_FILES = RECORD_FILES + ("release.toml", "trust.toml", "pyproject.toml", DATASET_MANIFEST_SOURCE)
READ_TREES = ("attestations", "vendor", "locks", "dist/oci", DATASET_FOLDER)


def irregular_files(root: Path) -> list[str]:
    """Links, pipes, devices and sockets among what the audit reads, each with what it is.

    A release writes regular files only; git can commit a link (to /dev/zero, or to a directory
    outside the tree that hides files from the unbound-file scan), so none is read.
    """
    root = Path(root)
    found = [root / f for f in READ_FILES] + [root / d for d in READ_TREES]
    for top in (root / d for d in READ_TREES):
        if top.is_dir() and not top.is_symlink():
            for dirpath, dirnames, filenames in os.walk(top):  # does not descend into linked directories
                found += [Path(dirpath) / n for n in dirnames + filenames]
    out = []
    for p in found:
        if p.is_symlink():
            out.append(f"{p.relative_to(root).as_posix()} -> {os.readlink(p)}")
        elif p.exists() and not (p.is_file() or p.is_dir()):
            out.append(f"{p.relative_to(root).as_posix()} (not a regular file)")
    return sorted(out)


def check_regular(root: Path) -> None:
    odd = irregular_files(root)
    if odd:
        raise VerificationError(
            "records are links or special files",
            expected="regular files in the records tree",
            actual=", ".join(odd),
            hint="a release writes no links; replace them with the released files or restore the records",
        )


def build(
    root: Path,
    image: Subject,
    *,
    source_url: str,
    profile: str,
    signing_kind: str,
    released_on: datetime,
    dataset: Path,
) -> bytes:
    """The statement's canonical bytes over the records staged under `root` and the dataset
    folder `dataset` (its copies of the records already in place)."""
    missing = [f for f in REQUIRED if not (Path(root) / f).is_file()]
    if missing:
        raise VerificationError(
            "the release statement cannot bind records that were not written",
            expected=list(REQUIRED),
            actual=f"missing: {', '.join(missing)}",
        )
    subjects = [image.to_json()] + [
        {"name": f, "digest": {"sha256": sha256_file(Path(root) / f)}} for f in bound_files(root)
    ]
    dataset_files = [p.relative_to(dataset).as_posix() for p in sorted(Path(dataset).rglob("*")) if p.is_file()]
    subjects += [
        {"name": dataset_name(f), "digest": {"sha256": sha256_file(Path(dataset) / f)}}
        for f in dataset_files
        if not is_unbound(f)
    ]
    return canonical_json(
        {
            "_type": STATEMENT_TYPE,
            "subject": subjects,
            "predicateType": predicate_type(source_url),
            "predicate": {
                "profile": profile,
                "releasedOn": utc_time(released_on),
                "signing": signing_kind,
            },
        }
    )


def write(
    root: Path, signer, image: Subject, *, source_url: str, profile: str, released_on: datetime, dataset: Path
) -> Path:
    """Sign the statement over the records staged under `root` and the dataset folder `dataset`
    into attestations/."""
    data = build(
        root,
        image,
        source_url=source_url,
        profile=profile,
        signing_kind=signer.kind,
        released_on=released_on,
        dataset=dataset,
    )
    out = path(Path(root) / "attestations", signer.suffix)
    write_atomic(out, signer.sign(data))
    return out


def parse_time(value: Any, *, what: str) -> datetime:
    """A UTC time as the statements write it (pipeline.formats.TIME_FORMAT)."""
    try:
        return parse_utc_time(value)
    except (TypeError, ValueError):
        raise VerificationError(
            f"{what} is not a valid UTC time", expected="YYYY-MM-DDTHH:MM:SSZ", actual=value
        ) from None


def released_on(stmt: Mapping[str, Any]) -> datetime:
    return parse_time((stmt.get("predicate") or {}).get("releasedOn", ""), what="the release statement's releasedOn")


def check_subjects(root: Path, stmt: Mapping[str, Any]) -> None:
    """Every bound file re-hashed; required records bound; no record file left unbound."""
    root = Path(root)
    subjects = stmt.get("subject") or []
    names = [s.get("name") for s in subjects[1:]]
    # One hash per record, each a plain path inside the tree: a repeated name lets two readers of
    # the statement see two different bindings, and "../x" or "/x" binds a file outside the records.
    repeated = sorted({str(n) for n in names if names.count(n) > 1})
    if repeated:
        raise VerificationError(
            "the release statement binds a record twice", expected="each record once", actual=", ".join(repeated)
        )
    outside = [str(n) for n in names if not is_tree_path(n)]
    if outside:
        raise VerificationError(
            "the release statement binds paths outside the records tree",
            expected="relative paths without '..'",
            actual=", ".join(outside),
        )
    # The dataset folder's subjects are the audit's dataset checks' (dist/ is not committed).
    files = {
        s.get("name"): (s.get("digest") or {}).get("sha256")
        for s in subjects[1:]
        if not is_dataset_subject(s.get("name"))
    }
    unbound_required = [f for f in REQUIRED if f not in files]
    if unbound_required:
        raise VerificationError(
            "the release statement does not bind every required record",
            expected=list(REQUIRED),
            actual=f"not bound: {', '.join(unbound_required)}",
        )
    for name, expected in sorted(files.items()):
        p = root / str(name)
        if not p.is_file():
            raise VerificationError(
                f"{name} is missing (the release statement binds it)", expected=f"sha256 {expected}", actual="absent"
            )
        actual = sha256_file(p)
        if actual != expected:
            raise VerificationError(
                f"{name} differs from the sha256 the release statement binds",
                expected=expected,
                actual=actual,
                hint="the record was edited after signing",
            )
    extra = [f for f in bound_files(root) if f not in files]
    if extra:
        raise VerificationError(
            "record files not bound by the release statement",
            expected="none",
            actual=", ".join(extra),
            hint="files added after the release are not part of it",
        )
