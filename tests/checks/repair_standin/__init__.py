"""Stand-in MiMo repair images, shaped like the real ones (docs/spec/mimo.md), built with
the project's own machinery.

The base is the run's own local base (`pipeline.image.base`: mmdebstrap bookworm + the
slim OpenEnv runtime at /opt/arena-python + the layer of bytecode, as the real runtime, a
python:3.12-slim copy installed with pip, ships its .pyc files too), its three layers
reused by digest, and on it a layer with git (bash is Essential), as the real task images
have both: the files of bookworm's git package, fetched from the base's mirror by an apt
that reads none of the host's sources and unpacked by `dpkg-deb` (git's own commands are
all the checks run; its dependencies beyond the base's libraries, perl and libcurl, serve
commands they do not). On it, one layer like the real images' layers 3-5: a root-only
(0700) /opt/arena holding the server (server.py, models.py), `instance.json` (the task
record: test_patch, test_command, ...) and `workspace.tar` (a git repository at the task's
base commit), and the user arena-agent, UID 2000, home
/home/arena-agent. The config is the real images': User root, WorkingDir /opt/arena,
the uvicorn Cmd on /opt/arena-python/bin/python3, port 8000, PYTHONUNBUFFERED and
ENABLE_WEB_INTERFACE, the source label; Docker schema 2, like theirs.

`build_standins` writes that once per task and pushes it with one config-only variant
per fault (REPAIR_FAULT in the config's Env; the layers are shared), so each broken
stand-in is an image by digest of its own that fails exactly the check FAULT_FAILS names.
"""

from __future__ import annotations

import fcntl
import gzip
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pipeline.config import REPO_ROOT
from pipeline.image import base
from pipeline.image.oci.image import DOCKER, BaseImage, ConfigChanges, NewLayer, derive, parse_manifest
from pipeline.image.oci.layer import FileEntry, tree_entries, write_layer
from pipeline.image.oci.layout import Layout
from pipeline.registry.push import push_image

from ...base.basefixtures import TEST_STATE

HERE = Path(__file__).resolve().parent
MODELS = REPO_ROOT / "env" / "server" / "models.py"
REFERENCE_SCRIPT = HERE / "reference.py"
REPOSITORY = "test/mimo-repair-standin"
# The git layer, kept between runs of a checkout (it is a stand-in: no digest pins it).
STATE = REPO_ROOT / ".release" / "test-repair-standin-git"
PYTHON = "/opt/arena-python/bin/python3"
CMD = (PYTHON, "-m", "uvicorn", "server:app", "--host", "0.0.0.0", "--port", "8000")
ENV = {"PATH": base.PATH_ENV, "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1", "ENABLE_WEB_INTERFACE": "false"}
LABELS = {"org.opencontainers.image.source": "https://github.com/akseljoonas/mimo-openenv-software"}
AGENT = "arena-agent"
AGENT_UID = 2000
SOURCE_DATE_EPOCH = 1735689600  # 2025-01-01: the stand-in task's commits and files
# What the git layer leaves out of the package, as the base's dpkg leaves documentation
# out (the licence stays); gitweb and shell completion are never used.
GIT_LEFT_OUT = (
    "usr/share/man",
    "usr/share/locale",
    "usr/share/lintian",
    "usr/share/gitweb",
    "usr/share/bash-completion",
    "etc/bash_completion.d",
)
# The one check each broken stand-in fails (and nothing else).
FAULT_FAILS = {
    "slow-start": "health_within_120_seconds",
    "no-openapi": "openenv_endpoint_validation",
    "reset-wrong-id": "reset_task_identity",
    "shell-root": "unprivileged_agent_and_protected_verifier",
    "future-history": "no_future_git_history",
    "stale-verdict": "unsolved_terminal_reward_zero",
    "regrades": "terminal_reward_is_stable",
    "keeps-edits": "reset_removes_previous_edits",
    "grader-root": "verifier_git_hooks_are_unprivileged",
    "exit-code-null": "reference_repair_applied_through_action",
    "no-test-patch": "reference_terminal_reward_one",
    "reset-by-git-clean": "reset_restores_unsolved_task",
    "different-schema": "schema",
    "metadata-unnamed": "metadata",
    "any-task": "other-task-refused",
    "two-sessions": "one-session",
}
FAULTS = tuple(FAULT_FAILS)


