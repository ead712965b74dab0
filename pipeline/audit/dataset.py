"""Audit checks of the dataset folder (dist/dataset/) against the records.

dist/ is not committed, so the folder is checked from what is: the release statement binds
every file of it (`dist/dataset/<path>`), and each of those digests is re-derived from the
committed records — the card and tasks.jsonl regenerated, openenv.yaml against the checkout's
env/openenv.yaml and the image's (the SBOM's file component), vendor/ files against their
provenance pins, the copies of the records against the records' own subjects. When the
folder is there (after a release, or a downloaded copy put in place) every file of it is
re-hashed as well, and it must hold nothing else.

    dataset/subjects     the statement binds exactly the folder's files: card, tasks.jsonl,
                         openenv.yaml, the vendored files (= provenance.json's pins) and copies of the
                         records (= the records' own subjects)
    dataset/card         README.md regenerated from the records = the bound sha256
    dataset/tasks        tasks.jsonl regenerated from the records = the bound sha256
    dataset/manifest     the bound openenv.yaml = the checkout's env/openenv.yaml = the file the
                         image ships (<app_dir>/env/openenv.yaml, the SBOM's file component)
    dataset/publication  provenance.json's `dataset`: the profile's repository in release.toml; published
                         with a revision by a profile that publishes, not published otherwise
    dataset/folder       dist/dataset/ re-hashed file by file (information when it is not here)
"""

from __future__ import annotations

import json
from typing import Any

from pipeline._io import sha256_bytes, sha256_file
from pipeline.audit.rows import INFO, Check, Rows, State, equal
from pipeline.errors import VerificationError
from pipeline.formats import is_commit
from pipeline.records import attest, card, dataset
from pipeline.records import sbom as sbom_mod
from pipeline.records import statement as release_statement


def _bound_records(stmt: dict) -> dict[str, str | None]:
    return {
        s.get("name"): (s.get("digest") or {}).get("sha256")
        for s in (stmt.get("subject") or [])[1:]
        if not release_statement.is_dataset_subject(s.get("name"))
    }


def _subjects(s: State, release: dict[str, Any], bound: dict[str, str]) -> None:
    records = _bound_records(release)
    vendored = dataset.vendor_digests(s.prov.sources)
    expected = {dataset.CARD, dataset.TASKS, dataset.MANIFEST, *vendored, *records}
    missing, extra = sorted(expected - set(bound)), sorted(set(bound) - expected)
    if missing or extra:
        raise VerificationError(
            "the release statement does not bind exactly the dataset folder's files",
            expected="the card, tasks.jsonl, openenv.yaml, the vendored files and a copy of each record",
            actual="; ".join(
                x
                for x in (
                    f"not bound: {', '.join(missing[:5])}" if missing else "",
                    f"not the folder's: {', '.join(extra[:5])}" if extra else "",
                )
                if x
            ),
        )
    for rel, digest in sorted(records.items()):
        equal(f"sha256 of the dataset's copy of {rel} vs the record's", digest, bound[rel])
    for rel, digest in vendored.items():
        equal(f"sha256 of the dataset's {rel} vs provenance.json's pin", digest, bound[rel])


def _generated(s: State) -> dict[str, bytes]:
    return card.generate(s.cfg, s.prov, s.sub, project_license=sbom_mod.project_license(s.root), target=s.plan.dataset)


def _regenerated(s: State, bound: dict[str, str], rel: str) -> None:
    data = _generated(s)[rel]
    equal(
        f"sha256 of {rel} regenerated from the records vs the one the release statement binds",
        bound.get(rel),
        sha256_bytes(data),
        hint=f"the {rel} of the dataset does not say what the records show",
    )


def _shipped_manifest(s: State) -> str | None:
    """The sha256 of the image's env/openenv.yaml as the SBOM's file component gives it (None: not listed)."""
    name = f"{s.cfg.app_dir.rstrip('/')}/{dataset.MANIFEST_SOURCE}"
    doc = json.loads((s.att_dir / attest.SBOM_FILE).read_bytes())
    for c in doc.get("components") or []:
        if c.get("type") == "file" and c.get("name") == name:
            return next((h.get("content") for h in c.get("hashes") or [] if h.get("alg") == "SHA-256"), None)
    return None


