"""What a client that reaches the server's port can do to a live episode: the battery.

The agent itself cannot reach the port (its commands run in a network namespace of their
own: env/server/sandbox.py, checked by image/isolation-network); anyone else who can (a
second client beside the trainer) sends, while an episode is live, everything the OpenEnv
standard's routes might take: MCP tool calls that would reset, step,
finish or read an answer, OpenEnv's MCP session methods (create, close), the stateless
/reset, /step and /state of openenv-core, and /openapi.json. Before it, the episode leaves a
marker file and a background process; after it, the episode must be exactly as it was: the
marker and the process still there, not done, and its budget of 16 actions untouched (the
16th action, not an earlier one, ends it). `attack` runs the whole battery through one
session and returns what went wrong (empty: nothing); the same battery runs against the
server in a namespace, in a container, and against a broken server that keeps
openenv-core's routes (which it must catch).
"""

from __future__ import annotations

import json
import subprocess
import sys

from pipeline.checks.client import ServerError, Session

BUDGET = 16
MARKER = "route-attack-marker"
PIDFILE = "/workspace/home/route-attack.pid"
STANDARD_PATHS = {"/health", "/metadata", "/schema", "/mcp"}

# JSON-RPC calls an agent could try on /mcp: (name, message).
MCP_CALLS = (
    ("tools-list", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    (
        "tools-call-reset",
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "reset", "arguments": {"task_id": "math_route-d1-s101"}},
        },
    ),
    (
        "tools-call-step",
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "step", "arguments": {"action": {"operation": "shell", "command": "id"}}},
        },
    ),
    (
        "tools-call-shell",
        {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tools/call",
            "params": {"name": "shell", "arguments": {"command": "touch /workspace/repo/mcp-ran"}},
        },
    ),
    (
        "tools-call-finish",
        {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "finish", "arguments": {}}},
    ),
    (
        "resources-read",
        {
            "jsonrpc": "2.0",
            "id": 6,
            "method": "resources/read",
            "params": {"uri": "file:///opt/arena/env/families/__init__.py"},
        },
    ),
    ("session-create", {"jsonrpc": "2.0", "id": 7, "method": "openenv/session/create", "params": {}}),
    ("session-close", {"jsonrpc": "2.0", "id": 8, "method": "openenv/session/close", "params": {"session_id": "any"}}),
)

# Runs beside the episode, as another client: every call, each reply's status and body (cut)
# as one JSON line as soon as it is known; for /openapi.json its paths and which of the
# secrets it shows.
PROBE = r"""
import json, sys, urllib.error, urllib.request
base = "http://127.0.0.1:" + sys.argv[1]
calls, secrets = json.loads(sys.argv[2]), json.loads(sys.argv[3])
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
def send(method, path, body=None):
    request = urllib.request.Request(base + path, data=body, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with opener.open(request, timeout=20) as reply:
            return [reply.status, reply.read().decode("utf-8", "replace")]
    except urllib.error.HTTPError as error:
        return [error.code, error.read().decode("utf-8", "replace")]
def report(name, reply):
    print("ROUTEPROBE " + json.dumps([name, [reply[0], reply[1][:1000]]]), flush=True)
for name, message in calls:
    report(name, send("POST", "/mcp", json.dumps(message).encode()))
status, body = send("GET", "/openapi.json")
try:
    paths = sorted(json.loads(body).get("paths", {}))
except (ValueError, AttributeError):
    paths = None
report("openapi", [status, json.dumps({"paths": paths, "shows": [s for s in secrets if s in body]})])
report("route-state", send("GET", "/state"))
report("route-step", send("POST", "/step", json.dumps({"action": {"operation": "shell", "command": "id"}}).encode()))
report("route-reset", send("POST", "/reset", json.dumps({"task_id": "math_route-d1-s101"}).encode()))
print("ROUTEPROBE-DONE", flush=True)
"""


