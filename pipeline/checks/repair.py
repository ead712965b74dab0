"""The repair checks of an external task image (verification.md, "External (repair) tasks").

Run against the started, unchanged image over the OpenEnv WebSocket protocol, as a
trainer would: one session, the task's own id, its own budget. Check ids are
`<task_id>/<check>`, in REPAIR_CHECKS order. `reference-repair` applies the reference
solution of the pinned dataset record; when the record carries none it is recorded
"not applicable: <reason>", which is neither a pass nor a failure.

What the real MiMo images and records look like could not be seen where this was
written; every assumption about them is one field of `config.RepairConventions`, read
from `[external.repair]` in release.toml, so the first real run can adjust them there.
"""

from __future__ import annotations

import base64
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.config import RepairConventions
from pipeline.checks import shell as cmd
from pipeline.checks._record import Recorder
from pipeline.checks.client import ServerError, Session
from pipeline.checks.image_checks import http_checks, record_one_session
from pipeline.checks.results import CheckResult
from pipeline.checks.target import Target

REPAIR_CHECKS = ("health", "metadata", "schema", "reset", "identity-across-seeds", "unprivileged",
                 "protected-grader", "unsolved", "repeated-finish", "reset-removes-edits",
                 "reference-repair", "one-session")
# The patch travels as base64 in shell actions of at most this many characters each
# (a command may hold 16,000).
CHUNK_CHARS = 12_000
# An action after done must not run: a sleep this long in it would show in the reply time.
AFTER_DONE_SLEEP_S = 3
_APPLIER = Path(__file__).with_name("apply_patch.py")
_PROBE_END = "--arena-probe-end--"


@dataclass(frozen=True)
class ReferenceSolution:
    """The reference solution of one task, or why there is none."""

    patch: str | None
    reason: str = ""

    @classmethod
    def from_record(cls, row: Mapping[str, Any] | None, conventions: RepairConventions,
                    missing: str = "") -> "ReferenceSolution":
        """From a pinned record's row; `missing` says why there is no row at all."""
        field = conventions.reference_field
        if row is None:
            return cls(None, missing or "no pinned dataset record")
        value = row.get(field)
        if not isinstance(value, str) or not value.strip():
            return cls(None, f"the dataset record carries no reference solution "
                             f"(field {field!r} is {'absent' if field not in row else 'empty'})")
        return cls(value)


@dataclass(frozen=True)
class Workspace:
    """The workspace's regular files (.git excluded): count, one digest over the sorted
    `sha256sum` listing, and the first SAMPLE_FILES lines of it (for reports; a whole
    repository's listing would not fit in one observation)."""

    count: int
    digest: str
    sample: tuple[tuple[str, str], ...]

    @property
    def present(self) -> bool:
        return self.count > 0 and len(self.digest) == 64


SAMPLE_FILES = 40


def _workspace_probe(workspace: str) -> str:
    return (f"list=$(cd {shlex.quote(workspace)} && find . -path ./.git -prune -o -type f -print0 "
            "| LC_ALL=C sort -z | xargs -0 -r sha256sum); "
            "[ -n \"$list\" ] && printf '%s\\n' \"$list\" | wc -l | sed 's/^/count /'; "
            "[ -n \"$list\" ] && printf '%s\\n' \"$list\" | sha256sum | sed 's/ .*//;s/^/digest /'; "
            f"[ -n \"$list\" ] && printf '%s\\n' \"$list\" | head -n {SAMPLE_FILES}; echo {_PROBE_END}")


def _parse_workspace(output: str) -> Workspace:
    head, found, _ = output.partition(_PROBE_END)
    count, digest, sample = 0, "", []
    for line in head.splitlines() if found else ():
        if line.startswith("count ") and line[6:].isdigit():
            count = int(line[6:])
        elif line.startswith("digest "):
            digest = line[7:].strip()
        else:
            sha, _, name = line.partition("  ")
            if len(sha) == 64 and name:
                sample.append((name, sha))
    return Workspace(count, digest, tuple(sample))


def _differing(a: Workspace, b: Workspace) -> list[str]:
    left, right = dict(a.sample), dict(b.sample)
    return sorted(k for k in {*left, *right} if left.get(k) != right.get(k))[:20]


def _readable_probe(paths: tuple[str, ...]) -> str:
    # Only "Permission denied" passes: a wrong path (ENOENT) proves nothing.
    program = ("import os, sys\nfor p in sys.argv[1:]:\n try:\n"
               "  os.listdir(p) if os.path.isdir(p) else open(p, 'rb').read(1)\n"
               "  print('READABLE', p)\n except PermissionError:\n  print('DENIED', p)\n"
               " except OSError as e:\n  print('ERROR', e.strerror, p)\n")
    return f"python3 -c {shlex.quote(program)} {' '.join(shlex.quote(p) for p in paths)}"


