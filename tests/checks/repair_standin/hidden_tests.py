"""The stand-in task's hidden tests: run by the grader, never readable by the shell."""

import calc

assert calc.total([1, 2, 3]) == 6
assert calc.mean([1, 2, 3, 4]) == 2.5, calc.mean([1, 2, 3, 4])
assert calc.mean([5]) == 5
print("hidden tests passed")
