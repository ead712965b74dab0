"""The one adapter for the container CLI (docker or podman).

Pull by digest (or load an OCI archive, checked by digest), run detached with the server
port published on loopback (a free port unless one is asked for), wait for `/health`,
read logs, stop and remove. Every container started here carries the label
`LABEL=owner` (`ours()`: what any pipeline process started) and the label
`SESSION_LABEL=<this adapter's id>`, so that `cleanup()` removes exactly the containers
this adapter started: nothing of another process, nor of a concurrent release; and
`RUN_LABEL=<pid>-<start time>` of the process that started it (pipeline.runs), so that
`remove_orphans()` removes the containers of a run that is gone (a killed release). This
machine's quirks (runc, explicit ulimits, cgroup manager) come from `[runtime]` in
release.toml.

Two engines: podman, and docker as the pipeline's private engine (pipeline/runtime/dockerd.py),
driven through its own socket with Debian's client (`/usr/bin/docker -H unix://...`), never
a host's default daemon. A docker container runs with Docker's defaults: no `--security-opt`,
`--cap-add`, `--privileged` or `--userns`, only the budget's limits docker has. Its engine
makes no bridge (no traffic to private addresses), so the container shares the host's
network and its server is given a free loopback port: the image's command with `--host
127.0.0.1 --port N` (`loopback_command`). `detect("auto")` is podman, always: which engine a
session drives never depends on which daemon happens to answer.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pipeline import _proc, runs
from pipeline.config import EngineArgs, RuntimeConfig, load
from pipeline.errors import ReleaseError, ToolError
from pipeline.imageref import PINNED_FORM, ImageRef
from pipeline.progress import say
from pipeline.registry.client import is_loopback
from pipeline.runtime import dockerd
from pipeline.runtime.limits import ContainerLimits, ExternalLimits

LABEL = "org.openenv-arena.release.owner"
OWNER = "pipeline"
SESSION_LABEL = "org.openenv-arena.release.session"
RUN_LABEL = "org.openenv-arena.release.run"
# Runs of a container whose engine-picked host port another process took first.
PORT_ATTEMPTS = 3
# While waiting for health: how often the engine is asked whether the container still runs.
RUNNING_CHECK_S = 2.0


class ContainerError(ReleaseError):
    """A container did not start, did not become healthy, or could not be removed."""


@dataclass(frozen=True)
class Container:
    """A running container this adapter started."""

    id: str
    image: str
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def detect(choice: str = "auto", *, quiet: bool = False) -> str:
    """The engine to drive: `docker` or `podman` when asked, and for `auto` podman, always (the
    engine of a session never depends on which daemon happens to answer). Says which, and why."""
    if choice not in ("auto", "docker", "podman"):
        raise ToolError("unknown container engine", expected="auto, podman or docker", actual=choice)
    engine = "podman" if choice == "auto" else choice
    if engine == "docker":
        dockerd.binaries()
    else:
        _proc.which("podman", package="podman")
    line = f"container engine: {engine}" + (
        " (runtime.engine = auto: podman; the private Docker engine only when asked: --engine docker)"
        if choice == "auto"
        else ""
    )
    if not quiet and line not in _SAID:  # once a process: an adapter is made per command and test
        _SAID.add(line)
        say(line)
    return engine


_SAID: set[str] = set()


def loopback_command(command: Sequence[str], port: int) -> list[str]:
    """`command` (the image's, e.g. `python -m env.server.serve --host 0.0.0.0 --port 8000`) with
    its `--host` and `--port` values replaced by 127.0.0.1 and `port`: under host networking
    the server must listen on loopback, on a port no other server holds."""
    argv = list(command)
    for flag, value in (("--host", "127.0.0.1"), ("--port", str(port))):
        if flag not in argv[:-1]:
            raise ContainerError(
                f"the image's command takes no {flag} value: it cannot be given a loopback port under host networking",
                expected=f"a command with {flag} VALUE",
                actual=" ".join(argv) or "(none)",
                hint="serve it with podman (--engine podman)",
            )
        argv[argv.index(flag) + 1] = value
    return argv


def free_port() -> int:
    """A loopback port free now (the kernel's pick)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ContainerRuntime:
    """docker/podman CLI with this machine's flags; see the module docstring."""

    def __init__(
        self,
        config: RuntimeConfig | None = None,
        *,
        engine: str | None = None,
        environ: Mapping[str, str] | None = None,
        docker: dockerd.EngineState | None = None,
    ) -> None:
        config = config if config is not None else load().runtime
        self.engine = detect(engine) if engine else detect(config.engine_choice(environ))
        self.args: EngineArgs = config.args_for(self.engine, environ)
        self.health_timeout_s = config.health_timeout_s
        self.session = uuid.uuid4().hex
        self.docker = None
        if self.engine == "docker":
            self.docker = docker or dockerd.status()
            if self.docker is None:
                raise ToolError(
                    "the private Docker engine is not running",
                    expected=f"dockerd answering on {dockerd.default_root() / 'docker.sock'}",
                    actual="no engine",
                    hint="the commands that use it start it (`nox -s serve -- --engine docker`, "
                    "the release's verify stage); never a host's default daemon",
                )
            self.client: tuple[str, ...] = self.docker.client_args()
        else:
            self.client = (_proc.which("podman", package="podman"),)

    @property
    def host_network(self) -> bool:
        """Whether containers share the host's network (docker: its engine makes no bridge)."""
        return self.engine == "docker"

    def _cli(self, *argv: str, check: bool = True, timeout: float | None = 600):
        return _proc.run([*self.client, *self.args.global_args, *argv], check=check, timeout=timeout)

    def image_command(self, image: str) -> list[str]:
        """The image's Entrypoint and Cmd, as the engine would run them."""
        out = self._cli("image", "inspect", "--format", "{{json .Config.Entrypoint}} {{json .Config.Cmd}}", image)
        entry, _, cmd = out.stdout.decode().strip().partition(" ")
        return [*(json.loads(entry) or []), *(json.loads(cmd) or [])]

    def pull(self, reference: str) -> str:
        """Pull an image by digest (`name@sha256:...`); return that reference."""
        if not ImageRef.is_pinned(reference):
            raise ContainerError("images are pulled by digest only", expected=PINNED_FORM, actual=reference)
        argv = ["pull", "--quiet"]
        registry = ImageRef.parse(reference).registry
        # A loopback registry speaks plain HTTP: docker allows 127.0.0.0/8 by itself,
        # podman has to be told.
        if self.engine == "podman" and is_loopback(registry):
            argv.append("--tls-verify=false")
        say(f"pulling {reference}")
        self._cli(*argv, reference, timeout=1800)
        return reference

    def load(self, archive: Path, name: str, *, digests: Collection[str]) -> str:
        """Load an OCI archive holding one image named `name` into the engine's store; return
        `name` once the engine's id of it is one of `digests` (its manifest or config digest:
        podman and docker's classic store use the config's, docker's containerd store the
        manifest's)."""
        say(f"loading {name} from {archive.name}")
        self._cli("load", "--input", str(archive), timeout=1800)
        out = self._cli("image", "inspect", "--format", "{{.Id}}", name, check=False)
        loaded = out.stdout.decode().strip()
        loaded = loaded if loaded.startswith("sha256:") else f"sha256:{loaded}"
        if out.returncode != 0 or loaded not in digests:
            raise ContainerError(
                f"{self.engine} did not load {name} from {archive}",
                expected=" or ".join(sorted(digests)),
                actual=loaded if out.returncode == 0 else out.stderr.decode(errors="replace").strip(),
            )
        return name

    def run(
        self,
        image: str,
        *,
        port: int = 8000,
        env: Mapping[str, str] | None = None,
        name: str | None = None,
        extra_args: Sequence[str] = (),
        command: Sequence[str] = (),
        limits: ContainerLimits | ExternalLimits | None = None,
        host_port: int | None = None,
    ) -> Container:
        """Start `image` detached, publishing `port` on 127.0.0.1:`host_port` (default: a free port).

        `extra_args` go to `run` before the image, `command` replaces the image's Cmd,
        `limits` (the release's budget) become cgroup limits, a size-limited /workspace
        and a user namespace of the container's own.
        """
        if self.host_network:
            return self._run_host_network(
                image, port=host_port, env=env, name=name, extra_args=extra_args, command=command, limits=limits
            )
        argv = [
            "run",
            "--detach",
            "--pull",
            "never",
            "--label",
            f"{LABEL}={OWNER}",
            "--label",
            f"{SESSION_LABEL}={self.session}",
            "--label",
            f"{RUN_LABEL}={runs.current().label()}",
            "--publish",
            f"127.0.0.1:{host_port or ''}:{port}",
            *self.args.run_args,
            *(limits.run_args() if limits else ()),
            *extra_args,
        ]
        if name:
            argv += ["--name", name]
        for key, value in sorted((env or {}).items()):
            argv += ["--env", f"{key}={value}"]
        out = self._run_published(argv, image, command, retry=host_port is None)
        cid = out.stdout.decode().strip().splitlines()[-1]
        mapped = self._cli("port", cid, f"{port}/tcp").stdout.decode().split()
        if not mapped:
            # An exited container has no port mapping left: say why it exited.
            logs = self.logs(cid, tail=30).strip() or "(no output)"
            state = "running" if self._running(cid) else "exited"
            self.remove(cid)
            raise ContainerError(
                f"container {cid[:12]} ({image}) has no published port {port}",
                expected="a running container",
                actual=state,
                hint=f"container logs:\n{logs}",
            )
        host, _, host_port = mapped[0].rpartition(":")
        return Container(id=cid, image=image, host=host or "127.0.0.1", port=int(host_port))

    def _run_published(self, argv: list[str], image: str, command: Sequence[str], *, retry: bool):
        """`run` the container; where the engine picked the host port (`retry`) and another
        process bound it before the container started, remove what was created and let the
        engine pick again, up to PORT_ATTEMPTS times."""
        for attempt in range(1, PORT_ATTEMPTS + 1):
            with tempfile.TemporaryDirectory(prefix="arena-cid-") as tmp:
                cidfile = Path(tmp) / "cid"
                out = self._cli(*argv, "--cidfile", str(cidfile), image, *command, check=False)
                taken = b"address already in use" in (out.stderr or b"")
                if out.returncode == 0 or not retry or not taken or attempt == PORT_ATTEMPTS:
                    return _proc.checked(out)
                if cidfile.exists():
                    self.remove(cidfile.read_text().strip())
            say(f"    the host port picked for {image} was taken meanwhile (address already in use): trying again")
        raise AssertionError("not reached")

    def _run_host_network(
        self,
        image: str,
        *,
        port: int | None,
        env: Mapping[str, str] | None,
        name: str | None,
        extra_args: Sequence[str],
        command: Sequence[str],
        limits: ContainerLimits | ExternalLimits | None,
    ) -> Container:
        """docker: the host's network, the server's command given a free loopback port, Docker's
        defaults otherwise (no security option, capability, privilege or user namespace added)."""
        port = port or free_port()
        if isinstance(limits, ContainerLimits):
            # docker has no --uidmap: the container's IDs are the host's (docs/isolation.md).
            limits = replace(limits, own_user_namespace=False)
        argv = [
            "run",
            "--detach",
            "--pull",
            "never",
            "--label",
            f"{LABEL}={OWNER}",
            "--label",
            f"{SESSION_LABEL}={self.session}",
            "--network",
            "host",
            *self.args.run_args,
            *(limits.run_args() if limits else ()),
            *extra_args,
        ]
        if name:
            argv += ["--name", name]
        for key, value in sorted((env or {}).items()):
            argv += ["--env", f"{key}={value}"]
        out = self._cli(*argv, image, *loopback_command(command or self.image_command(image), port))
        cid = out.stdout.decode().strip().splitlines()[-1]
        return Container(id=cid, image=image, host="127.0.0.1", port=port)

    def security(self, container: Container | str) -> dict[str, Any]:
        """What the engine applied to a container: its seccomp profile, added capabilities,
        privilege, user-namespace mode, security options, network mode (from `inspect`)."""
        cid = container.id if isinstance(container, Container) else container
        fmt = (
            "{{json .HostConfig.SecurityOpt}}\t{{json .HostConfig.CapAdd}}\t{{json .HostConfig.Privileged}}"
            "\t{{json .HostConfig.UsernsMode}}\t{{json .HostConfig.NetworkMode}}"
        )
        if self.engine == "podman":  # podman's inspect leaves `unmask=` out of SecurityOpt: its command has it
            fmt += "\t{{json .Config.CreateCommand}}"
        out = self._cli("inspect", "--format", fmt, cid)
        opts, caps, privileged, userns, network, *made = (
            json.loads(x) for x in out.stdout.decode().strip().split("\t")
        )
        opts = list(opts or [])
        argv = (made[0] if made else None) or []
        opts += [value for flag, value in zip(argv, argv[1:]) if flag == "--security-opt" and value not in opts]
        seccomp = next((o.split("=", 1)[1] for o in opts if o.startswith("seccomp=")), "default")
        return {
            "security_opt": opts,
            "seccomp": seccomp,
            "cap_add": list(caps or []),
            "privileged": bool(privileged),
            "userns_mode": userns or "",
            "network_mode": network or "",
        }

    def engine_info(self) -> dict[str, Any]:
        """The engine as `info` reports it: name, client path, versions, security options."""
        if self.engine == "docker":
            out = self._cli("info", "--format", "{{json .}}")
            info = json.loads(out.stdout)
            client = self._cli("version", "--format", "{{.Client.Version}}").stdout.decode().strip()
            return {
                "engine": "docker",
                "client": self.client[0],
                "client_version": client,
                "version": info.get("ServerVersion", ""),
                "security_options": sorted(info.get("SecurityOptions") or []),
                "runtime": info.get("DefaultRuntime", ""),
                "cgroup_version": str(info.get("CgroupVersion", "")),
                "private_engine": self.docker is not None,
            }
        out = self._cli("info", "--format", "json")
        info = json.loads(out.stdout)
        host = info.get("host", {})
        sec = host.get("security", {})
        options = [
            f"{k}={v}"
            for k, v in sorted(sec.items())
            if k in ("rootless", "seccompEnabled", "seccompProfilePath", "selinuxEnabled", "apparmorEnabled")
        ]
        version = info.get("version", {}).get("Version", "")
        return {
            "engine": "podman",
            "client": self.client[0],
            "client_version": version,
            "version": version,
            "security_options": options,
            "runtime": host.get("ociRuntime", {}).get("name", ""),
            "cgroup_version": str(host.get("cgroupVersion", "")),
            "private_engine": False,
        }

    def logs(self, container: Container | str, *, tail: int | None = None) -> str:
        """stdout and stderr of a container (the last `tail` lines if given)."""
        cid = container.id if isinstance(container, Container) else container
        argv = ["logs"] + (["--tail", str(tail)] if tail else []) + [cid]
        out = self._cli(*argv, check=False)
        return (out.stdout + out.stderr).decode(errors="replace")

    def _running(self, cid: str) -> bool:
        out = self._cli("inspect", "--format", "{{.State.Running}}", cid, check=False)
        return out.returncode == 0 and out.stdout.decode().strip() == "true"

    def wait_healthy(self, container: Container, *, path: str = "/health", timeout: float | None = None) -> float:
        """Poll `path` until it answers 200; ContainerError with the logs otherwise."""
        timeout = self.health_timeout_s if timeout is None else timeout
        started = time.monotonic()
        url = container.url + path
        last = "no answer"
        # Asking the engine whether the container still runs costs a CLI process (0.1 s of
        # CPU); a server takes seconds to start, so it is asked every few polls, not each.
        asked = started
        while time.monotonic() - started < timeout:
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        return time.monotonic() - started
                    last = f"HTTP {resp.status}"
            except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
                last = str(getattr(exc, "reason", exc))
            if time.monotonic() - asked >= RUNNING_CHECK_S:
                if not self._running(container.id):
                    last = "the container exited"
                    break
                asked = time.monotonic()
            time.sleep(0.25)
        logs = self.logs(container, tail=30).strip() or "(no output)"
        raise ContainerError(
            f"container {container.id[:12]} ({container.image}) is not healthy at {url} "
            f"after {time.monotonic() - started:.0f} s ({self._state(container.id)})",
            expected="HTTP 200",
            actual=last,
            hint=f"container logs:\n{logs}",
        )

    def _state(self, cid: str) -> str:
        """The engine's view of a container, for error messages."""
        out = self._cli(
            "inspect",
            "--format",
            "state {{.State.Status}}, pid {{.State.Pid}}, exit code {{.State.ExitCode}}, started {{.State.StartedAt}}",
            cid,
            check=False,
            timeout=60,
        )
        return out.stdout.decode(errors="replace").strip() if out.returncode == 0 else "state unknown"

    def start(self, image: str, **kwargs) -> Container:
        """`run` then `wait_healthy`; a container that fails is removed again."""
        container = self.run(image, **kwargs)
        try:
            took = self.wait_healthy(container)
        except BaseException:
            self.remove(container)
            raise
        say(f"  {image} healthy at {container.url} after {took:.1f} s")
        return container

    def remove(self, container: Container | str) -> None:
        """Stop and remove a container; a container that is already gone is fine."""
        cid = container.id if isinstance(container, Container) else container
        out = self._cli("rm", "--force", "--time", "5", cid, check=False)
        if out.returncode != 0 and self.exists(cid):
            # On a loaded machine podman can lose the race between its stop timeout and its
            # SIGKILL ("container state improper: stopped"): the container has stopped by then,
            # and removing it again removes it.
            out = self._cli("rm", "--force", cid, check=False)
        if out.returncode != 0 and self.exists(cid):
            raise ContainerError(
                f"cannot remove container {cid[:12]}", actual=out.stderr.decode(errors="replace").strip()
            )

    def host_root(self, container: Container) -> str | None:
        """Where this process can read the container's filesystem (/proc/<PID>/root of its
        init on this host), or None (a remote daemon, or no permission to look)."""
        out = self._cli("inspect", "--format", "{{.State.Pid}}", container.id, check=False)
        pid = out.stdout.decode().strip() if out.returncode == 0 else ""
        root = f"/proc/{pid}/root"
        if not pid.isdigit() or pid == "0" or not os.access(root, os.R_OK | os.X_OK):
            return None
        return root

    def writable_bytes(self, container: Container) -> int:
        """Bytes in the container's writable layer now: the engine's `SizeRw` of
        `inspect --size` (the size of the container's own upper layer: what it wrote,
        created or copied up from the image; the image's layers are not counted)."""
        out = self._cli("container", "inspect", "--size", "--format", "{{.SizeRw}}", container.id, check=False)
        text = out.stdout.decode().strip()
        if out.returncode != 0 or not text.lstrip("-").isdigit():
            raise ContainerError(
                f"cannot measure the writable layer of container {container.id[:12]}",
                actual=(out.stderr.decode(errors="replace") or text).strip()[-300:],
            )
        return int(text)

    def remove_image(self, name: str) -> None:
        """Remove an image name from the engine's store (and its layers, when no other name
        holds them); one that is already gone is fine."""
        self._cli("image", "rm", "--force", name, check=False)

    def exists(self, cid: str) -> bool:
        return self._cli("inspect", "--format", "{{.Id}}", cid, check=False).returncode == 0

    def _labelled(self, label: str) -> list[str]:
        out = self._cli("ps", "--all", "--no-trunc", "--filter", f"label={label}", "--format", "{{.ID}}")
        return sorted(line.strip() for line in out.stdout.decode().splitlines() if line.strip())

    def ours(self) -> list[str]:
        """IDs of every container (running or not) any pipeline process started."""
        return self._labelled(f"{LABEL}={OWNER}")

    def mine(self) -> list[str]:
        """IDs of the containers (running or not) this adapter started."""
        return self._labelled(f"{SESSION_LABEL}={self.session}")

    def remove_orphans(self) -> list[str]:
        """Remove the containers whose starting process is gone (RUN_LABEL); their IDs."""
        out = self._cli(
            "ps",
            "--all",
            "--no-trunc",
            "--filter",
            f"label={LABEL}={OWNER}",
            "--format",
            f'{{{{.ID}}}} {{{{index .Labels "{RUN_LABEL}"}}}}',
            check=False,
        )
        gone = []
        for line in out.stdout.decode().splitlines():
            cid, _, label = line.strip().partition(" ")
            owner = runs.Owner.from_label(label.strip())
            if cid and owner is not None and not owner.alive:
                self.remove(cid)
                gone.append(cid)
        return gone

    def cleanup(self) -> int:
        """Remove every container this adapter started; return how many there were."""
        ids = self.mine()
        for cid in ids:
            self.remove(cid)
        return len(ids)