@dataclass(frozen=True)
class StandIn:
    reference: str  # host/repository@sha256:...
    compressed_bytes: int
    task_id: str
    fault: str = ""
    # The image's /opt/arena/instance.json: the task record's compact JSON text (what a
    # stand-in dataset row carries as extra_info.instance_json).
    instance_json: bytes = b""


# ----------------------------------------------------------------- the task


def _git(repo: Path, *args: str) -> str:
    env = {
        "PATH": os.environ.get("PATH", base.PATH_ENV),
        "HOME": str(repo),
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "stand-in",
        "GIT_AUTHOR_EMAIL": "stand-in@invalid",
        "GIT_COMMITTER_NAME": "stand-in",
        "GIT_COMMITTER_EMAIL": "stand-in@invalid",
        "GIT_AUTHOR_DATE": f"@{SOURCE_DATE_EPOCH} +0000",
        "GIT_COMMITTER_DATE": f"@{SOURCE_DATE_EPOCH} +0000",
    }
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


def _repository(root: Path) -> Path:
    """The task's repository at its base commit (branch main, nothing after it)."""
    repo = root / "repo"
    shutil.copytree(HERE / "project", repo)
    _git(repo, "init", "-q", "--template=", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "calc: statistics helpers")
    return repo


def _test_patch(repo: Path, root: Path) -> str:
    """The hidden tests as a `git diff` against the base commit."""
    scratch = root / "scratch"
    shutil.copytree(repo, scratch)
    shutil.copytree(HERE / "hidden", scratch, dirs_exist_ok=True)
    _git(scratch, "add", "-A")
    return _git(scratch, "diff", "--cached", "--no-color", "--full-index")


def _with_fix_branch(repo: Path, root: Path) -> Path:
    """The repository plus a later commit holding the fix on another branch (what
    no_future_git_history must catch)."""
    leaky = root / "leaky"
    shutil.copytree(repo, leaky)
    _git(leaky, "checkout", "-q", "-b", "upstream-fix")
    subprocess.run(["python3", "-"], input=REFERENCE_SCRIPT.read_bytes(), cwd=leaky, check=True, capture_output=True)
    _git(leaky, "commit", "-q", "-am", "calc: fix mean")
    _git(leaky, "checkout", "-q", "main")
    return leaky


def _tar(tree: Path) -> bytes:
    """`tree` as a tar (sorted, root-owned, fixed times): what reset unpacks."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(tree.rglob("*")):
            info = tar.gettarinfo(str(path), path.relative_to(tree).as_posix())
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = SOURCE_DATE_EPOCH
            with open(path, "rb") if info.isfile() else io.BytesIO() as f:
                tar.addfile(info, f if info.isfile() else None)
    return out.getvalue()


def instance_record(task_id: str, test_patch: str) -> dict:
    """The stand-in task record, with the real records' fields (docs/spec/mimo.md,
    "The records")."""
    return {
        "cwd": "/workspace/repo",
        "dataset_type": "opensource-code",
        "docker_image": f"stand-in/{task_id}",
        "instance_id": task_id,
        "problem_statement": f"calc.mean returns the wrong value ({task_id}). Repair it.",
        "test_command": "bash /workspace/repo/mimo_test_command.sh",
        "test_patch": test_patch,
        "verifier_timeout_sec": 1800,
    }


def compact_json(record: dict) -> bytes:
    """A record's compact JSON text (one line, no trailing newline)."""
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode()


# ----------------------------------------------------------------- the base


@dataclass(frozen=True)
class StandInBase:
    """The base's layers (the run's base, then git) and where each one's blob is."""

    layers: tuple[dict, ...]  # digest, diff_id, size, created_by, comment
    blobs: dict[str, str]  # digest -> the file holding its blob

    def new_layers(self) -> list[NewLayer]:
        return [NewLayer(**layer) for layer in self.layers]

    def blob(self, digest: str) -> Path:
        return Path(self.blobs[digest])

    def etc(self, name: str) -> bytes:
        """/etc/<name> of the base's OS layer."""
        return layer_file(self.blob(self.layers[0]["digest"]), f"etc/{name}")


