# The stand-in task's reference repair: run as `python3 -` in /workspace/repo.
from pathlib import Path

calc = Path("calc.py")
text = calc.read_text()
fixed = text.replace("total(values) / (len(values) + 1)", "total(values) / len(values)")
if fixed == text:
    raise SystemExit("calc.py does not hold the bug this repair fixes")
calc.write_text(fixed)
print("repaired calc.mean")
