"""`repair-checks IMAGE@DIGEST --task TASK_ID --reference FILE [--out FILE.json]`.

Any MiMo repair image, from any registry the verify stage reads anonymously (a
plain-HTTP registry on loopback included): pulled by digest (every blob checked),
started under `[budgets.external]` (2 CPUs, 16 GiB), given the seed's twelve repair
checks and this project's extras exactly as the release gives them to each external
task (pipeline/checks/external.py). The table is printed, the results are written in
checks.json's format, and any failed check makes the command fail.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from pipeline import config as config_mod
from pipeline.checks import external, report
from pipeline.checks.repair import ReferenceRepair
from pipeline.checks.results import SuiteResult, write
from pipeline.errors import CheckFailure
from pipeline.runtime.limits import ExternalLimits
from pipeline.runtime.runtime import ContainerRuntime

DEFAULT_OUT = config_mod.REPO_ROOT / "dist" / "repair-checks.json"


def repair_checks_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Pull a MiMo repair image anonymously by digest, start it under the external "
        "budget, run the seed's twelve repair checks and this project's extras, print "
        "the table and write the results in checks.json's format."
    )
    p.add_argument("image", help="the repair image, host/repository@sha256:<digest>")
    p.add_argument("--task", required=True, help="the task id the image serves (reset's task_id)")
    p.add_argument(
        "--reference", required=True, type=Path, help="the reference repair script, sent as one shell action"
    )
    p.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help=f"the results in checks.json's format (default {DEFAULT_OUT.relative_to(config_mod.REPO_ROOT)})",
    )
    p.add_argument("--config", type=Path, default=config_mod.DEFAULT_CONFIG)


def repair_checks(args: argparse.Namespace) -> int:
    cfg = config_mod.load(args.config)
    reference = ReferenceRepair.read(args.reference)
    budget = cfg.budgets["external"]
    runtime = ContainerRuntime(cfg.runtime)
    plan = external.StartPlan(
        runtime=runtime,
        budget=budget.values,
        limits=ExternalLimits.from_budgets(budget),
        references={args.task: reference},
    )
    started = time.monotonic()
    try:
        checked = external.check_image(args.image, args.task, start=plan)
    finally:
        runtime.cleanup()
    result = SuiteResult(
        image=args.image,
        targets=(),
        checks=checked.checks,
        seconds=time.monotonic() - started,
        external=(checked.to_json(),),
        layers=checked.layers,
    )
    write(args.out, result)
    print(report.repair_table(result))
    print(f"results: {args.out}")
    if not checked.verified or not checked.checks:
        raise CheckFailure(
            f"repair checks of {args.image} as {args.task} did not pass",
            expected="every check passes",
            actual=checked.status,
            hint=f"observed vs expected for each is in {args.out}",
        )
    return 0
