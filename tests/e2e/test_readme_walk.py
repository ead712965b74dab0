"""The README, then docs/*.md, walked as a newcomer: every command, in order, on fresh clones.

How the walk reads the documents (tests/e2e/readme_walk.py):

- The documents are README.md, then every docs/*.md in name order; each one starts in the
  `newcomer` checkout (below), and a background server stops at the end of its document.
- It runs every fenced block whose info string is `sh` (or `bash`, `shell`) with
  `bash -e -o pipefail`, in the order the blocks appear, in the local profile, with the
  environment of a newcomer: no `RELEASE_*` variables, the machine's `python3` and `nox`
  (not the test suite's virtualenv), a git identity for the commit the README makes. A block
  that exits non-zero, or runs longer than 30 minutes, fails the walk; the failure names the
  document and line, its section and first command, and shows the end of its output.
- A `python` block is fed to `.nox/serve/bin/python -` in its checkout (the serve session's
  virtualenv has the OpenEnv client), as the README says.
- Other blocks (no info string, toml, ...) are text, never run.
- Markers: an HTML comment on the line just before a block's opening fence (several may
  stack); a marker anywhere else, or an unknown one, fails the walk:
  - `<!-- readme-walk: skip (REASON) -->`: the block is not run; the walk prints
    `readme-walk: SKIPPED DOCUMENT:LINE (section) `command`: REASON`. For blocks that need
    the internet, credentials or keyless records (arena profile, ghcr.io, sigstore), change
    the host, or are the test suite itself.
  - `<!-- readme-walk: background -->`: a server. The block runs in the background until a
    loopback URL it prints answers `/health` (15 minutes at most); it is stopped with Ctrl-C
    (SIGINT to its process group) at the end of its `## ` section, and must then exit and
    stop answering. While it runs, the README's client URL (`http://127.0.0.1:<release.toml's
    port>`) in later blocks is replaced by the URL it printed: the walk serves on a free port
    (`RELEASE_SERVE_PORT`) so that it cannot collide with anything else on the machine.
  - `<!-- readme-walk: checkout NAME -->`: this block and the next ones run in the clone
    NAME: a fresh clone of the walk's origin (a bare clone of this repository's HEAD, which
    the README's `git push` reaches) made when NAME is first named. The walk starts in
    `newcomer`; the auditor's commands run in `auditor` (the committed records, nothing
    else present) and CI's in `ci` (cloned after the release engineer pushed).
- Caches only: every clone shares one `.nox` (a session's virtualenv is made once per
  walk) and starts with the base layout and wheel cache of this checkout's `.release/`, if
  any (as tests/e2e/test_release.py does; both are checked by digest when used).

The clones are HEAD's: commit a change to the documents before walking them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
from pathlib import Path

import pytest

from pipeline.config import load
from pipeline.registry import local as localregistry

from ..base.basefixtures import base_image  # noqa: F401  (a fixture)
from . import readme_walk
from .caches import seed_caches
from .readme_walk import ReadmeError, Walk, WalkFailed, parse, parse_documents

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
README_URL = f"http://127.0.0.1:{load().port}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def newcomer_env() -> dict[str, str]:
    """This process's environment as a newcomer's shell has it: none of the pipeline's
    variables, the machine's python3 and nox rather than this virtualenv's."""
    # PYTHONDONTWRITEBYTECODE too (set on CI's machines, not on a newcomer's): with it, every
    # process of the walk compiled what it imports from source again (the sessions' venvs
    # are made by uv, which writes no bytecode at install).
    drop = ("SOURCE_DATE_EPOCH", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith(("RELEASE_", "PYTEST_", "NOX_"))}
    if sys.prefix != sys.base_prefix:
        venv_bin = str(Path(sys.prefix) / "bin")
        env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    identity = {"GIT_AUTHOR_NAME": "README walk", "GIT_AUTHOR_EMAIL": "readme-walk@localhost"}
    env.update(
        identity,
        GIT_COMMITTER_NAME=identity["GIT_AUTHOR_NAME"],
        GIT_COMMITTER_EMAIL=identity["GIT_AUTHOR_EMAIL"],
        RELEASE_SERVE_PORT=str(_free_port()),
    )
    return env


def _walk(root: Path, say, **kwargs) -> Walk:
    return Walk(source=REPO, root=root, env=newcomer_env(), readme_url=README_URL, say=say, **kwargs)


def _rebuilt_from_scratch_bit_for_bit(output: str) -> None:
    """What `nox -s reproduce` prints when, with no registry, it rebuilt the base from its
    lock and the whole image to the recorded digests."""
    assert "rebuilt from locks/base.json" in output and "base  same" in output, output[-3000:]
    assert re.search(r"^reproduced: image sha256:[0-9a-f]{64} is bit-identical$", output, re.M), output[-3000:]


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.root
@pytest.mark.container
@pytest.mark.first
@pytest.mark.timeout(3 * 3600)
def test_the_readme_walked_in_order_on_fresh_clones(tmp_path, capsys, base_image):
    # base_image: the pinned base, built once per run (tests/base/basefixtures.py), is the
    # layout the clones are seeded with; the newcomer's release re-pushes it instead of
    # making a third from-scratch base beside the auditor's and CI's reproductions.
    def say(line: str) -> None:
        with capsys.disabled():
            print(line, flush=True)

    walk = _walk(tmp_path / "walk", say, seed=seed_caches)
    try:
        outcomes = walk.run(parse_documents(REPO))
    finally:
        for checkout in walk.checkouts.values():
            localregistry.stop(checkout / ".release" / "registry")
    # The client snippet played an episode against the served image, and got graded.
    played = [o for o in outcomes if o.block.language == "python"]
    assert played and all(o.status == "ran" for o in played)
    assert re.search(r"^reward: -?\d+(\.\d+)? done: True$", played[0].output, re.M), played[0].output[-2000:]
    # The auditor's path on the committed records (CI's proof of their digests): a fresh clone
    # with no registry rebuilds the base from its lock and the whole image bit for bit, then the
    # audit passes with nothing skipped (the SBOM checked against the rebuilt layers).
    auditor = [o for o in outcomes if o.block.checkout == "auditor" and o.status == "ran"]
    reproduced = [o for o in auditor if "nox -s reproduce" in o.block.text]
    audited = [o for o in auditor if "nox -s audit" in o.block.text]
    assert reproduced and audited
    _rebuilt_from_scratch_bit_for_bit(reproduced[0].output)
    verdicts = [l for l in audited[0].output.splitlines() if l.startswith("AUDIT ")]
    assert verdicts and all(v.startswith("AUDIT PASSED") and "skipped" not in v for v in verdicts), verdicts
    # CI's path on the records the walk's own release made and the release engineer pushed:
    # a fresh clone, no registry anywhere; mmdebstrap and the wheel lock rebuild the base,
    # the whole image digest is the recorded one and the records are current.
    ci = [o for o in outcomes if o.block.checkout == "ci" and o.status == "ran" and "nox -s reproduce" in o.block.text]
    assert ci, "the README's CI section no longer runs `nox -s reproduce` in a fresh clone"
    out = ci[0].output
    recorded = json.loads((walk.checkouts["ci"] / "provenance.json").read_text())["image"]["digest"]
    _rebuilt_from_scratch_bit_for_bit(out)
    assert "no local registry runs here" in out
    assert f"image same: recorded {recorded}" in out and "records are current" in out
    shutil.rmtree(tmp_path / "walk", ignore_errors=True)


# ------------------------------------------------------------ the walker has teeth


def test_a_broken_command_in_a_copy_of_the_readme_fails_the_walk(tmp_path):
    text = README.read_text()
    first = parse(text)[0]
    assert "nox -s release" in first.text and first.skip is None
    broken = text.replace(first.text, first.text.replace("nox -s release", "nox -s relaese"), 1)
    copy = tmp_path / "README.md"
    copy.write_text(broken)
    said: list[str] = []
    with pytest.raises(WalkFailed, match=rf"README.md:{first.line} \(Set-up\) .* exited [1-9]") as failed:
        _walk(tmp_path / "walk", said.append).run(parse(copy.read_text()))
    assert "Sessions not found: relaese" in str(failed.value)
    assert said == []


def test_the_readme_s_markers_parse_and_its_client_uses_serve_s_url():
    blocks = parse_documents(REPO)
    runnable = [b for b in blocks if b.skip is None]
    assert runnable[0].checkout == readme_walk.FIRST_CHECKOUT and "nox -s release" in runnable[0].text
    served = [b for b in blocks if b.background]
    clients = [b for b in blocks if b.language == "python" and b.skip is None]
    assert served and clients
    for client in clients:
        server = [b for b in served if b.source == client.source and b.line < client.line][-1]
        assert (server.source, server.section) == (client.source, client.section), (
            "the client runs while the server of its section runs"
        )
        assert README_URL in client.text
    assert all(b.skip.strip() for b in blocks if b.skip is not None)
    # Every document is walked: the README first, then each docs/*.md.
    docs = sorted((REPO / "docs").glob("*.md"))
    assert docs and readme_walk.documents(REPO) == [README, *docs]


def _documents(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_docs_are_walked_after_the_readme_in_name_order_each_from_the_newcomer_s_clone(tmp_path):
    repo = _documents(
        tmp_path,
        {
            "README.md": "## Set-up\n\n```sh\necho readme\n```\n\n"
            "<!-- readme-walk: checkout auditor -->\n```sh\necho audit\n```\n",
            "docs/testing.md": "# Testing\n\n## Markers\n\n<!-- readme-walk: skip (the suite) -->\n"
            "```sh\nnox -s tests\n```\n",
            "docs/ci.md": "# CI\n\n```python\nprint('ci')\n```\n\n```toml\nnot = 'run'\n```\n",
            "docs/notes.txt": "```sh\necho not a markdown document\n```\n",
        },
    )
    blocks = parse_documents(repo)
    assert [(b.source, b.line, b.section, b.checkout) for b in blocks] == [
        ("README.md", 3, "Set-up", "newcomer"),
        ("README.md", 8, "Set-up", "auditor"),
        ("docs/ci.md", 3, "(top)", "newcomer"),  # a document starts in the newcomer's clone again
        ("docs/testing.md", 6, "Markers", "newcomer"),
    ]
    assert blocks[-1].skip == "the suite"
    assert blocks[2].name == "docs/ci.md:3 ((top)) `print('ci')`"


def test_a_docs_file_s_malformed_marker_is_refused_naming_the_file(tmp_path):
    repo = _documents(
        tmp_path,
        {
            "README.md": "```sh\ntrue\n```\n",
            "docs/arena.md": "# Arena\n\n<!-- readme-walk: skipp (typo) -->\n```sh\ntrue\n```\n",
        },
    )
    with pytest.raises(ReadmeError, match=r"^docs/arena\.md:3: unknown readme-walk marker"):
        parse_documents(repo)


def test_a_server_stops_at_the_end_of_its_document_even_under_a_same_named_section(tmp_path):
    # The README ends serving under `## Serving`; docs/later.md opens a `## Serving` of its own,
    # whose block must run with the README's server stopped.
    repo = _documents(
        tmp_path / "repo",
        {
            "README.md": _SYNTHETIC.split("## Later")[0],
            "docs/later.md": "# Later\n\n## Serving\n\n```sh\necho in the docs\n```\n",
        },
    )
    said: list[str] = []
    walk = Walk(
        source=REPO,
        root=tmp_path / "walk",
        env=newcomer_env(),
        readme_url="URL",
        say=said.append,
        python=sys.executable,
        serve_timeout=60,
        stop_timeout=30,
    )
    outcomes = walk.run(parse_documents(repo))
    assert [(o.block.source, o.status) for o in outcomes] == [
        ("README.md", "served"),
        ("README.md", "ran"),
        ("README.md", "skipped"),
        ("docs/later.md", "ran"),
    ]
    stopped = said.index(next(s for s in said if s.startswith("readme-walk: stopped README.md:")))
    assert stopped < said.index(next(s for s in said if s.startswith("readme-walk: ok docs/later.md:5")))
    assert not readme_walk._answers(outcomes[0].output + "/health")


_SYNTHETIC = """# A README

