"""Vendoring pinned git sources from real repositories: file://, smart and dumb HTTP, mirrors."""

from __future__ import annotations

import shutil
import stat

import pytest

from pipeline import cli, config
from pipeline._io import sha256_bytes
from pipeline.errors import DigestMismatch, SourceError
from pipeline.sources import git
from pipeline.sources import vendor as sources

from .conftest import LICENSE_BYTES, TASK_BYTES, TASK_PATH, commit_files, run_git


def _vendor(source, tmp_path, **kw):
    kw.setdefault("cache_root", tmp_path / "cache")
    return sources.vendor_source(source, tmp_path / "vendor", **kw)


def _assert_vendored(tmp_path, record):
    out = tmp_path / "vendor"
    assert (out / record.vendor_path).read_bytes() == TASK_BYTES
    assert (out / record.license_path).read_bytes() == LICENSE_BYTES
    assert record.vendor_path == "upstream-tasks/tasks.py"
    assert record.license_path == "upstream-tasks/LICENSE"
    assert record.sha256 == sha256_bytes(TASK_BYTES) and record.size == len(TASK_BYTES)
    assert record.license_sha256 == sha256_bytes(LICENSE_BYTES)
    for rel in (record.vendor_path, record.license_path):
        assert stat.S_IMODE((out / rel).stat().st_mode) == 0o444


def test_vendor_from_file_url(upstream, tmp_path):
    record = _vendor(upstream.source(upstream.file_url), tmp_path)
    _assert_vendored(tmp_path, record)
    assert record.revision == upstream.revision and record.path == TASK_PATH


def test_vendor_over_smart_http_fetches_only_the_pinned_commit(upstream, smart_http, tmp_path):
    url = f"{smart_http}/team/tasks.git"
    source = upstream.source(url)
    record = _vendor(source, tmp_path)
    _assert_vendored(tmp_path, record)
    cache = sources.cache_path(tmp_path / "cache", url)
    assert (cache / "shallow").read_text().split() == [upstream.revision]
    count = run_git("rev-list", "--count", upstream.revision, cwd=cache)
    assert count == "1"


def test_vendor_over_dumb_http_falls_back_to_a_full_fetch(upstream, dumb_http, tmp_path):
    url = f"{dumb_http}/team/tasks.git"
    fetched = git.fetch_revision(tmp_path / "cache.git", url, upstream.revision)
    assert fetched.method == "full"
    record = _vendor(upstream.source(url), tmp_path)
    _assert_vendored(tmp_path, record)


@pytest.mark.parametrize("allow_sha1_in_want, method", [(False, "full"), (True, "by-id")])
def test_protocol_v0_server_by_id_or_full_fetch(upstream, smart_http_v0, tmp_path, allow_sha1_in_want, method):
    # The pinned commit is no longer a branch tip, so a v0 server does not advertise it.
    commit_files(upstream.work, {"README.md": b"later\n"}, "later commit")
    upstream.publish()
    if allow_sha1_in_want:
        run_git("config", "uploadpack.allowReachableSHA1InWant", "true", cwd=upstream.bare)
    url = f"{smart_http_v0}/team/tasks.git"
    fetched = git.fetch_revision(tmp_path / "cache.git", url, upstream.revision)
    assert fetched.method == method
    record = _vendor(upstream.source(url), tmp_path)
    _assert_vendored(tmp_path, record)


def test_new_upstream_commit_does_not_change_the_pinned_bytes(upstream, smart_http, tmp_path):
    commit_files(upstream.work, {TASK_PATH: TASK_BYTES.replace(b"a", b"A", 1)}, "change a byte")
    upstream.publish()
    record = _vendor(upstream.source(f"{smart_http}/team/tasks.git"), tmp_path)
    _assert_vendored(tmp_path, record)


@pytest.mark.parametrize("transport", ["file", "smart_http"])
def test_force_pushed_history_is_revision_not_found(upstream, request, tmp_path, transport):
    url = upstream.file_url if transport == "file" else f"{request.getfixturevalue('smart_http')}/team/tasks.git"
    upstream.rewrite_history()
    with pytest.raises(SourceError, match="revision not found") as info:
        _vendor(upstream.source(url), tmp_path)
    assert upstream.revision in info.value.one_line()
    assert not (tmp_path / "vendor" / "upstream-tasks").exists()