def _apply_commands(patch: str, workspace: str, token: str) -> list[str]:
    """Shell actions that apply `patch` in the workspace: the transfer, then the apply."""
    stash = f"/tmp/arena-reference-{token}"
    data = base64.b64encode(patch.encode()).decode()
    applier = base64.b64encode(_APPLIER.read_bytes()).decode()
    steps = [f"printf '%s' {data[i:i + CHUNK_CHARS]} >> {stash}.b64"
             for i in range(0, len(data), CHUNK_CHARS)]
    steps += [f"printf '%s' {applier[i:i + CHUNK_CHARS]} >> {stash}.py.b64"
              for i in range(0, len(applier), CHUNK_CHARS)]
    ws = shlex.quote(workspace)
    steps.append(
        f"base64 -d {stash}.b64 > {stash}.patch && base64 -d {stash}.py.b64 > {stash}.py && cd {ws} && "
        f"if [ -d .git ] && command -v git >/dev/null; then git apply --verbose {stash}.patch; "
        f"elif command -v patch >/dev/null; then patch -p1 --forward --batch < {stash}.patch; "
        f"else python3 {stash}.py {stash}.patch; fi && echo APPLIED-{token}; "
        f"rm -f {stash}.b64 {stash}.py.b64 {stash}.patch {stash}.py")
    return steps


def _done_with(reply, reward: float) -> bool:
    return reply.done and reply.reward is not None and abs(float(reply.reward) - reward) < 1e-9


class _Run:
    """One check run: a session on one started image."""

    def __init__(self, session: Session, task_id: str, conventions: RepairConventions,
                 seeds: Iterator[int], rec: Recorder, max_calls: int) -> None:
        self.session, self.task_id, self.conv, self.seeds, self.rec = (
            session, task_id, conventions, seeds, rec)
        self.max_calls = max_calls

    def reset(self):
        return self.session.reset(self.task_id, seed=next(self.seeds),
                                  id_field=self.conv.reset_id_field)

    def workspace(self) -> Workspace:
        return _parse_workspace(self.session.shell(_workspace_probe(self.conv.workspace)).output)

    def first_episode(self) -> Workspace:
        """reset, unprivileged, protected-grader, unsolved, repeated-finish; the workspace."""
        rec = self.rec
        first = self.reset()
        files = self.workspace()
        rec.add("reset", first.task_id == self.task_id and not first.done and files.present,
                observed={"task_id": first.task_id, "done": first.done, "files": files.count},
                expected={"task_id": self.task_id, "done": False,
                          "files": f"a repository in {self.conv.workspace}"})
        ids = self.session.shell("id -u; id -g").output.split()
        uid_ok = len(ids) == 2 and all(x.isdigit() for x in ids) and ids[0] != "0"
        rec.add("unprivileged", uid_ok, observed=ids, expected="a UID other than 0 (id -u; id -g)",
                detail=f"uid {ids[0]} gid {ids[1]}" if uid_ok else "")
        out = self.session.shell(_readable_probe(self.conv.grader_paths)).output
        verdicts = [l for l in out.splitlines() if l.split(" ", 1)[0] in ("READABLE", "DENIED", "ERROR")]
        rec.add("protected-grader", len(verdicts) == len(self.conv.grader_paths)
                and all(v.startswith("DENIED ") for v in verdicts),
                observed=verdicts or out[-300:], expected=[f"DENIED {p}" for p in self.conv.grader_paths])
        graded = self.session.finish()
        rec.add("unsolved", _done_with(graded, 0.0), observed=graded.brief(),
                expected={"reward": 0.0, "done": True})
        again = self.session.finish()
        probe = cmd.token()
        after = self.session.shell(f"sleep {AFTER_DONE_SLEEP_S}; echo ran-$((6*7))-{probe}")
        executed = f"ran-42-{probe}" in after.output or after.seconds >= AFTER_DONE_SLEEP_S
        same = all(r.done and r.reward == graded.reward for r in (again, after))
        rec.add("repeated-finish", graded.done and same and not executed,
                observed={"first": graded.brief(), "finish_again": again.brief(),
                          "action_after_done": after.brief(), "executed": executed},
                expected={"reward": graded.reward, "done": True, "executed": False})
        return files

    def edits_episodes(self, original: Workspace) -> None:
        """identity-across-seeds (a second reset, another seed), reset-removes-edits."""
        rec = self.rec
        self.reset()
        second = self.workspace()
        rec.add("identity-across-seeds", original.present and second == original,
                observed={"files": [original.count, second.count], "differing": _differing(original, second)},
                expected="byte-identical workspace files after resets with different seeds")
        marker = f"arena-edit-{cmd.token()}"
        target = second.sample[0][0] if second.sample else "README"
        done = self.session.shell(
            f"cd {shlex.quote(self.conv.workspace)} && printf '\\n# {marker}\\n' >> {shlex.quote(target)} "
            f"&& echo {marker} > {marker}.txt && echo EDITED-{marker}").output
        self.reset()
        third = self.workspace()
        rec.add("reset-removes-edits", f"EDITED-{marker}" in done and third == second and second.present,
                observed={"edit_made": f"EDITED-{marker}" in done, "files": [second.count, third.count],
                          "left_after_reset": _differing(second, third)},
                expected={"edit_made": True, "left_after_reset": []})

    def reference_episode(self, reference: ReferenceSolution) -> None:
        if reference.patch is None:
            self.rec.not_applicable("reference-repair", reference.reason)
            return
        token = cmd.token()
        steps = _apply_commands(reference.patch, self.conv.workspace, token)
        if len(steps) + 1 > self.max_calls:
            self.rec.add("reference-repair", False,
                         observed=f"{len(steps) + 1} calls to transfer, apply and finish",
                         expected=f"at most the episode's {self.max_calls} tool calls")
            return
        self.reset()
        outputs = [self.session.shell(step) for step in steps]
        applied = f"APPLIED-{token}" in outputs[-1].output
        graded = self.session.finish()
        self.rec.add("reference-repair", applied and _done_with(graded, 1.0),
                     observed={"applied": applied, "apply_output": outputs[-1].output[-400:],
                               "finish": graded.brief()},
                     expected={"applied": True, "reward": 1.0, "done": True})

    def one_session(self, url: str, timeout_s: float) -> None:
        record_one_session(
            self.rec, Session(url, message_timeout_s=timeout_s),
            lambda second: second.reset(self.task_id, seed=next(self.seeds), id_field=self.conv.reset_id_field),
            self.session, self.reset)


