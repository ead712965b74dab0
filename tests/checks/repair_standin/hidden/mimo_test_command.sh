cd /workspace/repo && python3 usercase-test-coderl/calc_checks.py
