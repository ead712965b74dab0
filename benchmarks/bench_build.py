"""Derived build and transfer figures, measured side by side in one run:

- derived build, cold (empty output layout) and no-op rebuild, vs `podman build` of an
  equivalent COPY-only Dockerfile on the same base (goal <= 0.2x; no-op < 1 s);
- push + anonymous pull vs `skopeo copy` of the same image both ways (goal >= 1.0x
  throughput);
- compressed sizes of the base and the derived layers (goals: base <= 80 MB, derived
  layers <= 100 KB).

Usage: python benchmarks/bench_build.py   (root; starts the local registry if needed,
builds the base first if locks/base.json has none in it)
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline import _proc, basestage, plan
from pipeline import inputs as image_inputs
from pipeline.config import REPO_ROOT, load
from pipeline.image import build
from pipeline.records import provenance
from pipeline.registry import basesource, pull
from pipeline.registry import local as localregistry
from pipeline.registry import push as publish
from pipeline.runtime.runtime import ContainerRuntime

DOCKERFILE = """FROM {base}
COPY env /opt/arena/env
COPY LICENSE /opt/arena/licenses/LICENSE
WORKDIR /opt/arena
CMD ["/opt/arena-python/bin/python3", "-m", "env.server.serve", "--host", "0.0.0.0", "--port", "8000"]
"""


def timed(fn):
    started = time.monotonic()
    result = fn()
    return time.monotonic() - started, result


def main() -> int:
    cfg = load()
    target = plan.resolve(cfg, "local").target
    ep = localregistry.endpoint()
    client = ep.client()
    record = basestage.ensure(client).record
    base_ref = record.pull_reference(ep.address)
    source = basesource.BaseSource.from_registry(base_ref, name=record.name)
    rt = ContainerRuntime(cfg.runtime)
    sde = provenance.source_date_epoch(image_inputs.image_inputs(REPO_ROOT, "local"))

    with tempfile.TemporaryDirectory(prefix="bench-build-", dir=REPO_ROOT / ".release") as tmp:
        tmp = Path(tmp)

        def ours():
            return build.build(
                cfg,
                repo=REPO_ROOT,
                base=source,
                repository=target.image_name,
                tag="bench",
                source_revision="bench",
                source_date_epoch=sde,
                out=tmp / "dist",
            )

        cold, rec = timed(ours)
        noop, _ = timed(ours)

        # podman build of the same content (base already in podman's store: not timed)
        rt.pull(base_ref)
        ctx = tmp / "ctx"
        shutil.copytree(REPO_ROOT / "env", ctx / "env", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        shutil.copy(REPO_ROOT / "LICENSE", ctx / "LICENSE")
        (ctx / "Dockerfile").write_text(DOCKERFILE.format(base=base_ref))
        podman = [
            rt.engine,
            *rt.args.global_args,
            "build",
            "--pull=never",
            "-q",
            "-t",
            "localhost/bench-build:cold",
            str(ctx),
        ]
        podman_cold, _ = timed(lambda: _proc.run(podman))
        podman_noop, _ = timed(lambda: _proc.run(podman))
        _proc.run([rt.engine, *rt.args.global_args, "rmi", "-f", "localhost/bench-build:cold"], check=False)

        # push + anonymous pull to fresh repositories: both tools may mount the base's blobs
        # from its repository (skopeo remembers where it saw them), the rest is uploaded
        size = rec.compressed_size
        stamp = str(int(time.time()))
        push_s, pushed = timed(
            lambda: publish.push_layout(
                client,
                f"bench/ours-{stamp}",
                Path(rec.layout),
                ref_name="bench",
                mount_from=plan.same_registry_repos(client, source),
            )
        )
        pull_s, _ = timed(lambda: pull.pull(pushed.reference, tmp / "pulled"))
        creds = f"{ep.user}:{ep.password}"
        skopeo_push, _ = timed(
            lambda: _proc.run(
                [
                    "skopeo",
                    "copy",
                    "-q",
                    "--dest-tls-verify=false",
                    "--dest-creds",
                    creds,
                    f"oci:{rec.layout}:bench",
                    f"docker://{ep.address}/bench/skopeo-{stamp}:bench",
                ]
            )
        )
        skopeo_pull, _ = timed(
            lambda: _proc.run(
                [
                    "skopeo",
                    "copy",
                    "-q",
                    "--src-tls-verify=false",
                    f"docker://{ep.address}/bench/skopeo-{stamp}:bench",
                    f"oci:{tmp / 'skopeo-pulled'}:bench",
                ]
            )
        )

    ours_rt, skopeo_rt = push_s + pull_s, skopeo_push + skopeo_pull
    print("derived build (same base, same files)")
    print(
        f"  ours cold       {cold:7.2f} s    podman build cold   {podman_cold:7.2f} s    "
        f"ratio {cold / podman_cold:.2f}x (goal <= 0.2x)"
    )
    print(
        f"  ours no-op      {noop:7.2f} s    podman build no-op  {podman_noop:7.2f} s    "
        f"ratio {noop / podman_noop:.2f}x (goal: no-op < 1 s)"
    )
    print(f"push + anonymous pull of {size / 1e6:.1f} MB")
    print(
        f"  ours            {ours_rt:7.2f} s ({size / ours_rt / 1e6:7.1f} MB/s)  "
        f"push {push_s:.2f} s, pull {pull_s:.2f} s"
    )
    print(
        f"  skopeo copy     {skopeo_rt:7.2f} s ({size / skopeo_rt / 1e6:7.1f} MB/s)  "
        f"push {skopeo_push:.2f} s, pull {skopeo_pull:.2f} s"
    )
    print(f"  throughput ratio ours/skopeo {skopeo_rt / ours_rt:.2f}x (goal >= 1.0x)")
    print("compressed sizes")
    for layer in record.layers:
        print(f"  base {layer.role:<15} {layer.size:>12,} bytes")
    print(f"  base total           {record.compressed_size:>12,} bytes (goal <= 80,000,000)")
    for layer in rec.app_layers:
        print(f"  derived {layer.name:<12} {layer.size:>12,} bytes")
    print(f"  derived total        {rec.app_size:>12,} bytes (goal <= 100,000)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
