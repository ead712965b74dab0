"""Apply a unified diff in the current directory: a stdlib-only program shipped into an image.

The repair check applies a task's reference solution inside the unchanged external
image, which may hold neither git nor patch and cannot be given them. The check
uses `git apply` or `patch -p1` when the image has them and this program otherwise.
It is deliberately strict (no fuzz): every context and removed line must match,
at the stated line or at the nearest offset where the whole hunk matches.

Usage: python3 apply_patch.py PATCHFILE   (exit 0 when every hunk applied)
"""

import os
import re
import sys

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _path(header):
    name = header.split("\t", 1)[0].strip()
    if name == "/dev/null":
        return None
    return name.split("/", 1)[1] if name[:2] in ("a/", "b/") else name


def parse(text):
    """[(old path, new path, [(old start, [(tag, line)])])] from a unified diff."""
    files, lines, i = [], text.splitlines(keepends=True), 0
    while i < len(lines):
        if lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            files.append((_path(lines[i][4:]), _path(lines[i + 1][4:]), []))
            i += 2
            continue
        match = _HUNK.match(lines[i])
        if match and files:
            old_left = int(match.group(2) or 1)
            new_left = int(match.group(4) or 1)
            body, i = [], i + 1
            while (old_left or new_left) and i < len(lines):
                tag, line = lines[i][:1], lines[i][1:]
                if tag == "\\":
                    if body:
                        body[-1] = (body[-1][0], body[-1][1].rstrip("\n"))
                    i += 1
                    continue
                if tag not in (" ", "-", "+"):
                    raise SystemExit(f"malformed hunk line {i + 1}: {lines[i]!r}")
                body.append((tag, line))
                old_left -= tag in (" ", "-")
                new_left -= tag in (" ", "+")
                i += 1
            files[-1][2].append((int(match.group(1)), body))
            continue
        i += 1
    if not files:
        raise SystemExit("no file in the patch")
    return files


def _apply(old, hunks, name):
    out, pos = [], 0
    for start, body in hunks:
        want = [line for tag, line in body if tag != "+"]
        at = max(start - 1, 0) if want else start
        for offset in sorted(range(-len(old), len(old) + 1), key=abs):
            cand = at + offset
            if cand >= pos and old[cand:cand + len(want)] == want:
                break
        else:
            raise SystemExit(f"{name}: hunk at line {start} does not apply")
        out += old[pos:cand]
        out += [line for tag, line in body if tag != "-"]
        pos = cand + len(want)
    return out + old[pos:]


def main(patch_file):
    with open(patch_file, encoding="utf-8") as f:
        files = parse(f.read())
    for old_path, new_path, hunks in files:
        old = []
        if old_path is not None:
            with open(old_path, encoding="utf-8", newline="") as f:
                old = f.read().splitlines(keepends=True)
        new = _apply(old, hunks, old_path or new_path)
        if new_path is None:
            os.remove(old_path)
            continue
        os.makedirs(os.path.dirname(new_path) or ".", exist_ok=True)
        with open(new_path, "w", encoding="utf-8", newline="") as f:
            f.write("".join(new))
        print("patched", new_path)


if __name__ == "__main__":
    main(sys.argv[1])
