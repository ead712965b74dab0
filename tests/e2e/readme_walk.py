"""The README walker: the runnable blocks of README.md, then of each docs/*.md, parsed with
their markers, run in order in fresh clones. Its conventions (the markers, how each kind of
block runs) are described at the top of tests/e2e/test_readme_walk.py, which walks the real
documents with it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

MARKER = re.compile(r"<!--\s*readme-walk:\s*(?P<directive>.*?)\s*-->")
FENCE = re.compile(r"```(?P<info>[\w+-]*)\s*")
LANGUAGES = {"sh": "shell", "bash": "shell", "shell": "shell", "python": "python"}
SKIP = re.compile(r"skip\s*\((?P<reason>[^()]*\S[^()]*)\)")
CHECKOUT = re.compile(r"checkout\s+(?P<name>[a-z][a-z0-9-]*)")
FIRST_CHECKOUT = "newcomer"
README = "README.md"
DOCS = "docs"  # every docs/*.md is walked after the README, in name order
LOOPBACK_URL = re.compile(r"http://127\.0\.0\.1:\d+")


class ReadmeError(Exception):
    """A document's markers are malformed: the walk would not do what they say."""


class WalkFailed(AssertionError):
    """A block failed: names the block, its checkout and the end of its output."""


@dataclass(frozen=True)
class Block:
    """One fenced block the walk runs (or skips, saying why)."""

    line: int  # the line of its opening fence
    section: str  # the `## ` heading it is under
    language: str  # "shell" or "python"
    text: str
    checkout: str
    skip: str | None = None  # the reason, when marked `skip (...)`
    background: bool = False
    source: str = README  # the document, relative to the repository: README.md, docs/NAME.md

    @property
    def name(self) -> str:
        command = next((l.strip() for l in self.text.splitlines() if l.strip() and not l.strip().startswith("#")), "")
        shown = command if len(command) <= 72 else command[:69] + "..."
        return f"{self.source}:{self.line} ({self.section}) `{shown}`"


def documents(repo: Path) -> list[Path]:
    """The documents the walk reads, in walking order: README.md, then docs/*.md by name."""
    return [repo / README, *sorted((repo / DOCS).glob("*.md"))]


def parse_documents(repo: Path) -> list[Block]:
    """Every runnable block of every document, in walking order. Each document starts in the
    first checkout (a reader opens it in the clone they set up), and a background server
    never outlives its document (Walk.run stops it at the end of its section)."""
    blocks: list[Block] = []
    for path in documents(repo):
        blocks += parse(path.read_text(), source=path.relative_to(repo).as_posix())
    return blocks


def parse(text: str, source: str = README) -> list[Block]:
    """Every sh/bash/shell/python block of the document `source`, in order, with what its
    markers say."""
    blocks: list[Block] = []
    lines = text.splitlines()
    section, checkout = "(top)", FIRST_CHECKOUT
    pending: list[tuple[int, str]] = []  # markers waiting for their block: (line, directive)
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        marker = MARKER.fullmatch(stripped)
        fence = FENCE.fullmatch(stripped)
        if marker:
            pending.append((i + 1, marker["directive"]))
            i += 1
            continue
        if fence is None:
            if pending:
                raise ReadmeError(
                    f"{source}:{pending[0][0]}: a readme-walk marker must be on the line "
                    f"just before a block's opening fence (line {i + 1} is not one)"
                )
            if lines[i].startswith("## "):
                section = lines[i][3:].strip()
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
        if end is None:
            raise ReadmeError(f"{source}:{i + 1}: the block opened here is never closed")
        language = LANGUAGES.get(fence["info"])
        skip, background = None, False
        for line_no, directive in pending:
            if language is None:
                raise ReadmeError(
                    f"{source}:{line_no}: marker before a `{fence['info'] or 'plain'}` block, which the walk never runs"
                )
            if m := SKIP.fullmatch(directive):
                skip = m["reason"]
            elif directive == "background":
                background = True
            elif m := CHECKOUT.fullmatch(directive):
                checkout = m["name"]
            else:
                raise ReadmeError(
                    f"{source}:{line_no}: unknown readme-walk marker {directive!r} "
                    "(known: skip (REASON), background, checkout NAME)"
                )
        pending = []
        if background and language != "shell":
            raise ReadmeError(f"{source}:{i + 1}: only a shell block can run in the background")
        if language is not None:
            blocks.append(
                Block(
                    i + 1, section, language, "\n".join(lines[i + 1 : end]) + "\n", checkout, skip, background, source
                )
            )
        i = end + 1
    if pending:
        raise ReadmeError(f"{source}:{pending[0][0]}: a readme-walk marker with no block after it")
    return blocks


