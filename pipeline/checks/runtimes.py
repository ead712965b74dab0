"""The runtimes a suite ran under, as checks.json records them, and what a record must show.

`runtime_record` (pipeline/checks/run.py) writes one entry per engine into checks.json's
`runtimes`. `check` is what the release (before any record is written) and the audit
(`checks/runtimes`) hold those entries to:

- every engine the release verifies under (`[runtime] verify`) is there, in that order,
  the first with the suite's own check ids, each other one's ids suffixed `@<engine>`;
- each ran the whole suite: its check ids (suffix removed) are the first runtime's, the
  external tasks' repair checks (verified once) aside;
- its isolation mode is `namespaces` or `unprivileged` and is the mode its own
  `image/isolation-mode` check read from /metadata, a check that passed;
- its containers ran without loosening: no privilege, no added capability, the engine's
  default seccomp profile; under docker, Docker's defaults exactly (no security option, no
  user-namespace mode) and an engine whose own seccomp profile is the default; under
  podman, /proc's masks lifted (`unmask=`) only in a user namespace of the container's own,
  where its root is no host root (docs/isolation.md).

`provenance_runtimes` is what provenance.json and the dataset card say of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipeline.checks.results import SuiteResult
from pipeline.errors import VerificationError

MODES = ("namespaces", "unprivileged")
MODE_CHECK = "image/isolation-mode"
# What `docker inspect` shows of a container run with Docker's defaults (ContainerRuntime.security).
DOCKER_DEFAULTS = {"security_opt": [], "seccomp": "default", "cap_add": [], "privileged": False, "userns_mode": ""}
DOCKER_ENGINE_SECCOMP = "name=seccomp,profile=default"
_HINT = "run the release again (its verify stage runs the suite under every engine of [runtime] verify)"


def suffix_of(position: int, name: str) -> str:
    return "" if position == 0 else f"@{name}"


def _ids(suite: SuiteResult, suffix: str) -> set[str]:
    externals = {e.get("task_id") for e in suite.external}
    return {
        c.id[: len(c.id) - len(suffix)] if suffix else c.id
        for c in suite.for_runtime(suffix)
        if c.id.split("/", 1)[0] not in externals
    }


def check(suite: SuiteResult, required: Sequence[str], *, where: str = "checks.json") -> None:
    """Raise a VerificationError naming the first thing wrong with `suite.runtimes` (module doc)."""
    names = [str(r.get("name")) for r in suite.runtimes]
    if names != list(required):
        missing = [n for n in required if n not in names]
        raise VerificationError(
            f"the runtimes {where} names" + (f" (missing {', '.join(missing)})" if missing else ""),
            expected=list(required),
            actual=names,
            hint=_HINT,
        )
    first = _ids(suite, "")
    for position, runtime in enumerate(suite.runtimes):
        name = names[position]
        suffix = suffix_of(position, name)
        if runtime.get("suffix") != suffix:
            raise VerificationError(
                f"the check-id suffix of runtime {name} in {where}",
                expected=repr(suffix),
                actual=repr(runtime.get("suffix")),
            )
        engine = runtime.get("engine") or {}
        if engine.get("engine") != name or not engine.get("version"):
            raise VerificationError(
                f"the engine of runtime {name} in {where}", expected=f"{name} with its version", actual=engine
            )
        ids = _ids(suite, suffix)
        if ids != first:
            gap = sorted(first - ids)[:5] or sorted(ids - first)[:5]
            raise VerificationError(
                f"runtime {name} in {where} did not run the whole suite",
                expected=f"the {len(first)} checks of the first runtime",
                actual=f"{len(ids)}, differing in {', '.join(gap)}",
                hint=_HINT,
            )
        _mode(suite, runtime, name, suffix, where)
        _security(runtime, name, where)


def _mode(suite: SuiteResult, runtime: dict[str, Any], name: str, suffix: str, where: str) -> None:
    mode = runtime.get("isolation")
    if mode not in MODES:
        raise VerificationError(
            f"the isolation mode of runtime {name} in {where}", expected=" or ".join(MODES), actual=mode
        )
    found = [c for c in suite.checks if c.id == MODE_CHECK + suffix]
    if len(found) != 1 or not found[0].passed:
        raise VerificationError(
            f"{MODE_CHECK}{suffix} in {where}",
            expected="one passed check",
            actual=[c.outcome for c in found] or "absent",
        )
    reported = found[0].detail.partition("isolation: ")[2]
    if reported != mode:
        raise VerificationError(
            f"the isolation mode of runtime {name} vs what its server reported in /metadata "
            f"({MODE_CHECK}{suffix}) in {where}",
            expected=reported or "(none reported)",
            actual=mode,
            hint="the runtime's mode is read from that check, never set apart",
        )


def _security(runtime: dict[str, Any], name: str, where: str) -> None:
    security = runtime.get("container_security") or {}
    loosened = {
        k: security.get(k) for k in ("privileged", "cap_add", "seccomp") if security.get(k) != DOCKER_DEFAULTS[k]
    }
    unmasked = [o for o in security.get("security_opt") or [] if str(o).startswith("unmask=")]
    if unmasked and security.get("userns_mode") in ("", "host"):
        loosened.update({"security_opt": security.get("security_opt"), "userns_mode": security.get("userns_mode")})
    if name == "docker":
        loosened.update(
            {k: security.get(k) for k in ("security_opt", "userns_mode") if security.get(k) != DOCKER_DEFAULTS[k]}
        )
        options = (runtime.get("engine") or {}).get("security_options") or []
        if DOCKER_ENGINE_SECCOMP not in options:
            loosened["engine security_options"] = options
    if loosened:
        raise VerificationError(
            f"runtime {name} in {where} ran its containers with security loosened",
            expected=(
                {
                    k: "a user namespace of its own"
                    if k == "userns_mode" and unmasked
                    else DOCKER_DEFAULTS.get(k, DOCKER_ENGINE_SECCOMP)
                    for k in loosened
                }
            ),
            actual=loosened,
            hint="verify under the engine's defaults",
        )


def provenance_runtimes(suite: SuiteResult) -> list[dict[str, Any]]:
    """What provenance.json records of each runtime: its engine and versions, the security its
    containers ran with, the isolation mode its server reported, and its checks' counts."""
    out = []
    for runtime in suite.runtimes:
        engine = runtime.get("engine") or {}
        out.append(
            {
                "name": runtime.get("name"),
                "engine": engine.get("engine"),
                "version": engine.get("version"),
                "client": engine.get("client"),
                "client_version": engine.get("client_version"),
                "engine_security_options": list(engine.get("security_options") or []),
                "container_security": dict(runtime.get("container_security") or {}),
                "isolation": runtime.get("isolation"),
                "check_suffix": runtime.get("suffix"),
                "checks": dict(runtime.get("summary") or {}),
            }
        )
    return out
