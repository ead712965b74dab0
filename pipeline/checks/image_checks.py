"""The once-per-image checks of docs/spec/verification.md (ids `image/<check>`)."""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Callable, Iterator
from typing import Any

from pipeline.checks import conformance, schema, solvers
from pipeline.checks import shell as cmd
from pipeline.checks._record import Recorder
from pipeline.checks.answers import OVERSIZED_BYTES, TOO_DEEP, nested, with_component
from pipeline.checks.case_checks import solve_in_episode
from pipeline.checks.client import ServerError, Session, http_get
from pipeline.checks.isolation_checks import ISOLATION_CHECKS, isolation_checks
from pipeline.checks.limit_checks import LIMIT_CHECKS, limit_checks
from pipeline.checks.results import CheckResult
from pipeline.checks.target import Target
from pipeline.curriculum import Case

SHELL_TIMEOUT_S = 60
MAX_OUTPUT_BYTES = 12_000
EPISODE_ACTIONS = 16
# Slack on top of the 60 s shell timeout for killing the group and replying.
TIMEOUT_SLACK_S = 20
_TIMEOUT_WORDS = re.compile(r"time[ds]?[ -]?out|timeout|killed", re.I)
CAPACITY_CODE = "CAPACITY_REACHED"
# What every terminal reply may say without giving a reason: the episode is over and
# its reward. A stated reason is what is left, and it must speak of the answer.
_BOILERPLATE = re.compile(
    r"episode( is)? (finished|over|done|ended)|reward\s*[:=]?\s*[-+0-9.e]*|"
    r"\[action \d+ of \d+[^\]]*\]|done",
    re.I,
)


def states_reason(output: str) -> bool:
    """Whether a terminal reply says why it scored what it did (beyond "episode finished,
    reward 0"): at least three words about the answer."""
    rest = _BOILERPLATE.sub(" ", output)
    return bool(re.search(r"answer", rest, re.I)) and len(re.findall(r"[A-Za-z]{2,}", rest)) >= 3


def http_checks(target: Target, rec: Recorder) -> dict[str, Any]:
    """health, metadata, schema; returns the served schema (for the release records)."""
    status, body = http_get(target.url, "/health")
    rec.add(
        "health",
        status == 200 and isinstance(body, dict) and body.get("status") == "healthy",
        observed={"status": status, "body": body},
        expected={"status": 200, "body": {"status": "healthy"}},
    )
    status, body = http_get(target.url, "/metadata")
    rec.add(
        "metadata",
        status == 200 and isinstance(body, dict) and bool(body.get("name")),
        observed={"status": status, "body": body},
        expected="200 with a named EnvironmentMetadata",
    )
    isolation_mode_check(status, body, target, rec)
    return schema_check(target.url, rec)


ISOLATION_MODES = ("namespaces", "unprivileged")


def isolation_mode(body: Any) -> str | None:
    """The isolation mode a /metadata body reports (its top-level `isolation`), or None."""
    mode = body.get("isolation") if isinstance(body, dict) else None
    return mode if isinstance(mode, str) else None


def isolation_mode_check(status: int, body: Any, target: Target, rec: Recorder) -> None:
    """`isolation-mode`: /metadata names the server's isolation mode, one of the two, and one
    the runtime may give (`target.isolation`: podman allows user namespaces, so its server
    must run its episodes in them). The mode is the check's detail, pass or fail: the records
    name it per runtime (pipeline/checks/run.py)."""
    mode = isolation_mode(body) if status == 200 else None
    rec.add(
        "isolation-mode",
        mode in ISOLATION_MODES and mode in target.isolation,
        observed={
            "status": status,
            "isolation": body.get("isolation", "(absent)") if isinstance(body, dict) else "(no JSON object)",
        },
        expected={"status": 200, "isolation": " or ".join(target.isolation)},
        detail=f"isolation: {mode}" if mode in ISOLATION_MODES else "",
    )


def schema_check(url: str, rec: Recorder) -> dict[str, Any]:
    """`schema`: GET /schema serves the release schema, JSON-equal (the first difference
    named); returns the served action and observation parts ({} when none)."""
    status, body = http_get(url, "/schema")
    served = body if status == 200 and isinstance(body, dict) else {}
    got = schema.served_parts(served) if served else None
    difference = schema.first_difference(got, schema.declared()) if served else f"GET /schema answered {status}"
    rec.add(
        "schema",
        difference is None,
        observed={"status": status, "first_difference": difference},
        expected="the release schema (pipeline/checks/release_schema.json), JSON-equal",
    )
    return got or {}


def _healthy(target: Target) -> bool:
    status, body = http_get(target.url, "/health")
    return status == 200 and isinstance(body, dict) and body.get("status") == "healthy"