def _fail_missing(rec: Recorder, names: tuple[str, ...], exc: ServerError) -> None:
    done = {check_name(r) for r in rec.results}
    for name in names:
        if name not in done:
            rec.error(name, exc)


def run_repair_checks(url: str, task_id: str, reference: ReferenceSolution, *,
                      conventions: RepairConventions = RepairConventions(), timeout_s: float = 180.0,
                      max_calls: int = 64, seed: int = 7_000) -> list[CheckResult]:
    """Every repair check against the server at `url`; results in REPAIR_CHECKS order.

    `timeout_s` bounds each call (the external budget's reset/tool/verifier wall time),
    `max_calls` each episode's tool calls (applying the reference must fit in it).
    A stage the server broke (an error reply, a dropped connection) fails the checks it
    owed, with the server's message, so every id is always present exactly once.
    """
    rec = Recorder(task_id)
    http_checks(Target(url=url), rec)
    seeds = iter(range(seed, seed + 1_000))
    stages = (("first", ("reset", "unprivileged", "protected-grader", "unsolved", "repeated-finish")),
              ("edits", ("identity-across-seeds", "reset-removes-edits")),
              ("reference", ("reference-repair",)), ("one-session", ("one-session",)))
    original = Workspace(0, "", ())
    try:
        with Session(url, message_timeout_s=timeout_s) as session:
            run = _Run(session, task_id, conventions, seeds, rec, max_calls)
            for stage, owed in stages:
                try:
                    if stage == "first":
                        original = run.first_episode()
                    elif stage == "edits":
                        run.edits_episodes(original)
                    elif stage == "reference":
                        run.reference_episode(reference)
                    else:
                        run.one_session(url, timeout_s)
                except ServerError as exc:
                    _fail_missing(rec, owed, exc)
    except (ServerError, ConnectionError, OSError, RuntimeError) as exc:  # no session at all
        _fail_missing(rec, REPAIR_CHECKS, exc if isinstance(exc, ServerError)
                      else ServerError(f"{type(exc).__name__}: {exc}"))
    order = {name: i for i, name in enumerate(REPAIR_CHECKS)}
    return sorted(rec.results, key=lambda r: order[check_name(r)])


def check_name(result: CheckResult) -> str:
    """`reference-repair` of `format-code-task-000666/reference-repair`."""
    return result.id.rsplit("/", 1)[1]