## Serving

<!-- readme-walk: background -->
```sh
python3 - <<'EOF'
import http.server
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"fine")
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Health)
print(f"serving at http://127.0.0.1:{server.server_address[1]}", flush=True)
try:
    server.serve_forever()
except KeyboardInterrupt:
    pass
EOF
```

```python
import urllib.request
print("client got", urllib.request.urlopen("URL/health").read().decode())
```

<!-- readme-walk: skip (it would fail) -->
```sh
exit 1
```

## Later

```sh
echo after the server stopped
```
"""


def test_a_background_server_serves_the_next_blocks_then_stops_and_skips_are_named(tmp_path):
    said: list[str] = []
    walk = Walk(
        source=REPO,
        root=tmp_path / "walk",
        env=newcomer_env(),
        readme_url="URL",
        say=said.append,
        python=sys.executable,
        serve_timeout=60,
        stop_timeout=30,
    )
    outcomes = walk.run(parse(_SYNTHETIC))
    assert [o.status for o in outcomes] == ["served", "ran", "skipped", "ran"]
    assert "client got fine" in outcomes[1].output
    line = _SYNTHETIC.splitlines().index("exit 1")  # the fence is the line before it (1-based: this)
    assert f"readme-walk: SKIPPED README.md:{line} (Serving) `exit 1`: it would fail" in said
    stopped = said.index(next(s for s in said if s.startswith("readme-walk: stopped")))
    assert stopped < said.index(next(s for s in said if "echo after" in s))


@pytest.mark.parametrize(
    "broken, error",
    [
        ("```python\nraise SystemExit('the client failed')\n```\n", "the client failed"),
        ("<!-- readme-walk: background -->\n```sh\necho no url here\n```\n", "exited 0 before it served"),
    ],
)
def test_a_failing_client_or_a_server_that_never_serves_fails_the_walk(tmp_path, broken, error):
    with pytest.raises(WalkFailed, match=r"README.md:\d+ \(Broken\)") as failed:
        Walk(
            source=REPO,
            root=tmp_path / "walk",
            env=newcomer_env(),
            readme_url="URL",
            say=lambda _: None,
            python=sys.executable,
            serve_timeout=30,
        ).run(parse(f"## Broken\n\n{broken}"))
    assert error in str(failed.value)


@pytest.mark.slow
def test_a_server_that_ignores_ctrl_c_fails_the_walk_and_is_killed(tmp_path):
    stubborn = _SYNTHETIC.replace("python3 - <<'EOF'", "trap '' INT\npython3 - <<'EOF'", 1)
    walk = Walk(
        source=REPO,
        root=tmp_path / "walk",
        env=newcomer_env(),
        readme_url="URL",
        say=lambda _: None,
        python=sys.executable,
        serve_timeout=60,
        stop_timeout=5,
    )
    with pytest.raises(WalkFailed, match=r"README.md:\d+ \(Serving\) .* did not stop within 5 s of Ctrl-C"):
        walk.run(parse(stubborn))
    url = re.search(r"http://127\.0\.0\.1:\d+", (walk.logs / "01-line6.log").read_text())[0]
    assert not readme_walk._answers(url + "/health")


@pytest.mark.parametrize(
    "text, error",
    [
        ("<!-- readme-walk: skipp (typo) -->\n```sh\ntrue\n```\n", "unknown readme-walk marker"),
        ("<!-- readme-walk: skip () -->\n```sh\ntrue\n```\n", "unknown readme-walk marker"),
        ("<!-- readme-walk: skip (x) -->\n\nsome text\n```sh\ntrue\n```\n", "just before a block"),
        ("<!-- readme-walk: skip (x) -->\n```\nplain text\n```\n", "never runs"),
        ("<!-- readme-walk: background -->\n```python\npass\n```\n", "only a shell block"),
        ("```sh\ntrue\n", "never closed"),
    ],
)
def test_misplaced_or_unknown_markers_are_refused(text, error):
    with pytest.raises(ReadmeError, match=error):
        parse(text)