def _readable_probe(paths: list[str]) -> str:
    # "Permission denied" is required, not just any failure: a wrong path (ENOENT)
    # would otherwise pass without proving anything.
    quoted = " ".join(shlex.quote(p) for p in paths)
    return (
        'python3 -c \'import sys\nfor p in sys.argv[1:]:\n try:\n  open(p, "rb").read(1)\n'
        '  print("READABLE", p)\n except PermissionError:\n  print("DENIED", p)\n'
        ' except OSError as e:\n  print("ERROR", e.strerror, p)\' ' + quoted + "; echo probe-done"
    )


def _writable_probe(dirs: list[str], marker: str) -> str:
    quoted = " ".join(shlex.quote(d) for d in dirs)
    return (
        f'for d in {quoted}; do if touch "$d/.arena-write-{marker}" 2>/dev/null; then '
        f'echo "WRITABLE $d"; rm -f "$d/.arena-write-{marker}"; fi; done; echo probe-done'
    )


def protected_checks(session: Session, target: Target, case: Case, seed: int, rec: Recorder) -> None:
    """uid and protected-*: what UID 2000 must not be able to read or write."""
    try:
        session.reset(case.id, seed=seed)
        ids = session.shell("id -u; id -g")
        rec.add(
            "uid",
            ids.output.split() == ["2000", "2000"],
            observed=ids.output.strip(),
            expected="2000 2000 (id -u; id -g)",
        )
        reads = {
            "protected-server-code": [target.path(target.server_code)],
            "protected-task-module": [target.path(target.task_module)],
            "protected-proc-environ": [f"/proc/{target.server_pid}/environ"],
        }
        if target.vendored_file:
            reads["protected-vendored"] = [target.path(target.vendored_file)]
        if target.inherited:
            # What the base left under the app dir (the MiMo adapter, the task record and
            # its hidden tests, for the arena profile): a derived layer must not open it.
            reads["protected-inherited"] = list(target.inherited)
        for name, paths in reads.items():
            out = session.shell(_readable_probe(paths))
            verdicts = [
                line for line in out.output.splitlines() if line.split(" ", 1)[0] in ("READABLE", "DENIED", "ERROR")
            ]
            denied = len(verdicts) == len(paths) and all(v.startswith("DENIED ") for v in verdicts)
            # Which inherited files were read is part of the record, pass or fail: it comes
            # from the base, and a passing check must say what it covered.
            rec.add(
                name,
                denied,
                observed=verdicts or out.output[-200:],
                expected=[f"DENIED {p}" for p in paths],
                detail=f"{len(paths)} file(s) the base holds: {', '.join(paths)}"
                if name == "protected-inherited"
                else "",
            )
        dirs = [target.app_dir, "/", "/etc", "/usr", "/opt"]
        out = session.shell(_writable_probe(dirs, cmd.token()))
        opened = [line for line in out.output.splitlines() if line.startswith("WRITABLE ")]
        rec.add(
            "protected-write",
            "probe-done" in out.output and not opened,
            observed=opened or out.output[-200:],
            expected=f"no file can be created in {dirs}",
        )
    except ServerError as exc:
        rec.error("protected", exc)


def _malformed(correct: dict[str, Any]) -> list[tuple[str, str]]:
    """(check name, shell command that plants the bad answer.json)."""
    good = cmd.answer_bytes(correct)
    nan_answer = json.dumps(with_component(correct, float("nan")), sort_keys=True)
    # Padding is made in the container: the file is larger than one shell command may be.
    pad = f"head -c {OVERSIZED_BYTES - len(good)} /dev/zero | tr '\\0' ' ' >> answer.json"
    return [
        ("answer-missing", "rm -rf answer.json"),
        ("answer-empty", ": > answer.json"),
        ("answer-not-json", cmd.write_bytes("answer.json", good[:-1] + b",")),
        ("answer-array", cmd.write_bytes("answer.json", b"[" + good + b"]")),
        ("answer-bool", cmd.write_bytes("answer.json", cmd.answer_bytes(with_component(correct, True)))),
        ("answer-nan", cmd.write_bytes("answer.json", nan_answer.encode())),
        (
            "answer-too-deep",
            cmd.write_bytes("answer.json", cmd.answer_bytes(with_component(correct, nested(TOO_DEEP)))),
        ),
        ("answer-oversized", cmd.write_bytes("answer.json", good) + " && " + pad),
        ("answer-symlink", cmd.write_bytes("real-answer.json", good) + " && ln -s real-answer.json answer.json"),
        ("answer-fifo", "rm -f answer.json && mkfifo answer.json"),
        (
            "answer-directory",
            "rm -f answer.json && mkdir answer.json && " + cmd.write_bytes("answer.json/answer.json", good),
        ),
    ]


