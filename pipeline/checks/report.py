"""Human summary of a suite run: the per-family table (cases x checks), the external
tasks' repair checks and failures."""

from __future__ import annotations

from typing import Any

from pipeline.checks.repair import REPAIR_CHECKS
from pipeline.checks.results import CheckResult, SuiteResult
from pipeline.curriculum import Case

COLUMNS = (
    "reset",
    "identity-across-seeds",
    "correct",
    "partial",
    "all-but-one",
    "wrong",
    "unknown-key",
    "edited-inputs",
    "cached-terminal",
)
SHORT = {
    "identity-across-seeds": "identity",
    "edited-inputs": "edited",
    "cached-terminal": "cached",
    "unknown-key": "unknown",
}


def _column(check_name: str) -> str:
    return "partial" if check_name.startswith("partial-") else check_name


def family_table(result: SuiteResult) -> str:
    """Rows: the families of the cases checked, in the order first checked; columns: per-case
    checks; cells: passed/total over the family's cases."""
    cells: dict[tuple[str, str], list[int]] = {}
    families: list[str] = []
    for check in result.checks:
        group, _, name = check.id.partition("/")
        try:
            family = Case.parse(group).family
        except ValueError:
            continue  # an image check or an external task's
        if family not in families:
            families.append(family)
        col = _column(name.partition("@")[0])  # every runtime's checks in one cell
        cell = cells.setdefault((family, col if col in COLUMNS else "other"), [0, 0])
        cell[0] += check.passed
        cell[1] += 1
    cols = list(COLUMNS) + (["other"] if any(k[1] == "other" for k in cells) else [])
    heads = [SHORT.get(c, c) for c in cols]
    width = max([len("family")] + [len(f) for f in families])
    lines = [f"{'family':<{width}}  " + "  ".join(f"{h:>9}" for h in heads)]
    for family in families:
        row = []
        for col in cols:
            passed, total = cells.get((family, col), [0, 0])
            mark = "" if passed == total and total else " X"
            row.append(f"{passed}/{total}{mark}".rjust(9))
        lines.append(f"{family:<{width}}  " + "  ".join(row))
    image = result.for_prefix("image/")
    bad = [c.id.split("/", 1)[1] for c in image if not c.passed]
    lines.append("")
    lines.append(
        f"image checks: {len(image) - len(bad)}/{len(image)} passed" + (f"; FAILED: {', '.join(bad)}" if bad else "")
    )
    lines += [runtime_line(r) for r in result.runtimes]
    return "\n".join(lines)


def runtime_line(runtime: dict[str, Any]) -> str:
    """One runtime of the run: engine and version, what its containers ran with, the mode its
    server reported, its counts."""
    engine, sec = runtime.get("engine") or {}, runtime.get("container_security") or {}
    counts = runtime.get("summary") or {}
    loosened = [f"{k} {sec.get(k)}" for k in ("security_opt", "cap_add") if sec.get(k)] + (
        ["privileged"] if sec.get("privileged") else []
    )
    ids = f" (check ids ...{runtime['suffix']})" if runtime.get("suffix") else ""
    return (
        f"runtime {runtime.get('name')} {engine.get('version')}{ids}: "
        f"seccomp {sec.get('seccomp')}, {', '.join(loosened) or 'nothing loosened'}, user namespace mode "
        f"{sec.get('userns_mode') or 'default'}; isolation {runtime.get('isolation') or 'NOT REPORTED'}; "
        f"{counts.get('passed')}/{counts.get('total')} passed"
    )


def _cell(check: CheckResult | None) -> str:
    if check is None:
        return "-"
    return "ok" if check.passed else ("n/a" if check.not_applicable else "FAIL")


def _repair_rows(result: SuiteResult) -> list[tuple[dict[str, Any], list[str]]]:
    rows = []
    for ext in result.external:
        by_name = {c["id"].rsplit("/", 1)[1]: CheckResult.from_json(c) for c in ext.get("checks", ())}
        rows.append((ext, [_cell(by_name.get(name)) for name in REPAIR_CHECKS]))
    return rows


def external_markdown(result: SuiteResult) -> str:
    """The external tasks' repair checks as a Markdown table (ok, FAIL, n/a, - = not run),
    then each task's status and what did not apply."""
    lines = ["| task | " + " | ".join(REPAIR_CHECKS) + " |", "|---|" + "---|" * len(REPAIR_CHECKS)]
    notes = []
    for ext, cells in _repair_rows(result):
        lines.append(f"| {ext['task_id']} | " + " | ".join(cells) + " |")
        notes.append(f"- {ext['task_id']}: {ext['status']}")
        for c in ext.get("checks", ()):
            if c.get("not_applicable"):
                notes.append(f"  - {c['id'].rsplit('/', 1)[1]}: not applicable: {c['not_applicable']}")
            elif c.get("detail"):
                notes.append(f"  - {c['id'].rsplit('/', 1)[1]}: {c['detail']}")
    return "\n".join(lines + [""] + notes)


def external_table(result: SuiteResult) -> str:
    """The same as plain text: one line per external task."""
    lines = []
    for ext, cells in _repair_rows(result):
        ran = [f"{name}={cell}" for name, cell in zip(REPAIR_CHECKS, cells) if cell != "-"]
        lines.append(
            f"external {ext['task_id']}: {ext['status']}" + (f"\n  repair checks: {' '.join(ran)}" if ran else "")
        )
    return "\n".join(lines)


def summary(result: SuiteResult, *, max_failures: int = 20) -> str:
    """The table, the external tasks, the failing checks (observed vs expected) and the time."""
    counts = result.counts()
    lines = [family_table(result)]
    if result.external:
        lines.append(external_table(result))
    for failure in result.failures[:max_failures]:
        lines.append(f"FAIL {failure.id}: observed {failure.observed!r:.300} expected {failure.expected!r:.200}")
    if len(result.failures) > max_failures:
        lines.append(f"... and {len(result.failures) - max_failures} more failures (see the JSON results)")
    verdict = "ALL PASSED" if result.ok else f"{counts['failed']} FAILED"
    na = f", {counts['not_applicable']} not applicable" if counts.get("not_applicable") else ""
    lines.append(f"{counts['total']} checks, {counts['passed']} passed{na}: {verdict} in {result.seconds:.1f} s")
    return "\n".join(lines)


def repair_table(result: SuiteResult) -> str:
    """One line per check of a `repair-checks` run (the seed's twelve, then the extras),
    then each external image's status and writable-layer peak."""
    width = max(len(name) for name in REPAIR_CHECKS)
    lines = [f"{'check':<{width}}  {'outcome':<8}  seconds  detail"]
    for c in result.checks:
        name = c.id.rsplit("/", 1)[1]
        outcome = "ok" if c.passed else ("n/a" if c.not_applicable else "FAIL")
        detail = c.not_applicable or c.detail or ("" if c.passed else f"observed {c.observed!r:.160}")
        lines.append(f"{name:<{width}}  {outcome:<8}  {c.seconds:7.1f}  {detail}")
    for ext in result.external:
        peak = ext.get("writable_layer_peak_bytes")
        lines.append(
            f"{ext['task_id']} {ext['image']}: {ext['status']}"
            + (f"; writable layer peak {peak:,} bytes" if peak is not None else "")
        )
    return "\n".join(lines)