@dataclass(frozen=True)
class Outcome:
    block: Block
    status: str  # "ran", "skipped" or "served"
    seconds: float
    output: str


@dataclass
class _Server:
    block: Block
    process: subprocess.Popen
    log: Path
    url: str


@dataclass
class Walk:
    """Runs parsed blocks in order, each in its checkout (a fresh clone of `source`'s HEAD,
    through a bare origin of the walk's own that `git push` reaches), under `root`.

    `env` is the newcomer's environment; `seed(checkout)` may prime a new clone's caches;
    `readme_url` is the URL the README's client uses, replaced in every block by the URL a
    background server printed while it runs; `python` (relative to the checkout) runs the
    python blocks; `say` reports each block (skipped ones with their reason)."""

    source: Path
    root: Path
    env: Mapping[str, str]
    readme_url: str
    seed: Callable[[Path], None] | None = None
    python: str = ".nox/serve/bin/python"
    timeout: float = 1800.0  # one block: a release under load takes minutes, not half an hour
    serve_timeout: float = 900.0  # a background block's first URL answering /health
    stop_timeout: float = 180.0  # Ctrl-C to exit: removing a container takes seconds
    say: Callable[[str], None] = print
    checkouts: dict[str, Path] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.origin = self.root / "origin.git"
        self.logs = self.root / "logs"
        self.logs.mkdir(exist_ok=True)
        # The checkouts share one .nox: a session's virtualenv is made once per walk.
        (self.root / "nox").mkdir(exist_ok=True)
        subprocess.run(["git", "clone", "-q", "--bare", str(self.source), str(self.origin)], check=True)

    def checkout(self, name: str) -> Path:
        if name not in self.checkouts:
            path = self.root / name
            subprocess.run(["git", "clone", "-q", str(self.origin), str(path)], check=True)
            (path / ".nox").symlink_to(self.root / "nox")
            # .gitignore's `.nox/` matches the directory a newcomer has, not this link to it.
            with open(path / ".git" / "info" / "exclude", "a") as exclude:
                exclude.write("/.nox\n")
            if self.seed is not None:
                self.seed(path)
            self.checkouts[name] = path
        return self.checkouts[name]

    def run(self, blocks: list[Block]) -> list[Outcome]:
        outcomes: list[Outcome] = []
        server: _Server | None = None
        try:
            for n, block in enumerate(blocks, 1):
                if server is not None and (block.source, block.section) != (server.block.source, server.block.section):
                    self._stop(server)
                    server = None
                if block.skip is not None:
                    self.say(f"readme-walk: SKIPPED {block.name}: {block.skip}")
                    outcomes.append(Outcome(block, "skipped", 0.0, ""))
                    continue
                cwd = self.checkout(block.checkout)
                text = block.text.replace(self.readme_url, server.url) if server else block.text
                log = self.logs / f"{n:02d}-line{block.line}.log"
                started = time.monotonic()
                if block.background:
                    server = self._serve(block, text, cwd, log)
                    outcomes.append(Outcome(block, "served", time.monotonic() - started, server.url))
                    self.say(f"readme-walk: serving {block.name} at {server.url} ({time.monotonic() - started:.0f} s)")
                    continue
                self._run(block, text, cwd, log)
                took = time.monotonic() - started
                outcomes.append(Outcome(block, "ran", took, log.read_text(errors="replace")))
                self.say(f"readme-walk: ok {block.name} in {block.checkout} ({took:.0f} s)")
        finally:
            if server is not None:
                self._stop(server)
        return outcomes

    # ------------------------------------------------------------ one block

    def _run(self, block: Block, text: str, cwd: Path, log: Path) -> None:
        if block.language == "python":
            argv, stdin = [str(cwd / self.python), "-"], text.encode()
        else:
            argv, stdin = ["bash", "-e", "-o", "pipefail", "-c", text], None
        with open(log, "wb") as out:
            # A session of its own: a timeout stops the block's whole process group, not only bash.
            proc = _start(argv, cwd=cwd, env=self.env, out=out, stdin=stdin is not None)
            try:
                proc.communicate(stdin, timeout=self.timeout)
            except subprocess.TimeoutExpired:
                _stop_group(proc, grace=60)
                raise self._failed(block, log, f"did not finish within {self.timeout:.0f} s") from None
        if proc.returncode != 0:
            raise self._failed(block, log, f"exited {proc.returncode}")

    def _serve(self, block: Block, text: str, cwd: Path, log: Path) -> _Server:
        with open(log, "wb") as out:
            proc = _start(["bash", "-e", "-o", "pipefail", "-c", text], cwd=cwd, env=self.env, out=out)
        deadline = time.monotonic() + self.serve_timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise self._failed(block, log, f"exited {proc.returncode} before it served")
            for url in dict.fromkeys(LOOPBACK_URL.findall(log.read_text(errors="replace"))):
                if _answers(url + "/health"):
                    return _Server(block, proc, log, url)
            time.sleep(1)
        _stop_group(proc, grace=self.stop_timeout)
        raise self._failed(block, log, f"printed no URL that answers /health within {self.serve_timeout:.0f} s")

    def _stop(self, server: _Server) -> None:
        """Ctrl-C, as a terminal sends it: SIGINT to the block's process group, which must then
        be gone (every process of it: the pipeline removes its container on the way out)."""
        _signal_group(server.process, signal.SIGINT)
        if not _wait_group(server.process, self.stop_timeout):
            _stop_group(server.process, grace=10)
            raise self._failed(server.block, server.log, f"did not stop within {self.stop_timeout:.0f} s of Ctrl-C")
        if _answers(server.url + "/health"):
            raise self._failed(server.block, server.log, f"{server.url} still answers after Ctrl-C")
        self.say(f"readme-walk: stopped {server.block.name} with Ctrl-C")

    def _failed(self, block: Block, log: Path, what: str) -> WalkFailed:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-60:])
        return WalkFailed(
            f"{block.name} {what} (checkout {block.checkout}: {self.checkouts.get(block.checkout)}; "
            f"whole output: {log}); its last lines:\n{tail}"
        )


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            return resp.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


