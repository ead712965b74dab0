"""The Hugging Face Hub adapter: publish the dataset folder, read it back anonymously.

Every call goes through `huggingface_hub` (HfApi.create_commit, list_repo_files,
hf_hub_download) against one endpoint: `HF_ENDPOINT` when set, else release.toml's
`[dataset] hub_url`. Credentials come only from the environment (`HF_TOKEN`, never a
stored login); reading back is anonymous (`token=False`), as a trainer or the platform
reads it, so a private or gated dataset fails the read-back.

A release publishes in two commits, because a record cannot name the commit that holds
it: the task files (card, tasks.jsonl, openenv.yaml, vendor/) first, replacing whatever else the
repository held; their revision is recorded in provenance.json; the signed records then
follow in a second commit on top of it. After each commit every file is downloaded again
at the new revision and compared byte for byte with the folder; the Hub's listing must
hold exactly the folder's files (and the `.gitattributes` the Hub keeps).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pipeline._io import sha256_bytes, sha256_file
from pipeline.errors import ConfigError, DigestMismatch, HubError
from pipeline.formats import is_commit
from pipeline.progress import say
from pipeline.records.provenance import DatasetPublication

REPO_TYPE = "dataset"
HUB_KEEPS = ".gitattributes"  # created with every Hub repository; never deleted by the client either


@dataclass(frozen=True)
class HubTarget:
    """The dataset repository a release names, where its Hub is, and whether it publishes."""

    repository: str
    endpoint: str
    publish: bool
    profile: str  # names the release in messages

    @classmethod
    def of(
        cls, repository: str, hub_url: str, *, publish: bool, profile: str, environ: Mapping[str, str] | None = None
    ) -> HubTarget:
        environ = os.environ if environ is None else environ
        return cls(repository, (environ.get("HF_ENDPOINT") or hub_url).rstrip("/"), publish, profile)

    @property
    def url(self) -> str:
        return f"{self.endpoint}/datasets/{self.repository}"

    def not_published(self) -> DatasetPublication:
        return DatasetPublication(
            repository=self.repository,
            published=False,
            revision=None,
            url=None,
            files_read_back=0,
            reason=f"not published: the {self.profile} profile does not publish the dataset",
        )

    def token(self, environ: Mapping[str, str] | None = None) -> str:
        """HF_TOKEN from the environment (nothing else: no stored login is read)."""
        environ = os.environ if environ is None else environ
        token = environ.get("HF_TOKEN", "")
        if not token:
            raise ConfigError(
                f"profile {self.profile} publishes the dataset {self.repository}, but HF_TOKEN is not set",
                hint="export HF_TOKEN (a Hugging Face token with write access to the dataset)",
            )
        return token


def _quiet_client() -> None:
    """No telemetry: huggingface_hub otherwise builds its user agent by fetching an
    "agent harnesses" registry from the endpoint, a request the release has no use for."""
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    from huggingface_hub import constants

    constants.HF_HUB_DISABLE_TELEMETRY = True


def _api(target: HubTarget, token: str | bool):
    _quiet_client()
    from huggingface_hub import HfApi

    return HfApi(endpoint=target.endpoint, token=token)


def _hub_errors() -> tuple[type[BaseException], ...]:
    from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, OfflineModeIsEnabled

    # ValueError: the client's own refusals (an invalid README metadata block, a malformed answer);
    # OSError: the network (httpx2's transport errors are OSErrors).
    return (HfHubHTTPError, OfflineModeIsEnabled, EntryNotFoundError, OSError, ValueError)


def _why(exc: BaseException) -> str:
    """The client's error on one line (huggingface_hub's messages run over several)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def _remote_files(target: HubTarget, revision: str, token: str | bool) -> list[str]:
    return sorted(
        _api(target, token).list_repo_files(target.repository, repo_type=REPO_TYPE, revision=revision, token=token)
    )