def test_wrong_hash_pin_names_expected_and_actual(upstream, tmp_path):
    wrong = "0" * 64
    with pytest.raises(DigestMismatch, match="hash mismatch") as info:
        _vendor(upstream.source(upstream.file_url, sha256=wrong), tmp_path)
    message = info.value.one_line()
    assert wrong in message and sha256_bytes(TASK_BYTES) in message and TASK_PATH in message
    assert not (tmp_path / "vendor" / "upstream-tasks" / "tasks.py").exists()


def test_wrong_size_pin_is_a_size_mismatch(upstream, tmp_path):
    with pytest.raises(DigestMismatch, match="size mismatch") as info:
        _vendor(upstream.source(upstream.file_url, size=len(TASK_BYTES) + 1), tmp_path)
    assert f"expected {len(TASK_BYTES) + 1} bytes, got {len(TASK_BYTES)} bytes" in info.value.one_line()


def test_deleted_file_at_pinned_revision_is_missing(upstream, tmp_path):
    gone = commit_files(upstream.work, {TASK_PATH: None}, "delete the task file")
    upstream.publish()
    with pytest.raises(SourceError, match="file of source upstream-tasks is missing") as info:
        _vendor(upstream.source(upstream.file_url, revision=gone), tmp_path)
    assert TASK_PATH in info.value.one_line() and "absent" in info.value.one_line()


def test_missing_licence_is_refused(upstream, tmp_path):
    no_licence = commit_files(upstream.work, {"LICENSE": None}, "drop the licence")
    upstream.publish()
    with pytest.raises(SourceError, match="licence of source upstream-tasks is missing"):
        _vendor(upstream.source(upstream.file_url, revision=no_licence), tmp_path)
    assert not (tmp_path / "vendor" / "upstream-tasks" / "tasks.py").exists()


def test_licence_pin_mismatch_is_refused(upstream, tmp_path):
    with pytest.raises(DigestMismatch, match="licence hash mismatch") as info:
        _vendor(upstream.source(upstream.file_url, license_sha256="1" * 64), tmp_path)
    assert sha256_bytes(LICENSE_BYTES) in info.value.one_line()


@pytest.mark.parametrize(
    "revision, kind",
    [("main", "moving ref"), ("HEAD", "moving ref"), ("refs/heads/main", "moving ref"), ("4657e5b", "short revision")],
)
def test_moving_ref_or_short_revision_is_refused_at_fetch(upstream, tmp_path, revision, kind):
    # The model refuses such a pin when release.toml loads (test_config_refuses_...); the fetch
    # refuses it too, so a Source made past the model (model_copy does not validate) is caught.
    unchecked = upstream.source(upstream.file_url).model_copy(update={"revision": revision})
    with pytest.raises(SourceError, match=kind) as info:
        _vendor(unchecked, tmp_path)
    assert revision in info.value.one_line()
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("bare", [True, False])
def test_mirror_directory_is_used_offline(upstream, tmp_path, bare):
    mirror = tmp_path / "mirror"
    name = "example.invalid/team/tasks.git" if bare else "example.invalid/team/tasks"
    args = ["clone", "-q", *(["--mirror"] if bare else []), str(upstream.bare), str(mirror / name)]
    run_git(*args)
    source = upstream.source("https://example.invalid/team/tasks")
    record = _vendor(source, tmp_path, mirror=mirror)
    _assert_vendored(tmp_path, record)
    assert record.repository == "https://example.invalid/team/tasks"


def test_missing_mirror_names_the_paths_looked_at(upstream, tmp_path):
    (tmp_path / "mirror").mkdir()
    with pytest.raises(SourceError, match="no mirror") as info:
        _vendor(upstream.source("https://example.invalid/team/tasks"), tmp_path, mirror=tmp_path / "mirror")
    assert "example.invalid/team/tasks.git" in info.value.one_line()


def test_already_vendored_needs_no_network(upstream, tmp_path):
    source = upstream.source(upstream.file_url, license_sha256=sha256_bytes(LICENSE_BYTES))
    first = _vendor(source, tmp_path)
    shutil.rmtree(upstream.served_root)
    shutil.rmtree(tmp_path / "cache")
    assert _vendor(source, tmp_path) == first
    assert not (tmp_path / "cache").exists()


