"""Read the agent's /workspace/repo/answer.json without trusting what is at that path.

Every way the file can be wrong (missing, a symlink, a FIFO, a directory, too large,
not UTF-8, not JSON, not an object, too deep) is a normal outcome with a reason, never
an exception: the episode scores 0.0 and the agent is told why.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ANSWER_NAME = "answer.json"
MAX_ANSWER_BYTES = 16_384
# The bounds of docs/spec/families.md grading rule 1, checked here only to tell the agent why
# the grader will give 0.0; the task module's grade() applies them itself as well.
MAX_DEPTH = 20
MAX_NODES = 2_048


@dataclass(frozen=True)
class AnswerRead:
    """Either the parsed answer object or the reason it was refused."""

    answer: dict[str, Any] | None
    reason: str | None


def _refused(reason: str) -> AnswerRead:
    return AnswerRead(answer=None, reason=reason)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def read_answer(path: Path) -> AnswerRead:
    """Open ``path`` without following symlinks or blocking on FIFOs and parse one JSON object."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        return _refused(f"{ANSWER_NAME} is missing")
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return _refused(f"{ANSWER_NAME} is a symbolic link; write a regular file")
        return _refused(f"{ANSWER_NAME} cannot be opened ({os.strerror(exc.errno or 0)})")
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return _refused(f"{ANSWER_NAME} is not a regular file ({_kind(info.st_mode)})")
        if info.st_size > MAX_ANSWER_BYTES:
            return _refused(f"{ANSWER_NAME} is {info.st_size} bytes; the limit is {MAX_ANSWER_BYTES}")
        raw = _read_at_most(fd, MAX_ANSWER_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > MAX_ANSWER_BYTES:
        return _refused(f"{ANSWER_NAME} is over {MAX_ANSWER_BYTES} bytes")
    return parse_answer(raw)


def parse_answer(raw: bytes) -> AnswerRead:
    """Decode ``raw`` as a UTF-8 JSON object within the grading bounds."""
    if not raw.strip():
        return _refused(f"{ANSWER_NAME} is empty")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _refused(f"{ANSWER_NAME} is not UTF-8 (byte {exc.start})")
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        return _refused(f"{ANSWER_NAME} is nested deeper than {MAX_DEPTH} levels")
    except ValueError as exc:
        return _refused(f"{ANSWER_NAME} is not valid JSON: {exc}")
    if not isinstance(value, dict):
        return _refused(f"{ANSWER_NAME} must hold a JSON object, not {_json_type(value)}")
    depth, nodes = _measure(value)
    if depth > MAX_DEPTH:
        return _refused(f"{ANSWER_NAME} is nested {depth} levels deep; the limit is {MAX_DEPTH}")
    if nodes > MAX_NODES:
        return _refused(f"{ANSWER_NAME} has {nodes} JSON values; the limit is {MAX_NODES}")
    return AnswerRead(answer=value, reason=None)


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < limit:
        chunk = os.read(fd, limit - len(chunks))
        if not chunk:
            break
        chunks += chunk
    return bytes(chunks)


def _measure(value: Any) -> tuple[int, int]:
    """Depth (a scalar is depth 1) and node count of a parsed JSON tree, iteratively."""
    max_depth = 0
    nodes = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        nodes += 1
        max_depth = max(max_depth, depth)
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
    return max_depth, nodes


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array"


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"