def _manifest(s: State, bound: dict[str, str]) -> None:
    """The folder's openenv.yaml is the environment's manifest: the checkout's, the image's."""
    rel, src = dataset.MANIFEST, s.root / dataset.MANIFEST_SOURCE
    equal(
        f"sha256 of the dataset's {rel} vs the checkout's {dataset.MANIFEST_SOURCE}",
        sha256_file(src) if src.is_file() else "absent",
        bound.get(rel),
        hint=f"the dataset's {rel} is not the manifest of the environment at this commit",
    )
    name = f"{s.cfg.app_dir.rstrip('/')}/{dataset.MANIFEST_SOURCE}"
    equal(
        f"sha256 of the dataset's {rel} vs the image's {name} (the SBOM's file component)",
        _shipped_manifest(s),
        bound.get(rel),
        hint=f"the dataset's {rel} is not the one the image serves from",
    )


def _publication(s: State, release: dict[str, Any]) -> None:
    pub, target = s.prov.dataset, s.plan.dataset
    if pub is None:
        raise VerificationError(
            "provenance.json records no dataset publication",
            expected="a `dataset` entry",
            actual="none",
            hint="records of a release before the dataset folder existed",
        )
    equal(
        f"the dataset repository provenance.json names vs the {target.profile} profile's in release.toml",
        target.repository,
        pub.repository,
    )
    if not target.publish:
        equal(
            f"publication of the dataset by the {target.profile} profile (which does not publish it)",
            (False, None),
            (pub.published, pub.revision),
        )
        return
    if not (pub.published and is_commit(pub.revision)):
        raise VerificationError(
            f"the {target.profile} profile publishes the dataset, but provenance.json records no published revision",
            expected="published, a 40-hex revision",
            actual=f"published {pub.published}, revision {pub.revision!r}",
        )
    task_files = len(dataset.content_files(release_statement.dataset_subjects(release)))
    equal("files read back at the published revision vs the dataset's task files", task_files, pub.files_read_back)


def _folder(s: State, bound: dict[str, str]) -> str:
    folder = s.root / dataset.FOLDER
    if not folder.is_dir():
        return (
            f"{dataset.FOLDER}/ is not here: its {len(bound)} bound files were checked from the records "
            "(card and tasks.jsonl regenerated, openenv.yaml against env/openenv.yaml, vendored files "
            "against their pins, records copies against the records)"
        )
    present = dataset.files(folder)
    # The copies of what the statement never binds (itself, the publishing aids) are the records' own bytes.
    unbound = [p for p in present if release_statement.is_unbound(p)]
    for rel in unbound:
        equal(
            f"{dataset.FOLDER}/{rel} vs the record {rel}",
            sha256_file(s.root / rel) if (s.root / rel).is_file() else "absent",
            sha256_file(folder / rel),
        )
    files = [p for p in present if p not in unbound]
    missing, extra = sorted(set(bound) - set(files)), sorted(set(files) - set(bound))
    if missing or extra:
        raise VerificationError(
            f"{dataset.FOLDER}/ does not hold the files the release statement binds",
            expected=f"{len(bound)} files",
            actual="; ".join(
                x
                for x in (
                    f"missing {', '.join(missing[:5])}" if missing else "",
                    f"not bound {', '.join(extra[:5])}" if extra else "",
                )
                if x
            ),
            hint="files added to or removed from the folder after the release are not part of it",
        )
    for rel in files:
        equal(
            f"{dataset.FOLDER}/{rel} differs from the sha256 the release statement binds",
            bound[rel],
            sha256_file(folder / rel),
            hint="the file was edited after the release",
        )
    return ""


def audit_dataset(r: Rows, s: State) -> None:
    rec = f"{dataset.FOLDER}/"
    release = s.release
    if release is None:
        r.not_checked("dataset/subjects", rec, "the release statement did not verify")
        return
    if s.prov is None or s.sub is None or s.cfg is None or s.plan is None:
        r.not_checked(
            "dataset/subjects",
            rec,
            "release.toml, provenance.json, submission.json or the release statement's profile did not load",
        )
        return
    bound = release_statement.dataset_subjects(release)
    r.run("dataset/subjects", rec, lambda: _subjects(s, release, bound))
    r.run("dataset/card", f"{rec}{dataset.CARD}", lambda: _regenerated(s, bound, dataset.CARD))
    r.run("dataset/tasks", f"{rec}{dataset.TASKS}", lambda: _regenerated(s, bound, dataset.TASKS))
    r.run("dataset/manifest", f"{rec}{dataset.MANIFEST}", lambda: _manifest(s, bound))
    r.run("dataset/publication", "provenance.json", lambda: _publication(s, release))
    note = r.run("dataset/folder", rec, lambda: _folder(s, bound))
    if note:  # not here: information, since every bound file was checked from the records above
        r.rows[-1] = Check("dataset/folder", rec, INFO, note)