def upload(
    target: HubTarget,
    folder: Path,
    paths: Iterable[str],
    *,
    token: str,
    message: str,
    parent: str | None = None,
    replace: bool = False,
) -> str:
    """One commit adding `paths` of `folder` (with `replace`, also deleting every other file the
    repository holds but the Hub's .gitattributes; with `parent`, refused unless the head is that
    commit); its revision."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    paths = sorted(paths)
    try:
        ops: list = [CommitOperationAdd(path_in_repo=p, path_or_fileobj=str(Path(folder) / p)) for p in paths]
        if replace:
            ops += [
                CommitOperationDelete(path_in_repo=p)
                for p in _remote_files(target, "main", token)
                if p not in paths and p != HUB_KEEPS
            ]
        info = _api(target, token).create_commit(
            target.repository, ops, repo_type=REPO_TYPE, commit_message=message, parent_commit=parent, token=token
        )
    except _hub_errors() as exc:
        raise HubError(
            f"the Hub refused the commit to the dataset {target.repository}",
            expected=f"a commit of {len(paths)} file(s) at {target.url}",
            actual=_why(exc),
            hint="check HF_TOKEN's write access and that the dataset repository exists",
        ) from None
    revision = str(info.oid)
    if not is_commit(revision):
        raise HubError("the Hub answered the commit without a commit id", expected="40 hex digits", actual=revision)
    say(f"    {target.repository}: committed {len(paths)} file(s) at {revision}")
    return revision


def read_back(target: HubTarget, folder: Path, paths: Iterable[str], revision: str) -> int:
    """Download every file of `paths` anonymously at `revision` and compare its bytes with
    `folder`'s; the Hub must list exactly these files there. Returns how many were compared.

    DigestMismatch names the first file whose bytes differ; HubError says what else went wrong.
    """
    _quiet_client()
    from huggingface_hub import hf_hub_download

    paths = sorted(paths)
    try:
        remote = _remote_files(target, revision, False)
    except _hub_errors() as exc:
        raise HubError(
            f"the dataset {target.repository} cannot be listed anonymously at {revision}",
            expected="a public dataset",
            actual=_why(exc),
            hint="make the dataset public (not gated): trainers and the platform read it anonymously",
        ) from None
    listed = [p for p in remote if p != HUB_KEEPS]
    if listed != paths:
        missing, extra = sorted(set(paths) - set(listed)), sorted(set(listed) - set(paths))
        raise DigestMismatch(
            f"the dataset {target.repository} at {revision} does not hold the folder's files",
            expected=f"{len(paths)} files",
            actual="; ".join(
                x
                for x in (
                    f"missing {', '.join(missing[:5])}" if missing else "",
                    f"not in the folder {', '.join(extra[:5])}" if extra else "",
                )
                if x
            ),
            hint="something else wrote to the repository: publish again",
        )
    with tempfile.TemporaryDirectory(prefix="hub-read-back-") as cache:
        for path in paths:
            try:
                got = Path(
                    hf_hub_download(
                        target.repository,
                        path,
                        repo_type=REPO_TYPE,
                        revision=revision,
                        endpoint=target.endpoint,
                        token=False,
                        cache_dir=cache,
                    )
                ).read_bytes()
            except _hub_errors() as exc:
                raise HubError(
                    f"{path} of the dataset {target.repository} cannot be downloaded anonymously at {revision}",
                    actual=_why(exc),
                ) from None
            want = sha256_file(Path(folder) / path)
            if sha256_bytes(got) != want:
                raise DigestMismatch(
                    f"the Hub serves other bytes for {path} of {target.repository} at {revision}",
                    expected=f"sha256 {want}",
                    actual=f"sha256 {sha256_bytes(got)} ({len(got)} bytes)",
                    hint="the release stops before writing submission.json; publish again",
                )
    say(f"    {target.repository}@{revision}: {len(paths)} file(s) read back anonymously, every byte equal")
    return len(paths)


def publish_files(target: HubTarget, folder: Path, paths: Iterable[str], *, token: str) -> DatasetPublication:
    """The task files as one commit replacing the repository's content, read back; the record
    provenance.json carries."""
    paths = sorted(paths)
    revision = upload(
        target,
        folder,
        paths,
        token=token,
        replace=True,
        message="Task files of the release (card, tasks.jsonl, openenv.yaml, vendored files)",
    )
    count = read_back(target, folder, paths, revision)
    return DatasetPublication(
        repository=target.repository,
        published=True,
        revision=revision,
        url=f"{target.url}/tree/{revision}",
        files_read_back=count,
        reason="",
    )


def publish_records(
    target: HubTarget,
    folder: Path,
    records: Iterable[str],
    everything: Iterable[str],
    *,
    token: str,
    task_files: DatasetPublication,
) -> str:
    """The `records` on top of the task files' commit, then `everything` in the folder read back;
    the new revision."""
    revision = upload(
        target,
        folder,
        records,
        token=token,
        parent=task_files.revision,
        message=f"Release records (task files at {task_files.revision})",
    )
    read_back(target, folder, everything, revision)
    return revision