def answer_checks(
    session: Session, target: Target, case: Case, correct: dict[str, Any], seeds: Iterator[int], rec: Recorder
) -> None:
    """Each malformed answer scores 0.0 with a stated reason, no error, server healthy."""
    for name, plant in _malformed(correct):
        try:
            session.reset(case.id, seed=next(seeds))
            session.shell(plant)
            graded = session.finish()
            healthy = _healthy(target)
            reason = states_reason(graded.output)
            ok = graded.done and graded.reward is not None and float(graded.reward) == 0.0 and reason and healthy
            rec.add(
                name,
                ok,
                observed={**graded.brief(), "reason_stated": reason, "healthy_after": healthy},
                expected={
                    "reward": 0.0,
                    "done": True,
                    "reason_stated": "why, naming the answer",
                    "healthy_after": True,
                },
            )
        except ServerError as exc:
            rec.error(name, exc, expected={"reward": 0.0, "done": True})


def final_action_check(session: Session, case: Case, seed: int, rec: Recorder) -> None:
    """15 shell actions, then a 16th that writes the answer: executed, graded 1.0, done."""
    try:
        session.reset(case.id, seed=seed)
        early = []
        for i in range(EPISODE_ACTIONS - 1):
            step = session.shell(f"echo step-{i}")
            if step.done:
                early.append(i + 1)
        last = session.shell(solvers.shell_command(case.family))
        answered = cmd.last_json_line(last.output) is not None
        rec.add(
            "final-action",
            not early and answered and last.done and last.reward == 1.0,
            observed={"done_early_at": early, "16th": last.brief(), "executed": answered},
            expected={"done_early_at": [], "executed": True, "reward": 1.0, "done": True},
        )
    except ServerError as exc:
        rec.error("final-action", exc)


def isolation_check(session: Session, case: Case, seed: int, rec: Recorder) -> None:
    """A file and a detached background process left by one episode are gone after reset."""
    marker = f"iso-{cmd.token()}"
    try:
        session.reset(case.id, seed=seed)
        # Both witnesses must first be seen in place: a count of 0 processes or a listing
        # without the files proves nothing if they were never made or the listing failed.
        start = session.shell(
            f"touch left-{marker} /tmp/left-{marker} 2>/dev/null; "
            f"setsid python3 -c 'import time; time.sleep(600)' {marker} </dev/null >/dev/null 2>&1 & "
            f"sleep 0.3; echo files=$(ls left-{marker} /tmp/left-{marker} 2>/dev/null | wc -l) "
            f"processes=$({cmd.count_processes(marker)})"
        )
        made = re.search(r"files=(\d+) processes=(\d+)", start.output)
        started = made is not None and made.group(1) == "2" and int(made.group(2)) >= 1
        session.reset(case.id, seed=seed + 1)
        after = session.shell(f"ls -a . /tmp && echo listing-done; echo processes=$({cmd.count_processes(marker)})")
        listed = "listing-done" in after.output
        files_left = f"left-{marker}" in after.output
        procs = re.search(r"processes=(\d+)", after.output)
        procs_left = procs is None or procs.group(1) != "0"
        rec.add(
            "reset-isolation",
            started and listed and not files_left and not procs_left,
            observed={
                "made_before_reset": start.output[-200:] if not started else True,
                "listed_after": listed,
                "file_left": files_left,
                "process_left": procs_left,
                "listing": after.output[-300:],
            },
            expected={"made_before_reset": True, "listed_after": True, "file_left": False, "process_left": False},
        )
    except ServerError as exc:
        rec.error("reset-isolation", exc)


def output_cap_check(session: Session, case: Case, seed: int, rec: Recorder) -> None:
    """1 MB of output comes back as at most 12,000 bytes (the tail) and says so."""
    end = f"END-{cmd.token()}"
    try:
        session.reset(case.id, seed=seed)
        out = session.shell(f"python3 -c \"import sys; sys.stdout.write('Q' * 1000000 + '{end}\\n')\"")
        payload = out.output.count("Q")
        ok = (
            payload <= MAX_OUTPUT_BYTES
            and end in out.output
            and "truncat" in out.output.lower()
            and len(out.output) <= schema.MAX_OUTPUT_CHARS
        )
        rec.add(
            "output-cap",
            ok,
            observed={
                "payload_bytes": payload,
                "chars": len(out.output),
                "tail_kept": end in out.output,
                "says_truncated": "truncat" in out.output.lower(),
            },
            expected={"payload_bytes": f"<= {MAX_OUTPUT_BYTES}", "tail_kept": True, "says_truncated": True},
        )
    except ServerError as exc:
        rec.error("output-cap", exc)


