"""Publication of the dataset folder through the real huggingface_hub client, against a loopback
stand-in of the Hub (tests/hub_standin.py; huggingface.co cannot be reached here): the task files
as one commit replacing the repository's content, read back anonymously byte for byte, then the
records on top; a Hub serving one changed byte, a concurrent writer, a private dataset and bad
credentials each stop the publication. The real Hub is exercised by the `network` test."""

from __future__ import annotations

import os
import uuid

import pytest

from pipeline.errors import ConfigError, DigestMismatch, HubError
from pipeline.records import dataset, hub

REPO = "akseljoonas/mimo-openenv-software"


def _target(standin, repository: str = REPO) -> hub.HubTarget:
    return hub.HubTarget.of(
        repository, "https://huggingface.co", publish=True, profile="arena", environ={"HF_ENDPOINT": standin.url}
    )


def _folder(records):
    folder = records.root / dataset.FOLDER
    everything = dataset.files(folder)
    return folder, everything, dataset.content_files(everything), dataset.record_files(everything)


def test_task_files_then_records_published_and_read_back_anonymously(records, hub_standin):
    hub_standin.create_repo(REPO)
    target = _target(hub_standin)
    folder, everything, content, recs = _folder(records)
    # a previous release's file, which this one does not have: the task-files commit removes it
    stale = hub.upload(target, folder, [dataset.CARD], token=hub_standin.token, message="an older release")
    hub_standin.repos[REPO].commits[stale].files["vendor/old-source/tasks.py"] = b"old\n"
    assert {
        "README.md",
        "tasks.jsonl",
        "openenv.yaml",
        "vendor/metaharness-tasks/tasks.py",
        "vendor/metaharness-tasks/LICENSE",
    } == set(content)

    pub = hub.publish_files(target, folder, content, token=hub_standin.token)
    assert pub.published and pub.repository == REPO and pub.files_read_back == len(content)
    assert pub.url == f"{hub_standin.url}/datasets/{REPO}/tree/{pub.revision}"
    assert hub_standin.files_at(REPO, pub.revision) == {
        ".gitattributes": hub_standin.files_at(REPO, "main")[".gitattributes"],
        **{p: (folder / p).read_bytes() for p in content},
    }

    records_revision = hub.publish_records(target, folder, recs, everything, token=hub_standin.token, task_files=pub)
    commits = hub_standin.commits(REPO)
    assert [c.oid for c in commits[-2:]] == [pub.revision, records_revision]
    at_head = hub_standin.files_at(REPO, records_revision)
    assert sorted(at_head) == sorted(everything + [".gitattributes"])
    assert all(at_head[p] == (folder / p).read_bytes() for p in everything)
    # writes carried the token; every read (listings, downloads) was anonymous, as a trainer reads
    writes = [r for r in hub_standin.requests if "/preupload/" in r.path or "/commit/" in r.path]
    reads = [r for r in hub_standin.requests if "/resolve/" in r.path]
    assert writes and all(r.token == hub_standin.token for r in writes)
    assert len([r for r in reads if r.method == "GET"]) == len(content) + len(everything)
    assert all(r.token is None for r in reads)
    assert all(
        r.token is None
        for r in hub_standin.requests
        if "/tree/" in r.path and (pub.revision in r.path or records_revision in r.path)
    )
    assert hub_standin.unknown == []


@pytest.mark.parametrize("path", ["README.md", "vendor/metaharness-tasks/tasks.py"])
def test_a_hub_serving_one_changed_byte_of_a_task_file_stops_the_publication(records, hub_standin, path):
    hub_standin.create_repo(REPO)
    folder, _, content, _ = _folder(records)
    hub_standin.changed_byte.add(path)
    with pytest.raises(DigestMismatch) as info:
        hub.publish_files(_target(hub_standin), folder, content, token=hub_standin.token)
    message = info.value.one_line()
    assert f"the Hub serves other bytes for {path} of {REPO}" in message
    assert "the release stops before writing submission.json" in message


def test_a_hub_serving_one_changed_byte_of_a_record_stops_the_publication(records, hub_standin):
    hub_standin.create_repo(REPO)
    target = _target(hub_standin)
    folder, everything, content, recs = _folder(records)
    pub = hub.publish_files(target, folder, content, token=hub_standin.token)
    hub_standin.changed_byte.add("submission.json")
    with pytest.raises(DigestMismatch, match="other bytes for submission.json"):
        hub.publish_records(target, folder, recs, everything, token=hub_standin.token, task_files=pub)


