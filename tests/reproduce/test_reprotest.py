"""Debian's reprotest, an independent harness, builds twice under variations and compares
the outputs bit for bit: the derived build (twice: once with disorderfs file ordering,
once as another user) and the base build once, against the run's own base build as the
control (`--control-build`).

Variations that work on this VM: environment, build_path, kernel (setarch), aslr,
num_cpus, time (faketime), home, locales, exec_path, timezone, umask, domain_host,
user_group, fileordering (disorderfs over /dev/fuse). /dev/fuse is root-only (0600), so
disorderfs cannot run as the unprivileged build user: fileordering and user_group run
in separate reprotest invocations. The base build needs root (mmdebstrap --mode=root):
no user_group there; nor the kernel variation (`setarch --uname-2.6`): libc6's preinst
refuses to install under a kernel older than 3.2, so mmdebstrap cannot run at all.

reprotest 0.7.23 calls `sudo -h localhost ...`, which sudo >= 1.9 rejects outside `-l`;
a two-line `sudo` wrapper first on PATH drops those two arguments.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from .reprotestfixtures import PYTHON311, base_reprotest, build_world, built_indexes, reprotest, world  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.root]


def derived_build(world: Path, extra: str = "") -> str:
    return (
        f"env PYTHONPATH={world / 'site'} PYTHONDONTWRITEBYTECODE=1 {PYTHON311} -m pipeline "
        f"build --no-push --base-layout {world / 'base-oci'} --out dist{extra}"
    )


def _ok(proc: subprocess.CompletedProcess) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Reproduction successful" in out, out[-6000:]


def test_base_build_once_under_every_root_variation(base_reprotest):
    status, out = (base_reprotest / "output").read_text().split("\n", 1)
    assert status == "0" and "Reproduction successful" in out, out[-6000:]
    indexes = built_indexes(base_reprotest)
    assert indexes["control"] == indexes["experiment"]


def test_derived_build_with_file_ordering_and_every_variation_but_the_user(world):
    _ok(reprotest(world, derived_build(world), "dist/oci/index.json", "+all,-user_group,-domain_host"))


def test_derived_build_as_another_user_and_host(world):
    _ok(
        reprotest(
            world,
            derived_build(world),
            "dist/oci/index.json",
            "+all,-fileordering,user_group.available+=nobody:nogroup,domain_host.use_sudo=1",
        )
    )


def test_harness_catches_a_build_path_in_the_output(world):
    """The harness has teeth: an output that records where it was built differs."""
    proc = reprotest(world, derived_build(world, " && pwd > dist/oci/where"), "dist/oci/where", "+build_path")
    assert proc.returncode != 0 and "Reproduction successful" not in proc.stdout + proc.stderr


@pytest.mark.parametrize("control_says, reproducible", [("built\n", True), ("forged\n", False)], ids=["same", "forged"])
def test_a_control_build_is_what_the_experiment_is_compared_with(world, tmp_path, control_says, reproducible):
    """The base test's shape (`--control-build` with `source-root/<artifact>`): reprotest
    compares the experiment with that control and nothing else, so a control that differs
    fails."""
    artifact = "out/said"
    control = tmp_path / "control" / "source-root" / artifact
    control.parent.mkdir(parents=True)
    control.write_text(control_says)
    proc = reprotest(
        world,
        f"mkdir -p out && echo built > {artifact}",
        artifact,
        "+umask,+time",
        timeout=300,
        control=tmp_path / "control",
    )
    out = proc.stdout + proc.stderr
    assert (proc.returncode == 0 and "Reproduction successful" in out) is reproducible, out[-4000:]
