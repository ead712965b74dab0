"""The repair checks of an external task image: the seed release's twelve, then this
project's own (docs/spec/mimo.md, "The 12 repair checks per image";
docs/spec/verification.md, "External (repair) tasks").

They run against the started, unchanged image over the OpenEnv WebSocket protocol, as a
trainer would: one session, the task's own id. Ids are `<task_id>/<check>`: first the
seed's twelve by the seed's names, in the seed's order (SEED_CHECKS), then the project's
extras under their own names (EXTRA_CHECKS). What each asserts is what docs/spec/mimo.md
says the seed's checker asserted; the protocol it relies on (port 8000, `task_id` at reset,
`/workspace/repo`, UID 2000, the root-only `/opt/arena`) is docs/spec/mimo.md's
description of the MiMo adapter, read from the seed's public sources.

The reference repair is a script, sent as ONE shell action exactly as the seed did:
`python3 - <<'ARENA_REPAIR'\\n<script>\\nARENA_REPAIR` (`ReferenceRepair.action`).
"""

from __future__ import annotations

import hashlib
import re
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.checks import conformance
from pipeline.checks import shell as cmd
from pipeline.checks._record import Recorder
from pipeline.checks.client import ServerError, Session, http_get
from pipeline.checks.image_checks import record_one_session, schema_check
from pipeline.checks.results import CheckResult
from pipeline.errors import ConfigError

SEED_CHECKS = (
    "health_within_120_seconds",
    "openenv_endpoint_validation",
    "reset_task_identity",
    "unprivileged_agent_and_protected_verifier",
    "no_future_git_history",
    "unsolved_terminal_reward_zero",
    "terminal_reward_is_stable",
    "reset_removes_previous_edits",
    "verifier_git_hooks_are_unprivileged",
    "reference_repair_applied_through_action",
    "reference_terminal_reward_one",
    "reset_restores_unsolved_task",
)
EXTRA_CHECKS = ("schema", "metadata", "other-task-refused", "one-session")
# Every check, in the order of the results.
REPAIR_CHECKS = SEED_CHECKS + EXTRA_CHECKS

# The MiMo adapter's protocol (docs/spec/mimo.md, "The protocol of the repair images").
PORT = 8000
WORKSPACE = "/workspace/repo"
AGENT_UID = "2000"
INSTANCE_FILE = "/opt/arena/instance.json"
SERVER_FILE = "/opt/arena/server.py"
MAX_COMMAND_CHARS = 16_000
HEALTH_WITHIN_S = 120.0
HEREDOC = "ARENA_REPAIR"
# The grader's git must not run a hook the agent planted; the hook writes here (outside
# the workspace, which the next reset deletes; /tmp is writable by every UID).
_HOOK_FILE = "/tmp/arena-fsmonitor-{token}"


@dataclass(frozen=True)
class ReferenceRepair:
    """A task's reference repair: the bytes of a Python script that repairs the task's
    repository (run with /workspace/repo as its working directory), and where it came from.

    The release makes one from the vendored file of the task's `reference` source
    (`read`); `repair-checks --reference FILE` from any file. It is refused here when it
    cannot travel as the seed's one shell action: not UTF-8 text (an action is a JSON
    string), a line equal to the heredoc's end marker, or an action longer than a
    command may be.
    """

    script: bytes
    source: str

    def __post_init__(self) -> None:
        try:
            text = self.script.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"reference repair {self.source} is not UTF-8 text",
                actual=str(exc),
                hint="a shell action is a JSON string",
            ) from None
        if HEREDOC in text.splitlines():
            raise ConfigError(
                f"reference repair {self.source} has a line `{HEREDOC}`",
                hint="it would end the heredoc that carries the script",
            )
        if len(self.action()) > MAX_COMMAND_CHARS:
            raise ConfigError(
                f"reference repair {self.source} does not fit in one shell action",
                expected=f"at most {MAX_COMMAND_CHARS} characters",
                actual=f"{len(self.action())} characters",
            )

    @classmethod
    def read(cls, path: Path | str, source: str = "") -> ReferenceRepair:
        """The script at `path`; `source` says where it came from (default: the path)."""
        path = Path(path)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ConfigError(
                f"cannot read the reference repair {path}: {exc.strerror}", hint="pass the script file with --reference"
            ) from None
        return cls(data, source or str(path))

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.script).hexdigest()

    def action(self) -> str:
        """The one shell action that runs the script: exactly the seed's."""
        return f"python3 - <<'{HEREDOC}'\n{self.script.decode('utf-8')}\n{HEREDOC}"