def test_a_concurrent_writer_between_the_two_commits_stops_the_publication(records, hub_standin):
    hub_standin.create_repo(REPO)
    target = _target(hub_standin)
    folder, everything, content, recs = _folder(records)
    hub_standin.write_behind["someone-else.txt"] = b"not the release's\n"
    pub = hub.publish_files(target, folder, content, token=hub_standin.token)  # its own revision is clean
    with pytest.raises(HubError, match="refused the commit"):
        hub.publish_records(target, folder, recs, everything, token=hub_standin.token, task_files=pub)


def test_read_back_refuses_a_revision_holding_other_files(records, hub_standin):
    hub_standin.create_repo(REPO)
    target = _target(hub_standin)
    folder, _, content, _ = _folder(records)
    pub = hub.publish_files(target, folder, content, token=hub_standin.token)
    with pytest.raises(DigestMismatch, match="does not hold the folder's files.*not in the folder README.md"):
        hub.read_back(target, folder, [p for p in content if p != "README.md"], pub.revision)


def test_a_private_dataset_fails_the_anonymous_read_back(records, hub_standin):
    hub_standin.create_repo(REPO, private=True)
    folder, _, content, _ = _folder(records)
    with pytest.raises(HubError, match="cannot be listed anonymously.*make the dataset public"):
        hub.publish_files(_target(hub_standin), folder, content, token=hub_standin.token)


def test_credentials_come_from_hf_token_only(records, hub_standin):
    hub_standin.create_repo(REPO)
    target = _target(hub_standin)
    with pytest.raises(ConfigError, match="HF_TOKEN is not set"):
        target.token(environ={})
    assert target.token(environ={"HF_TOKEN": "hf_x"}) == "hf_x"
    folder, _, content, _ = _folder(records)
    with pytest.raises(HubError, match="refused the commit.*HF_TOKEN's write access"):
        hub.publish_files(target, folder, content, token="hf_not_the_token")
    assert len(hub_standin.commits(REPO)) == 1  # nothing was committed


@pytest.mark.network
def test_publish_to_the_real_hub(records):
    """huggingface.co itself: needs the internet, HF_TOKEN and a dataset repository to write to
    (RELEASE_TEST_HF_DATASET, public)."""
    repository = os.environ.get("RELEASE_TEST_HF_DATASET")
    if not (repository and os.environ.get("HF_TOKEN")):
        pytest.skip("set HF_TOKEN and RELEASE_TEST_HF_DATASET (a public dataset repository) to publish for real")
    target = hub.HubTarget.of(repository, "https://huggingface.co", publish=True, profile=f"test-{uuid.uuid4().hex}")
    folder, everything, content, recs = _folder(records)
    pub = hub.publish_files(target, folder, content, token=target.token())
    assert pub.files_read_back == len(content)
    hub.publish_records(target, folder, recs, everything, token=target.token(), task_files=pub)


def test_the_release_stage_publishes_the_task_files_it_writes_and_records_where(records, hub_standin, tmp_path):
    """pipeline.release's dataset stage, as the arena profile runs it, on a real release's records:
    the card and tasks.jsonl generated, openenv.yaml and the vendored files copied, all published and read back, and
    the publication record provenance.json then carries."""
    from dataclasses import replace

    from pipeline import config as config_mod
    from pipeline import plan, release
    from pipeline.records import provenance, submission

    hub_standin.create_repo(REPO)
    cfg = config_mod.load(records.root / "release.toml")
    rp = plan.resolve(cfg, "test")
    rp = replace(rp, dataset=replace(_target(hub_standin), profile="test"))
    prov = replace(provenance.load(records.root / "provenance.json"), dataset=None)
    sub = submission.load(records.root / "submission.json")
    folder = tmp_path / "staged-dataset"
    pub = release._dataset_task_files(cfg, rp, prov, sub, folder, repo=records.root, hf_token=hub_standin.token)
    assert pub.published and pub.repository == REPO and pub.files_read_back == 5
    assert hub_standin.commits(REPO)[-1].oid == pub.revision
    published = hub_standin.files_at(REPO, pub.revision)
    assert sorted(published) == [
        ".gitattributes",
        "README.md",
        "openenv.yaml",
        "tasks.jsonl",
        "vendor/metaharness-tasks/LICENSE",
        "vendor/metaharness-tasks/tasks.py",
    ]
    assert published["tasks.jsonl"] == (records.root / dataset.FOLDER / "tasks.jsonl").read_bytes()
    assert published["openenv.yaml"] == (records.root / "env/openenv.yaml").read_bytes()
    assert "publishes this folder to the dataset `akseljoonas/mimo-openenv-software`" in published["README.md"].decode()
