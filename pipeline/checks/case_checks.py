"""The per-case checks of docs/spec/verification.md, run over one OpenEnv session.

Every case runs one solving episode (reset, solver, finish, an action after done)
followed by one episode per graded answer variant; every reset uses a new OpenEnv seed
and hashes the input files, so identity across seeds is checked on all of them.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from typing import Any

from pipeline.checks import shell as cmd
from pipeline.checks import solvers
from pipeline.checks._record import Recorder
from pipeline.checks.answers import Variant, graded_variants
from pipeline.checks.client import Reply, ServerError, Session
from pipeline.checks.results import CheckResult
from pipeline.checks.target import Target
from pipeline.curriculum import Case

INSTRUCTIONS = "INSTRUCTIONS.md"
SHELL_UID = "2000"
CACHED_SLEEP_S = 2
# How long the marker of an action after done is looked for: a server that replays the
# cached reply at once but runs the command in the background creates it within this.
MARKER_WAIT_S = 0.5
# Check names in report order; partial-<component> names come from the answer itself.
ORDER = (
    "reset",
    "identity-across-seeds",
    "correct",
    "partial-*",
    "all-but-one",
    "wrong",
    "unknown-key",
    "edited-inputs",
    "cached-terminal",
)


def reset_listing_ok(listing: list[str], files: tuple[str, ...]) -> bool:
    """Exactly the inputs and INSTRUCTIONS.md, regular files owned by UID 2000."""
    wanted = sorted([*files, INSTRUCTIONS])
    seen = []
    for line in listing:
        parts = line.split(" ", 3)
        if len(parts) != 4 or parts[0] != SHELL_UID or parts[2] != "f":
            return False
        seen.append(parts[3])
    return sorted(seen) == wanted


def _reward_is(reply: Reply, expected: float) -> bool:
    return reply.done and reply.reward is not None and abs(float(reply.reward) - expected) < 1e-9


def solve_in_episode(session: Session, case: Case, seed: int) -> tuple[Reply, Reply, Any]:
    """Reset, run the family's solver in the workspace; (reset reply, solver reply, answer)."""
    first = session.reset(case.id, seed=seed)
    run = session.shell(solvers.shell_command(case.family))
    return first, run, cmd.last_json_line(run.output)