def another_task_id(task_id: str) -> str:
    """An id shaped like `task_id` but naming another task (`...-000667` for `...-000666`)."""
    m = re.fullmatch(r"(.*?)(\d+)", task_id)
    if not m:
        return task_id + "-other"
    digits = m.group(2)
    return m.group(1) + str((int(digits) + 1) % 10 ** len(digits)).zfill(len(digits))


def _access_probe() -> str:
    # Only PermissionError passes: a wrong path (ENOENT) would prove nothing. "r+b" opens
    # for writing without creating or truncating, so an allowed probe changes nothing.
    program = (
        "import sys\n"
        "def probe(path, mode):\n"
        " try:\n  open(path, mode).close()\n  return 'ALLOWED'\n"
        " except PermissionError:\n  return 'DENIED'\n"
        " except OSError as e:\n  return 'ERROR ' + str(e.strerror)\n"
        "print('read', probe(sys.argv[1], 'rb'))\n"
        "print('write', probe(sys.argv[2], 'r+b'))\n"
    )
    return f"id -u; python3 -c {shlex.quote(program)} {INSTANCE_FILE} {SERVER_FILE}"


def _done_with(reply, reward: float) -> bool:
    return reply.done and reply.reward is not None and float(reply.reward) == reward


def wait_healthy(url: str, since: float, limit_s: float) -> tuple[float | None, Any]:
    """Poll `GET /health` until it answers 200 or `limit_s` after `since` (monotonic).
    (seconds after `since` it first answered 200, or None; the last answer)."""
    while True:
        status, body = http_get(url, "/health", timeout=2.0)
        now = time.monotonic()
        last: Any = {"status": status, "body": body}
        if status == 200:
            return now - since, last
        if now - since >= limit_s:
            return None, last
        time.sleep(0.25)