def layer_file(blob: Path, path: str) -> bytes:
    """The regular file `path` of a gzip'd layer, read as a stream up to that member (layers
    are sorted by path, so /etc comes early: the rest is never decompressed)."""
    with gzip.open(blob, "rb") as raw, tarfile.open(fileobj=raw, mode="r|") as tar:
        for member in tar:
            if member.name.lstrip("./") == path and member.isfile():
                data = tar.extractfile(member)
                assert data is not None
                return data.read()
    raise FileNotFoundError(f"{path} is not in {blob}")


def _git_deb(work: Path) -> Path:
    """bookworm's git package from the base's mirror, by an apt whose sources, lists,
    cache and package state are in `work` (none of the host's)."""
    apt = work / "apt"
    for sub in ("lists/partial", "archives/partial"):
        (apt / sub).mkdir(parents=True, exist_ok=True)
    (apt / "sources.list").write_text(f"deb {base.MIRROR} {base.SUITE} main\n")
    (apt / "status").touch()
    options = [
        f"-oDir::State={apt}",
        f"-oDir::State::Lists={apt / 'lists'}",
        f"-oDir::State::status={apt / 'status'}",
        f"-oDir::Cache={apt}",
        f"-oDir::Cache::Archives={apt / 'archives'}",
        f"-oDir::Etc::SourceList={apt / 'sources.list'}",
        "-oDir::Etc::SourceParts=/nonexistent",
        "-oDebug::NoLocking=1",
        "-oAPT::Sandbox::User=root",
    ]
    for args in (("update",), ("download", "git")):
        proc = subprocess.run(["apt-get", "-q", *options, *args], cwd=work, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"apt-get {' '.join(args)}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    return next(work.glob("git_*.deb"))


def _left_out(rel: str) -> bool:
    if rel.startswith("usr/share/doc/"):
        return rel.count("/") > 3 or (rel.count("/") == 3 and not rel.endswith("/copyright"))
    return any(rel == d or rel.startswith(d + "/") for d in GIT_LEFT_OUT)


def _git_layer(state: Path) -> tuple[dict, Path]:
    """The git layer (made once per checkout) and its blob."""
    record = state / "git-layer.json"
    if record.exists():
        layer = json.loads(record.read_text())
        blob = state / "blobs" / layer["digest"].split(":", 1)[1]
        if blob.exists():
            return layer, blob
    with tempfile.TemporaryDirectory(prefix="standin-git-") as tmp:
        deb = _git_deb(Path(tmp))
        tree = Path(tmp) / "tree"
        subprocess.run(["dpkg-deb", "-x", str(deb), str(tree)], check=True)
        written = write_layer(
            tree_entries(tree, skip=_left_out),
            state / "blobs",
            source_date_epoch=SOURCE_DATE_EPOCH,
            mtime_policy="clamp",
        )
    layer = {
        "digest": written.digest,
        "diff_id": written.diff_id,
        "size": written.size,
        "created_by": f"stand-in: dpkg-deb -x {deb.name}",
        "comment": "",
    }
    record.write_text(json.dumps(layer))
    return layer, written.path


def standin_base(run_base: base.BaseRecord, run_layout: Layout, state: Path = STATE) -> StandInBase:
    """The stand-in base: `run_base`'s layers (their blobs in `run_layout`), then git's."""
    blobs = {l.digest: str(run_layout.blob_path(l.digest)) for l in run_base.layers}
    missing = [d for d, path in blobs.items() if not Path(path).exists()]
    assert not missing, f"the run's base layers {missing} are not in {run_layout.root}"
    layers = [
        {
            "digest": l.digest,
            "diff_id": l.diff_id,
            "size": l.size,
            "created_by": f"pipeline.image.base: {l.role}",
            "comment": "",
        }
        for l in run_base.layers
    ]
    state.mkdir(parents=True, exist_ok=True)
    with open(state / ".lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        git, blob = _git_layer(state)
    blobs[git["digest"]] = str(blob)
    return StandInBase((*layers, git), blobs)


# ----------------------------------------------------------------- the images


def _entries(standin: StandInBase, task_id: str, work: Path) -> tuple[list[FileEntry], bytes]:
    """The stand-in layer's entries, and its instance.json."""
    with tempfile.TemporaryDirectory(prefix="standin-task-", dir=work) as tmp:
        root = Path(tmp)
        repo = _repository(root)
        record = compact_json(instance_record(task_id, _test_patch(repo, root)))
        workspace, leaky = _tar(repo), _tar(_with_fix_branch(repo, root))
    passwd = standin.etc("passwd") + f"{AGENT}:x:{AGENT_UID}:{AGENT_UID}::/home/{AGENT}:/bin/bash\n".encode()
    group = standin.etc("group") + f"{AGENT}:x:{AGENT_UID}:\n".encode()
    files = {
        "opt/arena/server.py": (HERE / "server.py").read_bytes(),
        "opt/arena/models.py": MODELS.read_bytes(),
        "opt/arena/instance.json": record,
        "opt/arena/workspace.tar": workspace,
        "opt/arena/workspace-with-fix-branch.tar": leaky,
    }
    return [
        FileEntry("etc", "dir", 0o755),
        FileEntry("etc/group", "file", 0o644, source=group),
        FileEntry("etc/passwd", "file", 0o644, source=passwd),
        FileEntry("home", "dir", 0o755),
        FileEntry(f"home/{AGENT}", "dir", 0o755, uid=AGENT_UID, gid=AGENT_UID),
        FileEntry("opt", "dir", 0o755),
        FileEntry("opt/arena", "dir", 0o700),
        *(FileEntry(path, "file", 0o644, source=data) for path, data in sorted(files.items())),
    ], record


def build_standins(
    registry, run_base: base.BaseRecord, work: Path, *, task_id: str, faults: tuple[str, ...] = FAULTS
) -> dict[str, StandIn]:
    """Push the stand-in of `task_id` and its broken variants to `registry` (a
    pipeline.registry.local state); {"": the good one, fault: its broken one}."""
    unknown = sorted(set(faults) - set(FAULTS))
    if unknown:
        raise ValueError(f"unknown fault(s) {unknown}")
    standin = standin_base(run_base, Layout.open(TEST_STATE / "oci"))
    work.mkdir(parents=True, exist_ok=True)
    entries, record = _entries(standin, task_id, work)
    layer = write_layer(entries, work, source_date_epoch=SOURCE_DATE_EPOCH)
    layers = [
        *standin.new_layers(),
        NewLayer(
            layer.digest,
            layer.diff_id,
            layer.size,
            "stand-in: /opt/arena (server, instance.json, workspace.tar), user arena-agent",
        ),
    ]
    good = derive(
        None,
        layers,
        ConfigChanges(
            cmd=CMD, env=ENV, working_dir="/opt/arena", exposed_ports=("8000/tcp",), labels=LABELS, user="root"
        ),
        source_date_epoch=SOURCE_DATE_EPOCH,
        family=DOCKER,
    )
    blobs = {l["digest"]: standin.blob(l["digest"]) for l in standin.layers}
    blobs[layer.digest] = layer.path
    writer = registry.client()
    out = {}
    for fault in ("", *faults):
        image = (
            good
            if not fault
            else derive(
                BaseImage(parse_manifest(good.manifest_bytes, good.media_type), good.config_bytes),
                [],
                ConfigChanges(env={"REPAIR_FAULT": fault}),
                source_date_epoch=SOURCE_DATE_EPOCH,
            )
        )
        pushed = push_image(
            writer,
            REPOSITORY,
            image.manifest_bytes,
            image.media_type,
            {**blobs, image.manifest.config.digest: image.config_bytes},
            tag=f"{fault or 'ok'}-{task_id}",
        )
        out[fault] = StandIn(pushed.reference, image.manifest.compressed_size, task_id, fault, record)
    return out


def build_standin(registry, run_base: base.BaseRecord, work: Path, *, task_id: str, fault: str = "") -> StandIn:
    """One stand-in (good, or broken by `fault`)."""
    return build_standins(registry, run_base, work, task_id=task_id, faults=(fault,) if fault else ())[fault]
