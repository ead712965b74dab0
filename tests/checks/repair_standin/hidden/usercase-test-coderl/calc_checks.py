"""The stand-in task's hidden tests: in the workspace only while the grader runs them."""

import sys

sys.path.insert(0, ".")
import calc

failures = []
if calc.total([1, 2, 3]) != 6:
    failures.append("total([1, 2, 3]) != 6")
if calc.mean([1, 2, 3, 4]) != 2.5:
    failures.append(f"mean([1, 2, 3, 4]) == {calc.mean([1, 2, 3, 4])!r}, expected 2.5")
if calc.mean([5]) != 5:
    failures.append("mean([5]) != 5")
print("\n".join(failures) or "hidden tests passed")
sys.exit(1 if failures else 0)