class _Run:
    """One check run: one session on one started image."""

    def __init__(self, session: Session, task_id: str, rec: Recorder, after_grading: Callable[[], None]) -> None:
        self.session, self.task_id, self.rec = session, task_id, rec
        self.after_grading = after_grading

    def reset(self):
        return self.session.reset(self.task_id)

    def finish(self):
        reply = self.session.finish()
        self.after_grading()
        return reply

    def first_episode(self) -> None:
        """reset_task_identity ... terminal_reward_is_stable: one episode."""
        rec = self.rec
        first = self.reset()
        rec.add(
            "reset_task_identity",
            first.task_id == self.task_id and not first.done,
            observed={"task_id": first.task_id, "done": first.done},
            expected={"task_id": self.task_id, "done": False},
        )
        out = self.session.shell(_access_probe()).output
        lines = [line.strip() for line in out.splitlines() if line.strip()]
        want = [AGENT_UID, "read DENIED", "write DENIED"]
        rec.add(
            "unprivileged_agent_and_protected_verifier",
            lines == want,
            observed=lines or out[-300:],
            expected={"id -u": AGENT_UID, f"read {INSTANCE_FILE}": "DENIED", f"write {SERVER_FILE}": "DENIED"},
        )
        # `&& echo` proves git ran and succeeded: an empty output alone would also be
        # what a missing repository's silenced error looks like.
        token = f"rev-list-ok-{cmd.token()}"
        out = self.session.shell(f"git rev-list --all --not HEAD && echo {token}").output
        leaked = out.strip().splitlines()
        rec.add(
            "no_future_git_history",
            leaked == [token],
            observed={"output": out[-600:]},
            expected=f"`git rev-list --all --not HEAD` succeeds and prints nothing ({token})",
        )
        graded = self.finish()
        rec.add(
            "unsolved_terminal_reward_zero",
            _done_with(graded, 0.0),
            observed=graded.brief(),
            expected={"reward": 0.0, "done": True},
        )
        again = self.finish()
        rec.add(
            "terminal_reward_is_stable",
            graded.done and again.payload == graded.payload,
            observed={"first": graded.payload, "second": again.payload},
            expected="a second finish returns the first terminal payload unchanged",
        )

    def edits_episode(self) -> None:
        """reset_removes_previous_edits: a marker file written, reset, gone."""
        marker = f"arena-marker-{cmd.token()}"
        self.reset()
        wrote = self.session.shell(f"echo edit > {marker} && [ -f {marker} ] && echo wrote-{marker}").output
        self.reset()
        seen = self.session.shell(
            f"if [ -e {marker} ]; then echo present-{marker}; "
            f"else echo absent-{marker}; fi; [ -d .git ] && echo repo-{marker}"
        ).output
        made, gone, repo = (f"wrote-{marker}" in wrote, f"absent-{marker}" in seen, f"repo-{marker}" in seen)
        self.rec.add(
            "reset_removes_previous_edits",
            made and gone and repo,
            observed={
                "marker_written": made,
                "marker_gone_after_reset": gone,
                "repository_after_reset": repo,
                "output": seen[-300:],
            },
            expected={"marker_written": True, "marker_gone_after_reset": True, "repository_after_reset": True},
        )

    def hook_episode(self) -> None:
        """verifier_git_hooks_are_unprivileged: an fsmonitor hook planted, finish, its file
        read in the next episode (a finished episode runs no more actions)."""
        token = cmd.token()
        hook_file = _HOOK_FILE.format(token=token)
        # `; true`: git appends the hook's arguments to the command.
        hook = f"id -u > {hook_file}; true"
        self.reset()
        planted = self.session.shell(
            f"rm -f {hook_file} && git config core.fsmonitor {shlex.quote(hook)} && "
            f"[ ! -e {hook_file} ] && echo planted-{token}"
        ).output
        self.finish()
        self.reset()
        seen = self.session.shell(
            f'if [ -e {hook_file} ]; then echo "hook-uid=$(cat {hook_file})"; '
            f"else echo hook-not-run; fi; echo end-{token}"
        ).output
        m = re.search(r"hook-uid=(\S*)", seen)
        ran_as = m.group(1) if m else None
        ok = f"planted-{token}" in planted and ran_as == AGENT_UID
        self.rec.add(
            "verifier_git_hooks_are_unprivileged",
            ok,
            observed={
                "hook_planted": f"planted-{token}" in planted,
                "hook_ran_as_uid": ran_as if m else ("not run" if "hook-not-run" in seen else None),
                "output": seen[-200:],
            },
            expected={"hook_planted": True, "hook_ran_as_uid": AGENT_UID},
            detail="" if ok else f"git config core.fsmonitor {hook!r}, then finish",
        )

    def reference_episode(self, reference: ReferenceRepair | str) -> None:
        """reference_repair_applied_through_action, reference_terminal_reward_one."""
        names = ("reference_repair_applied_through_action", "reference_terminal_reward_one")
        if not isinstance(reference, ReferenceRepair):
            for name in names:
                self.rec.not_applicable(name, reference)
            return
        self.reset()
        ran = self.session.shell(reference.action())
        self.rec.add(
            names[0],
            ran.exit_code == 0,
            observed=ran.brief(),
            expected={"exit_code": 0},
            detail=f"{reference.source} (sha256 {reference.sha256}) as one shell action",
        )
        graded = self.finish()
        self.rec.add(names[1], _done_with(graded, 1.0), observed=graded.brief(), expected={"reward": 1.0, "done": True})

    def restored_episode(self) -> None:
        """reset_restores_unsolved_task: after the repaired episode, reset, finish -> 0."""
        self.reset()
        graded = self.finish()
        self.rec.add(
            "reset_restores_unsolved_task",
            _done_with(graded, 0.0),
            observed=graded.brief(),
            expected={"reward": 0.0, "done": True},
        )

    def other_task(self) -> None:
        """other-task-refused: a reset naming another task is an error reply; the session lives on."""
        other = another_task_id(self.task_id)
        try:
            reply = self.session.reset(other)
            observed: Any = {"accepted": True, "reply": reply.brief(), "task_id": reply.task_id}
            refused = False
        except ServerError as exc:
            refused = exc.code != "CONNECTION_CLOSED"
            observed = {"accepted": False, "error": str(exc)[-300:], "code": exc.code}
        self.rec.add(
            "other-task-refused",
            refused,
            observed=observed,
            expected=f"reset with task_id {other!r} refused with an error reply",
        )

    def one_session(self, url: str, timeout_s: float) -> None:
        record_one_session(
            self.rec,
            Session(url, message_timeout_s=timeout_s),
            lambda second: second.reset(self.task_id),
            self.session,
            self.reset,
        )


