"""The task-module loader and `python -m env serve`'s refusal to run without root."""

from __future__ import annotations

import stat

import pytest

import env.__main__ as cli
from env.loader import VENDORED_MODULE_NAME, TaskModuleError, load_task_module

GOOD = """
TASK_IDS = ["a", "b"]
DOMAINS = {"a": "x", "b": "y"}
def make_task(task_id, seed, difficulty=2): return {}
def grade(task, answer): return 0.0
def oracle_answer(task): return {}
"""


def test_default_is_the_first_party_families():
    module = load_task_module()
    assert module.__name__ == "env.families"
    assert module.TASK_IDS[0] == "software_change"


def test_loads_a_file_by_path(tmp_path):
    path = tmp_path / "tasks.py"
    path.write_text(GOOD)
    module = load_task_module(path)
    assert module.__name__ == VENDORED_MODULE_NAME and module.TASK_IDS == ["a", "b"]


@pytest.mark.parametrize(
    "source, fragment",
    [
        (GOOD.replace("def grade(task, answer): return 0.0", ""), "missing grade"),
        (GOOD.replace('TASK_IDS = ["a", "b"]', "TASK_IDS = []"), "TASK_IDS"),
        (GOOD.replace('DOMAINS = {"a": "x", "b": "y"}', 'DOMAINS = {"a": "x"}'), "DOMAINS"),
        (GOOD + "\nraise RuntimeError('broken at import')\n", "broken at import"),
    ],
    ids=["missing-callable", "empty-task-ids", "domains-mismatch", "import-error"],
)
def test_refuses_modules_without_the_api(tmp_path, source, fragment):
    path = tmp_path / "tasks.py"
    path.write_text(source)
    with pytest.raises(TaskModuleError, match=fragment):
        load_task_module(path)


def test_refuses_a_missing_file(tmp_path):
    with pytest.raises(TaskModuleError, match="ARENA_TASKS_FILE"):
        load_task_module(tmp_path / "nope.py")


def test_serve_refuses_to_start_without_root(monkeypatch, capsys):
    # The real check reads the effective UID; pretend to be the sandbox user.
    monkeypatch.setattr(cli.os, "geteuid", lambda: 2000)
    assert cli.main(["serve", "--port", "1"]) == 2
    assert "must run as root" in capsys.readouterr().err


def test_serve_outside_a_container_needs_host_mode(monkeypatch, capsys):
    monkeypatch.setattr(cli.os, "geteuid", lambda: 0)
    monkeypatch.setattr(cli, "in_container", lambda: False)
    assert cli.main(["serve", "--port", "1"]) == 2
    assert "--host-mode" in capsys.readouterr().err


def test_host_mode_refuses_code_readable_by_uid_2000(monkeypatch, capsys):
    # The checkout's files are world-readable (0644): the sandbox could import the task module.
    # Whether its parent directories let UID 2000 through depends on where the clone lives (a
    # 0700 temporary directory does not): test_readable_by_follows_every_parent covers that,
    # here only the files' own modes count.
    monkeypatch.setattr(
        cli,
        "readable_by",
        lambda path, uid, gid: cli._allows(path.stat(), uid, gid, stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH),
    )
    monkeypatch.setattr(cli.os, "geteuid", lambda: 0)
    # Should the refusal fail, the server must not start here: host mode adds a user to this
    # host's /etc/passwd and takes over a workspace.
    import env.server.app

    def must_not_start(*args, **kwargs):
        raise AssertionError("host mode went on to start the server in the test process")

    monkeypatch.setattr(env.server.app, "create_server_app", must_not_start)
    assert cli.main(["serve", "--port", "1", "--host-mode"]) == 2
    err = capsys.readouterr().err
    assert "could read the server code or task module" in err and "families" in err


def test_readable_by_follows_every_parent(tmp_path):
    inner = tmp_path / "a" / "b"
    inner.mkdir(parents=True)
    tmp_path.chmod(0o755)
    (tmp_path / "a").chmod(0o755)
    target = inner / "f.py"
    target.write_text("x")
    target.chmod(0o644)
    inner.chmod(0o755)
    assert cli.readable_by(target, 2000, 2000) == cli.readable_by(tmp_path, 2000, 2000)
    (tmp_path / "a").chmod(0o700)
    assert not cli.readable_by(target, 2000, 2000)
    (tmp_path / "a").chmod(0o755)
    target.chmod(0o600)
    assert not cli.readable_by(target, 2000, 2000)
