"""Audit checks of checks.json: against its signed test-result statement, its verdict, and its
runtimes against release.toml's [runtime] verify and provenance.json."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from pipeline._io import sha256_file
from pipeline.audit.rows import Rows, State, equal, first_path_difference
from pipeline.errors import VerificationError
from pipeline.imageref import ImageRef
from pipeline.records import attest

if TYPE_CHECKING:
    from pipeline.checks.results import SuiteResult


def load_suite(s: State) -> SuiteResult:
    """The check results of the audited records (attestations/checks.json)."""
    from pipeline.checks import results as results_mod

    return results_mod.load(s.att_dir / attest.CHECKS_FILE)


def _runtimes_match(s: State) -> None:
    """checks.json names every engine of release.toml's [runtime] verify (the file, not the
    environment), each with the whole suite, a valid isolation mode read from its own check and
    no loosened security (pipeline/checks/runtimes.py); provenance.json says the same of them."""
    from pipeline.checks import runtimes as runtimes_mod

    suite = load_suite(s)
    runtimes_mod.check(suite, s.cfg.runtime.verify, where=f"attestations/{attest.CHECKS_FILE}")
    if s.prov is not None:
        equal(
            "runtimes of provenance.json vs checks.json",
            json.loads(json.dumps(runtimes_mod.provenance_runtimes(suite))),
            json.loads(json.dumps(list(s.prov.runtimes or ()))),
        )


def audit_checks(r: Rows, s: State) -> None:
    stmt = (s.statements or {}).get("checks")
    rec = f"attestations/{attest.CHECKS_FILE}"
    if stmt is None:
        r.not_checked("checks/record", rec, "the checks statement did not verify")
        return
    pred = stmt["predicate"]  # an object (audit_statements); what is inside is read under r.run

    def conf() -> dict:
        return (pred.get("configuration") or [{}])[0]

    r.run(
        "checks/record",
        rec,
        lambda: equal(
            f"sha256 of {rec} vs the checks statement",
            conf().get("digest", {}).get("sha256"),
            sha256_file(s.att_dir / attest.CHECKS_FILE),
            hint="checks.json was edited after signing",
        ),
    )

    def results() -> None:
        suite = load_suite(s)
        equal(
            f"passed checks of {rec} vs the statement",
            pred.get("passedTests"),
            sorted(c.id for c in suite.checks if c.passed),
        )
        equal(f"failed checks of {rec} vs the statement", pred.get("failedTests"), sorted(c.id for c in suite.failures))
        # Everything else the statement says (checks that could not apply, the counts, the image)
        # is a function of checks.json too; its digest is checks/record's to compare.
        expected = attest.checks_predicate(suite, checks_sha256=conf().get("digest", {}).get("sha256"))
        where = first_path_difference(json.loads(json.dumps(expected)), pred, "predicate")
        if where is not None:
            raise VerificationError(
                f"checks statement {where[0]} vs {rec}", expected=json.dumps(where[1]), actual=json.dumps(where[2])
            )

    r.run("checks/results", rec, results)
    srec = f"attestations/checks{s.suffix}"

    def passed() -> None:
        equal(
            f"check suite result (failed: {', '.join(pred.get('failedTests', [])[:5]) or 'none'})",
            "PASSED",
            pred.get("result"),
        )
        # The verdict is read from checks.json too: a statement saying PASSED over failed checks
        # (or over none) is not a passed suite.
        suite = load_suite(s)
        equal(f"failed checks in {rec} (the statement says PASSED)", [], sorted(c.id for c in suite.failures))
        if not suite.ok:
            raise VerificationError(
                f"{rec} holds no passed check", expected="a whole suite", actual=f"{len(suite.checks)} check(s)"
            )

    r.run("checks/passed", srec, passed)
    if s.cfg is None:
        r.not_checked("checks/runtimes", rec, "release.toml did not load")
    else:
        r.run("checks/runtimes", rec, lambda: _runtimes_match(s))
    image = s.image
    if image is not None:
        r.run(
            "checks/image",
            srec,
            lambda: equal(
                "digest of the image the check suite ran on",
                image.digest,
                ImageRef.parse(str(conf().get("annotations", {}).get("image", ""))).digest,
            ),
        )