def _metadata_check(url: str, rec: Recorder) -> None:
    status, body = http_get(url, "/metadata")
    named = (
        status == 200 and isinstance(body, dict) and isinstance(body.get("name"), str) and bool(body["name"].strip())
    )
    rec.add(
        "metadata",
        named,
        observed={"status": status, "body": body},
        expected="200 with an EnvironmentMetadata whose name is not empty",
    )


_STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "first",
        (
            "reset_task_identity",
            "unprivileged_agent_and_protected_verifier",
            "no_future_git_history",
            "unsolved_terminal_reward_zero",
            "terminal_reward_is_stable",
        ),
    ),
    ("edits", ("reset_removes_previous_edits",)),
    ("hook", ("verifier_git_hooks_are_unprivileged",)),
    ("reference", ("reference_repair_applied_through_action", "reference_terminal_reward_one")),
    ("restored", ("reset_restores_unsolved_task",)),
    ("other", ("other-task-refused",)),
    ("one-session", ("one-session",)),
)


def _fail_missing(rec: Recorder, names: tuple[str, ...], exc: ServerError) -> None:
    done = {check_name(r) for r in rec.results}
    for name in names:
        if name not in done:
            rec.error(name, exc)


NO_REFERENCE = "no reference repair script was given"


def run_repair_checks(
    url: str,
    task_id: str,
    reference: ReferenceRepair | str = NO_REFERENCE,
    *,
    started_at: float | None = None,
    start_timeout_s: float = 180.0,
    timeout_s: float = 180.0,
    after_grading: Callable[[], None] = lambda: None,
) -> list[CheckResult]:
    """Every repair check against the server at `url`; results in REPAIR_CHECKS order.

    `started_at` (time.monotonic()) is when the container was started: /health must
    answer 200 within 120 s of it (default: now). The other checks wait for the server
    up to `start_timeout_s` after it. `timeout_s` bounds each call, `after_grading` runs
    after every finish (the release measures the writable layer there). `reference` is
    the task's reference repair, or why it has none: then the two reference checks are
    "not applicable" for that reason, never passed. A stage the
    server broke (an error reply, a dropped connection) fails the checks it owed, with
    the server's message, so every id is always present exactly once.
    """
    since = time.monotonic() if started_at is None else started_at
    rec = Recorder(task_id)
    took, last = wait_healthy(url, since, HEALTH_WITHIN_S)
    rec.add(
        "health_within_120_seconds",
        took is not None,
        observed={"seconds": None if took is None else round(took, 1), "last": last},
        expected={"status": 200, "within_s": HEALTH_WITHIN_S},
        detail="" if took is None else f"healthy {took:.1f} s after start",
    )
    if took is None:
        took, last = wait_healthy(url, since, start_timeout_s)
    if took is None:
        _fail_missing(
            rec,
            REPAIR_CHECKS,
            ServerError(
                f"the server never answered GET /health with 200 within {start_timeout_s:g} s of start: {last}",
                "NOT_HEALTHY",
            ),
        )
        return _ordered(rec)
    conformance.record_validation(rec, "openenv_endpoint_validation", url)
    schema_check(url, rec)
    _metadata_check(url, rec)
    try:
        with Session(url, message_timeout_s=timeout_s) as session:
            run = _Run(session, task_id, rec, after_grading)
            steps: dict[str, Callable[[], None]] = {
                "first": run.first_episode,
                "edits": run.edits_episode,
                "hook": run.hook_episode,
                "reference": lambda: run.reference_episode(reference),
                "restored": run.restored_episode,
                "other": run.other_task,
                "one-session": lambda: run.one_session(url, timeout_s),
            }
            for stage, owed in _STAGES:
                try:
                    steps[stage]()
                except ServerError as exc:
                    _fail_missing(rec, owed, exc)
    except (ServerError, ConnectionError, OSError, RuntimeError) as exc:  # no session at all
        _fail_missing(
            rec, REPAIR_CHECKS, exc if isinstance(exc, ServerError) else ServerError(f"{type(exc).__name__}: {exc}")
        )
    return _ordered(rec)


def _ordered(rec: Recorder) -> list[CheckResult]:
    order = {name: i for i, name in enumerate(REPAIR_CHECKS)}
    return sorted(rec.results, key=lambda r: order[check_name(r)])


def check_name(result: CheckResult) -> str:
    """`reset_task_identity` of `format-code-task-000666/reset_task_identity`."""
    return result.id.rsplit("/", 1)[1]
