"""Refuse a malformed WebSocket message with an error reply, and keep the session going.

openenv-core's /ws loop answers invalid JSON with an error and reads on, but a message it
cannot parse for another reason (100,000 nested ``[`` raise RecursionError), a binary
frame, or a string holding a lone surrogate (``"\\ud800"``: it reached the shell, failed
to encode, and the error naming it failed to serialise) ended the whole session with
SESSION_ERROR, ungraded. `MessageGuard` sits in front of the app: each incoming message
is checked first, and a bad one is answered with an OpenEnv error reply naming the
problem and never reaches the app. The session, and its episode, go on.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Far above any valid message: an action's command is at most 16,000 characters.
MAX_MESSAGE_CHARS = 1 << 20
MAX_DEPTH = 16
INVALID_JSON = "INVALID_JSON"  # openenv-core's WSErrorCode values
VALIDATION_ERROR = "VALIDATION_ERROR"


def problem(event: Message) -> tuple[str, str] | None:
    """(error code, what is wrong) for a received WebSocket event, or None if it is fine."""
    text = event.get("text")
    if text is None:
        return VALIDATION_ERROR, "binary messages are not accepted: send the message as JSON text"
    if len(text) > MAX_MESSAGE_CHARS:
        return VALIDATION_ERROR, f"the message has {len(text)} characters; at most {MAX_MESSAGE_CHARS}"
    try:
        value = json.loads(text)
    except RecursionError:
        return INVALID_JSON, f"the message nests deeper than this server parses (at most {MAX_DEPTH} levels)"
    except ValueError as exc:
        return INVALID_JSON, f"the message is not JSON: {exc}"
    if not isinstance(value, dict):
        return VALIDATION_ERROR, (
            f'a message is a JSON object such as {{"type": "step", "data": {{...}}}}, not {type(value).__name__}'
        )
    return _structure_problem(value)


def _structure_problem(value: Any) -> tuple[str, str] | None:
    pending: list[tuple[Any, str, int]] = [(value, "$", 1)]
    while pending:
        item, where, depth = pending.pop()
        if depth > MAX_DEPTH:
            return VALIDATION_ERROR, f"the message nests deeper than {MAX_DEPTH} levels (at {where[:80]})"
        if isinstance(item, str):
            if not _encodable(item):
                return VALIDATION_ERROR, (
                    f"the string at {where[:80]} is not valid Unicode (it holds a lone "
                    "surrogate such as \\ud800); send UTF-8 text"
                )
        elif isinstance(item, dict):
            for key, child in item.items():
                if not _encodable(key):
                    return VALIDATION_ERROR, f"a key in {where[:80]} is not valid Unicode (a lone surrogate)"
                pending.append((child, f"{where}.{key}", depth + 1))
        elif isinstance(item, list):
            pending.extend((child, f"{where}[{i}]", depth + 1) for i, child in enumerate(item))
    return None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class MessageGuard:
    """ASGI middleware: WebSocket messages are checked before the app reads them."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return

        async def checked_receive() -> Message:
            while True:
                event = await receive()
                if event["type"] != "websocket.receive":
                    return event
                found = problem(event)
                if found is None:
                    return event
                code, message = found
                reply = {"type": "error", "data": {"message": message, "code": code}}
                await send({"type": "websocket.send", "text": json.dumps(reply)})

        await self.app(scope, checked_receive, send)