def probe(port: int, secrets: tuple[str, ...] = ()) -> tuple[dict[str, tuple[int, str]], str]:
    """Run the battery as another client on 127.0.0.1:`port`: the replies it got, and "" if
    it finished, else how it ended."""
    calls = json.dumps([[name, message] for name, message in MCP_CALLS])
    ran = subprocess.run(
        [sys.executable, "-c", PROBE, str(port), calls, json.dumps(secrets)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = ran.stdout.splitlines()
    replies = {}
    for line in lines:
        if line.startswith("ROUTEPROBE "):
            name, (status, body) = json.loads(line[len("ROUTEPROBE ") :])
            replies[name] = (status, body)
    finished = "ROUTEPROBE-DONE" in lines
    return replies, "" if finished else f"exit code {ran.returncode}, output {ran.stderr[-300:]!r}"


def judge(replies: dict[str, tuple[int, str]]) -> list[str]:
    """What the replies show the routes allowed (empty: nothing)."""
    found = []
    for name, _ in MCP_CALLS:
        if name not in replies:
            continue
        status, body = replies[name]
        try:
            message = json.loads(body)
        except ValueError:
            found.append(f"/mcp {name}: HTTP {status}, not JSON-RPC: {body[:200]}")
            continue
        if status != 200 or message.get("jsonrpc") != "2.0":
            found.append(f"/mcp {name}: HTTP {status} {body[:200]}")
        elif name == "tools-list":
            if message.get("result") != {"tools": []}:
                found.append(f"/mcp tools/list offers something: {body[:300]}")
        elif "result" in message or "error" not in message:
            found.append(f"/mcp {name} was carried out: {body[:300]}")
    for name in ("route-reset", "route-step", "route-state"):
        if name not in replies:
            continue
        status, body = replies[name]
        if status not in (404, 405):
            found.append(f"{name.replace('route-', '/')} answered HTTP {status}: {body[:200]}")
    if "openapi" in replies:
        status, body = replies["openapi"]
        seen = json.loads(body)
        if status != 200 or set(seen["paths"] or ()) != STANDARD_PATHS:
            found.append(f"/openapi.json: HTTP {status}, paths {seen['paths']}")
        found += [f"/openapi.json shows {secret!r}" for secret in seen["shows"]]
    return found


def attack(url: str, case_id: str, *, port: int, secrets: tuple[str, ...] = ()) -> list[str]:
    """The whole battery beside one session of the server at `url` (the battery reaches it
    on 127.0.0.1:`port`); what went wrong, if anything."""
    with Session(url) as session:
        session.reset(case_id, seed=1)
        setup = session.shell(
            f"echo kept > {MARKER} && (setsid sleep 1000 </dev/null >/dev/null 2>&1 & "
            f"echo $! > {PIDFILE}); sleep 0.2; cat {PIDFILE}"
        )
        replies, unfinished = probe(port, secrets)
        found = judge(replies)
        if unfinished:
            found.append(f"the probe was killed in the middle of the battery after {sorted(replies)} ({unfinished})")
        try:
            after = session.shell(f"cat {MARKER}; kill -0 $(cat {PIDFILE}) && echo alive; ls /workspace/repo")
        except ServerError as exc:
            # The server could not even start the command (its workspace is gone, say): the
            # episode did not survive, and nothing in it can be asked any more.
            found.append(f"the episode's files are gone after the battery: the server refused a command ({exc})")
            found.append("the episode's background process could not be checked after the battery")
            return found
        if "kept" not in after.output:
            found.append(f"the episode's files are gone after the battery: {after.output[-300:]}")
        if "alive" not in after.output:
            found.append(f"the episode's background process was killed by the battery: {after.output[-300:]}")
        if "mcp-ran" in after.output:
            found.append("an MCP tool call ran a command in the workspace")
        if setup.done or after.done:
            found.append("the episode ended during the battery (the grader ran)")
        # Two actions so far (a reset is not one): the routes spent none, so exactly the
        # 16th action ends the episode.
        rest = [session.shell("true") for _ in range(BUDGET - 2)]
        early = [2 + i + 1 for i, r in enumerate(rest[:-1]) if r.done]
        if early:
            found.append(f"the episode ended after {early[0]} actions, not {BUDGET}: the routes spent its budget")
        elif not rest[-1].done:
            found.append(f"the {BUDGET}th action did not end the episode")
    return found