def test_vendored_file_tampered_after_vendoring_is_detected(upstream, tmp_path):
    source = upstream.source(upstream.file_url)
    record = _vendor(source, tmp_path)
    target = tmp_path / "vendor" / record.vendor_path
    target.chmod(0o644)
    target.write_bytes(TASK_BYTES[:-1] + b"X")
    with pytest.raises(DigestMismatch, match="modified after vendoring"):
        _vendor(source, tmp_path)
    with pytest.raises(DigestMismatch, match="hash mismatch"):
        sources.check_vendored(source, tmp_path / "vendor")
    assert target.read_bytes().endswith(b"X")


def test_vendored_licence_tampered_is_detected(upstream, tmp_path):
    source = upstream.source(upstream.file_url)
    record = _vendor(source, tmp_path)
    licence = tmp_path / "vendor" / record.license_path
    licence.chmod(0o644)
    licence.write_bytes(LICENSE_BYTES + b"extra\n")
    with pytest.raises(DigestMismatch, match="differs from the pinned upstream bytes"):
        _vendor(source, tmp_path)
    with pytest.raises(DigestMismatch, match="licence .* was modified"):
        sources.check_vendored(source, tmp_path / "vendor", license_sha256=record.license_sha256)


def test_check_vendored_passes_on_untouched_files(upstream, tmp_path):
    source = upstream.source(upstream.file_url)
    record = _vendor(source, tmp_path)
    assert sources.check_vendored(source, tmp_path / "vendor", license_sha256=record.license_sha256) == record


def test_repository_key_and_cache_layout(tmp_path):
    assert sources.repository_key("https://github.com/ruvnet/metaharness") == "github.com/ruvnet/metaharness"
    assert sources.repository_key("https://github.com/ruvnet/metaharness.git/") == "github.com/ruvnet/metaharness"
    assert sources.repository_key("file:///srv/x.git") is None
    assert (
        sources.cache_path(tmp_path, "https://github.com/ruvnet/metaharness")
        == tmp_path / "github.com/ruvnet/metaharness.git"
    )


def _release_toml(tmp_path, source_lines: str) -> str:
    """release.toml with its first [[sources]] entry (the task module) replaced."""
    text = config.DEFAULT_CONFIG.read_text()
    start = text.index("\n[[sources]]") + 1
    end = text.index("\n# The reference repairs", start) + 1
    path = tmp_path / "release.toml"
    path.write_text(text[:start] + source_lines + "\n" + text[end:])
    return str(path)


def _source_lines(upstream, *, repository, revision=None, sha=None) -> str:
    return f"""[[sources]]
name = "metaharness-tasks"
repository = "{repository}"
revision = "{revision or upstream.revision}"
path = "{TASK_PATH}"
sha256 = "{sha or sha256_bytes(TASK_BYTES)}"
size = {len(TASK_BYTES)}
license = "MIT"
license_file = "LICENSE"
profiles = ["arena"]
"""


@pytest.mark.parametrize("revision, kind", [("main", "moving ref"), ("4657e5b82e", "short revision")])
def test_config_refuses_moving_ref_and_short_revision(upstream, tmp_path, revision, kind):
    path = _release_toml(tmp_path, _source_lines(upstream, repository=upstream.file_url, revision=revision))
    with pytest.raises(config.ConfigError, match=kind) as info:
        config.load(path)
    assert revision in info.value.one_line()


def test_cli_vendor_with_mirror_then_tamper(upstream, tmp_path, capsys):
    mirror = tmp_path / "mirror"
    run_git("clone", "-q", "--mirror", str(upstream.bare), str(mirror / "github.com/ruvnet/metaharness.git"))
    cfg = _release_toml(tmp_path, _source_lines(upstream, repository="https://github.com/ruvnet/metaharness"))
    ext_mirror_args = ["--mirror", str(mirror), "--cache", str(tmp_path / "cache")]
    out = tmp_path / "vendor"
    argv = ["vendor", "--profile", "local", "--config", cfg, "--out", str(out), *ext_mirror_args]
    assert cli.main(argv) == 0
    assert not (out / "metaharness-tasks").exists()
    argv[2] = "arena"
    # The arena profile also vendors the reference repairs, which this mirror lacks.
    assert cli.main(argv) == 1
    assert "no mirror of https://github.com/akseljoonas/mimo-openenv-software" in capsys.readouterr().err
    assert (out / "metaharness-tasks" / "tasks.py").read_bytes() == TASK_BYTES
    target = out / "metaharness-tasks" / "tasks.py"
    target.chmod(0o644)
    target.write_bytes(b"!" + TASK_BYTES[1:])
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert "error: hash mismatch for source metaharness-tasks" in err
    assert sha256_bytes(TASK_BYTES) in err