def _start(argv: list[str], *, cwd: Path, env: Mapping[str, str], out, stdin: bool = False) -> subprocess.Popen:
    """A block's process in a session (and process group) of its own, so that Ctrl-C and a
    timeout reach everything it started; with SIGINT handled as in a terminal even when the
    walk itself runs with SIGINT ignored (started in the background by a shell)."""
    return subprocess.Popen(
        argv,
        cwd=cwd,
        env=dict(env),
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _signal_group(proc: subprocess.Popen, sig: int) -> bool:
    """Send `sig` to the block's process group; False when no process of it is left."""
    try:
        os.killpg(proc.pid, sig)
        return True
    except ProcessLookupError:
        return False


def _wait_group(proc: subprocess.Popen, timeout: float) -> bool:
    """Wait until every process of the group has exited (the leader reaped); False on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc.poll()
        if not _signal_group(proc, 0):
            return True
        time.sleep(0.5)
    return False


def _stop_group(proc: subprocess.Popen, *, grace: float) -> None:
    """Ctrl-C to the process group (what the pipeline cleans up after), then SIGTERM, then
    SIGKILL to whatever is left of it."""
    for sig, wait in ((signal.SIGINT, grace), (signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        if not _signal_group(proc, sig) or _wait_group(proc, wait):
            break
    proc.wait()
