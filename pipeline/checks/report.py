"""Human summary of a suite run: the per-family table (cases x checks) and failures."""

from __future__ import annotations

from .cases import all_cases
from .results import SuiteResult
from .solvers import FAMILIES

COLUMNS = ("reset", "identity-across-seeds", "correct", "partial", "all-but-one", "wrong",
           "unknown-key", "edited-inputs", "cached-terminal")
SHORT = {"identity-across-seeds": "identity", "edited-inputs": "edited", "cached-terminal": "cached",
         "unknown-key": "unknown"}


def _column(check_name: str) -> str:
    return "partial" if check_name.startswith("partial-") else check_name


def family_table(result: SuiteResult) -> str:
    """Rows: families; columns: per-case checks; cells: passed/total over the family's cases."""
    cells: dict[tuple[str, str], list[int]] = {}
    for case in all_cases():
        for check in result.for_prefix(case.id + "/"):
            col = _column(check.id.split("/", 1)[1])
            cell = cells.setdefault((case.family, col if col in COLUMNS else "other"), [0, 0])
            cell[0] += check.passed
            cell[1] += 1
    cols = list(COLUMNS) + (["other"] if any(k[1] == "other" for k in cells) else [])
    heads = [SHORT.get(c, c) for c in cols]
    width = max(len(f) for f in FAMILIES)
    lines = [f"{'family':<{width}}  " + "  ".join(f"{h:>9}" for h in heads)]
    for family in FAMILIES:
        row = []
        for col in cols:
            passed, total = cells.get((family, col), [0, 0])
            mark = "" if passed == total and total else " X"
            row.append(f"{passed}/{total}{mark}".rjust(9))
        lines.append(f"{family:<{width}}  " + "  ".join(row))
    image = result.for_prefix("image/")
    bad = [c.id.split("/", 1)[1] for c in image if not c.passed]
    lines.append("")
    lines.append(f"image checks: {len(image) - len(bad)}/{len(image)} passed"
                 + (f"; FAILED: {', '.join(bad)}" if bad else ""))
    return "\n".join(lines)


def summary(result: SuiteResult, *, max_failures: int = 20) -> str:
    """The table, the external tasks, the failing checks (observed vs expected) and the time."""
    counts = result.counts()
    lines = [family_table(result)]
    for ext in result.external:
        lines.append(f"external {ext['task_id']}: {ext['status']}")
    for failure in result.failures[:max_failures]:
        lines.append(f"FAIL {failure.id}: observed {failure.observed!r:.300} expected {failure.expected!r:.200}")
    if len(result.failures) > max_failures:
        lines.append(f"... and {len(result.failures) - max_failures} more failures (see the JSON results)")
    verdict = "ALL PASSED" if result.ok else f"{counts['failed']} FAILED"
    lines.append(f"{counts['total']} checks, {counts['passed']} passed: {verdict} in {result.seconds:.1f} s")
    return "\n".join(lines)