def _marker_appears(target: Target | None, path: str) -> bool | None:
    """Whether the file ``path`` shows up on the server within MARKER_WAIT_S (None: the
    suite cannot see the server's filesystem)."""
    if target is None or target.peek(path) is None:
        return None
    deadline = time.monotonic() + MARKER_WAIT_S
    while True:
        if target.peek(path):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def run_case(session: Session, case: Case, seeds: Iterator[int], target: Target | None = None) -> list[CheckResult]:
    """All per-case checks of `case`; results are `<case>/<check>`.

    With a `target` whose filesystem the suite can see, the cached-terminal check also
    looks for the marker file the action after done would create, before any reset.
    """
    rec = Recorder(case.id)
    files = solvers.input_files(case.family)
    hashes: list[tuple[int, dict[str, str]]] = []
    answer = None
    marker = cmd.token()

    seed = next(seeds)
    try:
        first = session.reset(case.id, seed=seed)
        probe = session.shell(cmd.probe(files))
    except ServerError as exc:
        rec.error("reset", exc)
    else:
        listing, h = cmd.parse_probe(probe.output)
        hashes.append((seed, h))
        rec.add(
            "reset",
            first.task_id == case.id and not first.done and reset_listing_ok(listing, files),
            observed={"task_id": first.task_id, "done": first.done, "workspace": listing},
            expected={
                "task_id": case.id,
                "done": False,
                "workspace": f"{sorted([*files, INSTRUCTIONS])} as regular files of UID {SHELL_UID}",
            },
        )

    after: Reply | None = None
    terminal: Reply | None = None
    marker_seen: bool | None = None
    stage = "correct"
    try:
        run = session.shell(solvers.shell_command(case.family))
        answer = cmd.last_json_line(run.output)
        terminal = session.finish()
        rec.add(
            "correct",
            answer is not None and _reward_is(terminal, 1.0),
            observed={"finish": terminal.brief(), "solver": run.brief()},
            expected={"reward": 1.0, "done": True},
        )
        stage = "cached-terminal"
        probe_token = cmd.token()
        # Three witnesses of execution: the computed echo, the time a sleep takes (for a
        # server that runs the command but replays the reply) and the marker file, looked
        # for on the server before the next reset deletes it (for a server that replies
        # at once and runs the command in the background).
        marker_path = f"{target.workspace if target else '/workspace/repo'}/arena-cached-{marker}"
        after = session.shell(
            f"touch {marker_path} 2>/dev/null; sleep {CACHED_SLEEP_S}; echo cached-$((6*7))-{probe_token}"
        )
        executed = f"cached-42-{probe_token}" in after.output or after.seconds >= CACHED_SLEEP_S
        marker_seen = _marker_appears(target, marker_path)
    except ServerError as exc:
        rec.error(stage, exc)
        if stage == "correct":
            rec.add(
                "cached-terminal",
                False,
                observed="no terminal episode to probe",
                expected="an action after done that executes nothing",
            )

    variants: list[Variant] = graded_variants(answer) if isinstance(answer, dict) and answer else []
    edit = " && ".join(f"printf '[]\\n' > {f}" for f in files)
    episodes = [(v.check, v.answer, v.expected, "") for v in variants]
    if answer:
        episodes.append(("edited-inputs", answer, 1.0, edit))
    for name, ans, expected, extra in episodes:
        seed = next(seeds)
        try:
            session.reset(case.id, seed=seed)
            steps = [cmd.hashes_only(files), cmd.write_bytes("answer.json", cmd.answer_bytes(ans))]
            if extra:
                steps.append(extra)
            out = session.shell("; ".join(steps))
            hashes.append((seed, cmd.parse_probe(out.output)[1]))
            graded = session.finish()
            rec.add(
                name, _reward_is(graded, expected), observed=graded.brief(), expected={"reward": expected, "done": True}
            )
        except ServerError as exc:
            rec.error(name, exc, expected={"reward": expected, "done": True})
    if not variants:
        rec.add(
            "graded-variants",
            False,
            observed=answer,
            expected="a JSON object answer from the solver to derive variants from",
        )

    if after is not None and terminal is not None:
        rec.add(
            "cached-terminal",
            after.done and after.reward == terminal.reward and not executed and not marker_seen,
            observed={
                "after_done": after.brief(),
                "executed": executed,
                "marker_file_created": "not observable (the suite cannot see the server's files)"
                if marker_seen is None
                else marker_seen,
            },
            expected={"reward": terminal.reward, "done": True, "executed": False, "marker_file_created": False},
        )

    distinct = {s for s, _ in hashes}
    values = [h for _, h in hashes]
    identical = len(distinct) >= 2 and all(len(h) == len(files) and h == values[0] for h in values)
    variants_seen: dict[str, list[int]] = {}
    for s, h in hashes:
        variants_seen.setdefault(json.dumps(h, sort_keys=True), []).append(s)
    rec.add(
        "identity-across-seeds",
        identical,
        observed=[{"seeds": v, "sha256": json.loads(k)} for k, v in variants_seen.items()],
        expected="byte-identical input files for every reset seed (at least two seeds)",
    )
    return _ordered(rec.results, case.id)


def _ordered(results: list[CheckResult], case_id: str) -> list[CheckResult]:
    def rank(r: CheckResult) -> tuple[int, str]:
        name = r.id[len(case_id) + 1 :]
        key = "partial-*" if name.startswith("partial-") else name
        return (ORDER.index(key) if key in ORDER else len(ORDER), name)

    return sorted(results, key=rank)


def seed_stream(start: int) -> Iterator[int]:
    """Distinct OpenEnv reset seeds for one worker."""
    return itertools.count(start)