def record_one_session(
    rec: Recorder,
    second: Session,
    reset_second: Callable[[Session], object],
    first: Session,
    reset_first: Callable[[], object],
) -> None:
    """`one-session`: while `first` is open, `second` (reset with `reset_second`) gets the
    capacity error, and `first` still works afterwards (reset with `reset_first`)."""
    code: str | None = None
    try:
        second.open()
        reset_second(second)
        code = "accepted"
    except ServerError as exc:
        code = exc.code or str(exc)
    except (ConnectionError, OSError) as exc:
        code = f"{type(exc).__name__}: {exc}"
    finally:
        try:
            second.close()
        except (ServerError, ConnectionError, OSError, RuntimeError):
            pass
    try:
        reset_first()
        alive = "first-alive" in first.shell("echo first-alive").output
    except ServerError:
        alive = False
    rec.add(
        "one-session",
        code == CAPACITY_CODE and alive,
        observed={"second_session": code, "first_still_works": alive},
        expected={"second_session": CAPACITY_CODE, "first_still_works": True},
    )


def one_session_check(session: Session, target: Target, case: Case, seed: int, rec: Recorder) -> None:
    """With this session open, a second concurrent session gets the capacity error."""
    record_one_session(
        rec,
        Session(target.url),
        lambda second: second.reset(case.id, seed=seed),
        session,
        lambda: session.reset(case.id, seed=seed + 1),
    )


def run_image_checks(
    session: Session, target: Target, case: Case, seeds: Iterator[int]
) -> tuple[list[CheckResult], dict[str, Any]]:
    """Every once-per-image check except `timeout`; (results, served schema)."""
    rec = Recorder("image")
    served = http_checks(target, rec)
    conformance.record_validation(rec, "openenv-validate", target.url)
    protected_checks(session, target, case, next(seeds), rec)
    try:
        _, run, correct = solve_in_episode(session, case, next(seeds))
    except ServerError as exc:
        correct, run = None, None
        rec.error("answer-checks", exc)
    if isinstance(correct, dict) and correct:
        answer_checks(session, target, case, correct, seeds, rec)
    else:
        rec.add(
            "answer-checks",
            False,
            observed=run.brief() if run else None,
            expected="a solver answer to build malformed answers from",
        )
    final_action_check(session, case, next(seeds), rec)
    isolation_check(session, case, next(seeds), rec)
    isolation_checks(session, target, case, seeds, rec)
    output_cap_check(session, case, next(seeds), rec)
    one_session_check(session, target, case, next(seeds), rec)
    if target.limits:
        limit_checks(session, case, next(seeds), dict(target.limits), rec)
    return rec.results, served


def timeout_check(session: Session, case: Case, seed: int) -> list[CheckResult]:
    """A command sleeping past 60 s is killed (whole group) and reported; the server goes on."""
    rec = Recorder("image")
    marker = f"tmo-{cmd.token()}"
    try:
        session.reset(case.id, seed=seed)
        started = time.monotonic()
        slow = session.shell(
            f"python3 -c 'import time; time.sleep({SHELL_TIMEOUT_S + 15})' {marker}; echo after-$((1+1))"
        )
        took = time.monotonic() - started
        nxt = session.shell(f"echo next-alive; echo processes=$({cmd.count_processes(marker)})")
        procs = re.search(r"processes=(\d+)", nxt.output)
        ok = (
            SHELL_TIMEOUT_S - 1 <= took <= SHELL_TIMEOUT_S + TIMEOUT_SLACK_S
            and "after-2" not in slow.output
            and bool(_TIMEOUT_WORDS.search(slow.output))
            and "next-alive" in nxt.output
            and procs is not None
            and procs.group(1) == "0"
        )
        rec.add(
            "timeout",
            ok,
            observed={"seconds": round(took, 1), "reply": slow.brief(), "next": nxt.output[-200:]},
            expected={
                "seconds": f"{SHELL_TIMEOUT_S}..{SHELL_TIMEOUT_S + TIMEOUT_SLACK_S}",
                "reported": "timed out",
                "next_action": "answers",
                "processes_left": 0,
            },
        )
    except ServerError as exc:
        rec.error("timeout", exc)
    return rec.results


IMAGE_CHECKS = (
    "health",
    "metadata",
    "isolation-mode",
    "schema",
    "openenv-validate",
    "uid",
    "protected-server-code",
    "protected-task-module",
    "protected-proc-environ",
    "protected-vendored",
    "protected-inherited",
    "protected-write",
    *(name for name, _ in _malformed({"a": 1})),
    "final-action",
    "reset-isolation",
    *ISOLATION_CHECKS,
    "timeout",
    "output-cap",
    "one-session",
    *LIMIT_CHECKS,
)
