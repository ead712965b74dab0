"""Hand-worked scenarios for the rules of each family (docs/spec/families.md), solved by
hand.

Each scenario targets the edge cases of a family's rules (tie-breaks, boundaries, rejection
causes). The oracle is checked against the hand-computed answer, and so is the generator's own
solver where it has one, so a rule misread the same way by both sides still gets caught.
"""

from __future__ import annotations

import json

from env.families import (
    finance_ledger,
    industrial_schedule,
    math_route,
    media_timeline,
    oracle_answer,
    security_triage,
    software_change,
)


def solve(family: str, files: dict) -> dict:
    task = {"task_id": family, "files": {name: json.dumps(obj) + "\n" for name, obj in files.items()}}
    return oracle_answer(task)


def test_software_change_closure_cover_tiebreaks_and_build_order():
    modules = {
        "svc_01": [],
        "svc_02": ["svc_01"],
        "svc_03": ["svc_02"],
        "svc_04": ["svc_01"],
        "svc_05": [],
    }
    suites = {
        "t_a": {"targets": ["svc_01", "svc_02"], "cost": 5},
        "t_b": {"targets": ["svc_03", "svc_04"], "cost": 5},
        "t_c": {"targets": ["svc_01", "svc_02", "svc_03", "svc_04"], "cost": 10},
        "t_d": {"targets": ["svc_03"], "cost": 2},
        "t_e": {"targets": ["svc_04"], "cost": 3},
        "t_f": {"targets": ["svc_01", "svc_02", "svc_03", "svc_04", "svc_05"], "cost": 10},
    }
    # Cost 10 four ways: {t_a,t_b} (2 suites), {t_a,t_d,t_e} (3), {t_c} and {t_f} (1 each);
    # the count then the ID list pick t_c. Smallest-first topological order: 02 before 04, then 03.
    want = {
        "affected": ["svc_01", "svc_02", "svc_03", "svc_04"],
        "tests": ["t_c"],
        "test_cost": 10,
        "build_order": ["svc_01", "svc_02", "svc_03", "svc_04"],
    }
    files = {"modules.json": modules, "change.json": {"changed": ["svc_01"]}, "tests.json": suites}
    assert solve("software_change", files) == want
    assert software_change._affected(modules, ["svc_01"]) == want["affected"]
    assert software_change._cheapest_cover(suites, want["affected"]) == ["t_c"]
    assert software_change._build_order(modules, want["affected"]) == want["build_order"]
    # Dependencies outside the affected set do not hold a module back.
    assert software_change._affected(modules, ["svc_03"]) == ["svc_03"]
    assert solve("software_change", {**files, "change.json": {"changed": ["svc_03"]}})["tests"] == ["t_d"]


def test_industrial_schedule_blackout_boundaries_and_order_tiebreak():
    jobs = [
        {"id": "job_1", "duration": 5, "release": 5, "due": 10, "weight": 5},
        {"id": "job_2", "duration": 3, "release": 0, "due": 20, "weight": 1},
        {"id": "job_3", "duration": 2, "release": 0, "due": 9, "weight": 1},
        {"id": "job_4", "duration": 2, "release": 15, "due": 17, "weight": 1},
    ]
    precedences = [["job_2", "job_1"]]
    calendar = {"blackout": [10, 15], "start": 0}
    # job_1 ends exactly at lo (allowed); job_4 starts exactly at hi. Orders 2,3,1,4 and
    # 3,2,1,4 tie on (0, 17); the lexicographically smaller order wins.
    want = {
        "order": ["job_2", "job_3", "job_1", "job_4"],
        "completion": {"job_1": 10, "job_2": 3, "job_3": 5, "job_4": 17},
        "weighted_tardiness": 0,
        "makespan": 17,
    }
    files = {"jobs.json": jobs, "precedences.json": precedences, "calendar.json": calendar}
    assert solve("industrial_schedule", files) == want
    assert industrial_schedule._solve(jobs, precedences, calendar) == want
    # A job whose run would cross the blackout is pushed to hi: with 3 before 2 forced and
    # job_1 forced first, job_1 runs 5-10, job_3 10-12 would overlap and moves to 15-17.
    forced = [["job_1", "job_3"], ["job_3", "job_2"], ["job_2", "job_4"]]
    got = industrial_schedule._solve(jobs[:4], forced, calendar)
    assert got["order"] == ["job_1", "job_3", "job_2", "job_4"]
    assert got["completion"] == {"job_1": 10, "job_3": 17, "job_2": 20, "job_4": 22}
    assert got["weighted_tardiness"] == (17 - 9) * 1 + 0 + (22 - 17) * 1
    assert solve("industrial_schedule", {**files, "precedences.json": forced}) == got


def test_science_calibration_negative_drift_boundaries_and_reduced_mean():
    gain, offset, drift = 3, 4, -2

    def raw(values, time):
        return [gain * v + offset + drift * time for v in values]

    standards = [
        {"reference": 5, "time": 10, "raw": gain * 5 + offset + drift * 10},
        {"reference": 45, "time": 0, "raw": gain * 45 + offset},
        {"reference": 5, "time": 0, "raw": gain * 5 + offset},
    ]
    samples = {
        "sample_0001": {"time": 2, "weight": 1, "raw": raw([20, 21, 22], 2)},
        "sample_0002": {"time": 1, "weight": 3, "raw": raw([30, 31, 29], 1)},
        "sample_0003": {"time": 3, "weight": 2, "raw": raw([25, 26, 14], 3)},  # span 12 > 6
        "sample_0004": {"time": 4, "weight": 1, "raw": raw([40, 41, 42], 4)},  # median 41 > 35
        "sample_0005": {"time": 5, "weight": 1, "raw": raw([34, 35, 36], 5)},  # median 35: inclusive
        "sample_0006": {"time": 6, "weight": 2, "raw": raw([20, 26, 23], 6)},  # span 6: not over
    }
    files = {
        "calibration.json": standards,
        "samples.json": samples,
        "policy.json": {"acceptable_median": [15, 35], "max_replicate_span": 6},
    }
    # Accepted: 21*1 + 30*3 + 35*1 + 23*2 = 192 over weight 7.
    assert solve("science_calibration", files) == {
        "calibration": {"gain": 3, "offset": 4, "drift": -2},
        "medians": {
            "sample_0001": 21,
            "sample_0002": 30,
            "sample_0003": 25,
            "sample_0004": 41,
            "sample_0005": 35,
            "sample_0006": 23,
        },
        "quarantine": ["sample_0003", "sample_0004"],
        "accepted_mean": {"numerator": 192, "denominator": 7},
    }


def test_office_reconciliation_one_alias_lookup_priorities_and_phone_digits():
    contacts = [
        {"id": "person_1", "email": "ana@x.com", "phone": "111", "team": "a"},
        {"id": "person_2", "email": "bo@x.com", "phone": "222", "team": "b"},
        {"id": "person_3", "email": "cy@x.com", "phone": "333", "team": "c"},
    ]
    policy = {
        "aliases": {"ana@old.org": "ana@x.com", "bo@old.org": "bo@x.com", "chain@old.org": "bo@old.org"},
        "source_priority": {"hr": 3, "crm": 2, "import": 1},
    }

    def row(row_id, email, ts, source, **fields):
        return {"id": row_id, "email": email, "timestamp": ts, "source": source, "fields": fields}

    rows = [
        row("row_0001", " ANA@OLD.ORG ", 101, "hr", team="t1"),
        row("row_0002", "ana@x.com  ", 101, "crm", team="t2", phone="(555) 000-1111"),
        row("row_0003", " Bo@X.com", 102, "import", team="t3"),
        row("row_0004", " BO@OLD.ORG", 102, "import", team="t4", phone="555.222.3333"),
        row("row_0005", "  CHAIN@OLD.ORG ", 103, "hr", team="t5"),  # one lookup only: unresolved
        row("row_0006", "nobody@x.com ", 103, "hr", team="t6"),
        row("row_0007", " ana@x.com", 100, "hr", team="t7"),
    ]
    files = {"contacts.json": contacts, "changes.json": rows, "policy.json": policy}
    assert solve("office_reconciliation", files) == {
        "contacts": {
            "person_1": {"phone": "5550001111", "team": "t1"},  # same timestamp: hr beats crm
            "person_2": {"phone": "5552223333", "team": "t4"},  # full tie: greater row ID wins
            "person_3": {"phone": "333", "team": "c"},
        },
        "unresolved": ["row_0005", "row_0006"],
    }


def test_finance_ledger_sequence_order_and_every_rejection_cause():
    accounts = {"acct_1": 1000, "acct_2": 500}

    def entry(txn, seq, account, cents, status="posted"):
        return {"id": txn, "kind": "entry", "status": status, "sequence": seq, "account": account, "cents": cents}

    def reversal(txn, seq, target, cents, status="posted"):
        return {"id": txn, "kind": "reversal", "status": status, "sequence": seq, "target": target, "cents": cents}

    events = [
        reversal("txn_0008", 15, "txn_0009", 1),  # would total 301 > 300: rejected
        entry("txn_0002", 2, "acct_2", -200),
        reversal("txn_0013", 3, "txn_0009", 100),  # partial: applied
        reversal("txn_0014", 12, "txn_0013", 10),  # targets a reversal
        reversal("txn_0004", 4, "txn_0009", 250),  # 350 > 300: rejected whole, not clipped
        entry("txn_0010", 10, "acct_1", 999, status="pending"),
        reversal("txn_0015", 5, "txn_0009", 200),  # exactly 300: applied (fully reversed)
        reversal("txn_0001", 6, "txn_0002", 50),  # against a negative entry: +50
        reversal("txn_0007", 7, "txn_0011", 5),  # target later in sequence
        reversal("txn_0003", 8, "txn_0010", 5),  # target pending
        entry("txn_0011", 9, "acct_2", 10),
        reversal("txn_0006", 11, "txn_0009", 1, status="pending"),  # held
        reversal("txn_0005", 13, "txn_9999", 5),  # unknown target
        reversal("txn_0012", 14, "txn_0002", 0),  # cents not positive
        entry("txn_0009", 1, "acct_1", 300),
    ]
    want = {
        "closing_cents": {"acct_1": 1000, "acct_2": 360},
        "applied_ids": ["txn_0001", "txn_0002", "txn_0009", "txn_0011", "txn_0013", "txn_0015"],
        "rejected_ids": ["txn_0003", "txn_0004", "txn_0005", "txn_0007", "txn_0008", "txn_0012", "txn_0014"],
        "held_ids": ["txn_0006", "txn_0010"],
    }
    files = {"accounts.json": accounts, "events.json": events, "policy.json": finance_ledger.POLICY}
    assert solve("finance_ledger", files) == want
    assert finance_ledger._replay(accounts, events) == want


def _route_files(extra_edges=(), windows=None, required_before=None):
    edges = [
        ("N00", "N01", 2, 1),
        ("N01", "N03", 2, 1),
        ("N03", "N04", 2, 1),
        ("N04", "N05", 2, 1),
        ("N00", "N02", 1, 0),
        ("N02", "N03", 1, 0),
        ("N02", "N05", 1, 0),
        ("N00", "N03", 1, 5),
        ("N01", "N04", 1, 0),
        *extra_edges,
    ]
    graph = [{"from": a, "to": b, "minutes": m, "exposure": e} for a, b, m, e in edges]
    policy = {
        "forbidden": ["N02"],
        "max_exposure": 5,
        "node_windows": windows if windows is not None else {"N04": [6, 20]},
        "required_before": required_before if required_before is not None else {"N04": ["N01"]},
    }
    request = {"start": "N00", "goal": "N05", "required": ["N03"]}
    return {"graph.json": graph, "request.json": request, "policy.json": policy}


def _both(files):
    edges = {(e["from"], e["to"]): e for e in files["graph.json"]}
    got = solve("math_route", files)
    assert math_route._search(edges, files["request.json"], files["policy.json"]) == got
    return got


def test_math_route_exposure_tiebreak_forbidden_and_required_before():
    # Via N02 (forbidden) would take 4 minutes; N00->N03 directly breaks max_exposure (6 > 5)
    # or N04's required_before. N01-N03-N05 and N01-N03-N04-N05 both take 8: exposure decides.
    files = _route_files(extra_edges=[("N03", "N05", 4, 1)])
    assert _both(files) == {"route": ["N00", "N01", "N03", "N05"], "minutes": 8, "exposure": 3}
    # Without required_before the cheap N00->N03->N04 path (exposure 7) is still too exposed.
    assert _both(_route_files(extra_edges=[("N03", "N05", 4, 1)], required_before={}))["minutes"] == 8


def test_math_route_window_wait_and_close():
    # Arriving at N04 at 6 waits until 7: minutes grow (9), exposure does not (4).
    assert _both(_route_files(windows={"N04": [7, 20]})) == {
        "route": ["N00", "N01", "N03", "N04", "N05"],
        "minutes": 9,
        "exposure": 4,
    }
    # Arriving after close is infeasible, so the slower detour through N03->N05 wins.
    files = _route_files(extra_edges=[("N03", "N05", 5, 1)], windows={"N04": [0, 5]})
    assert _both(files) == {"route": ["N00", "N01", "N03", "N05"], "minutes": 9, "exposure": 3}


def test_math_route_lexicographic_route_tiebreak():
    files = _route_files(extra_edges=[("N03", "N05", 4, 2)])
    # N01-N03-N05: 8 minutes, exposure 4; N01-N03-N04-N05: 8 minutes, exposure 4: the route decides.
    assert _both(files)["route"] == ["N00", "N01", "N03", "N04", "N05"]


def test_security_triage_every_code_and_containment():
    identities = {
        "user_1": {"role": "operator", "enabled": False},
        "user_2": {"role": "admin", "enabled": True},
        "user_3": {"role": "reader", "enabled": True},
    }

    def event(eid, user, action, sensitivity, zone, mfa, time):
        return {
            "id": eid,
            "user": user,
            "action": action,
            "sensitivity": sensitivity,
            "zone": zone,
            "mfa": mfa,
            "time": time,
            "expires": 100,
        }

    events = [
        event("event_0001", "user_1", "read", "public", "office", True, 95),
        event("event_0002", "user_3", "write", "internal", "external", False, 100),
        event("event_0003", "user_3", "read", "secret", "vpn", False, 99),
        event("event_0004", "user_2", "delete", "secret", "office", True, 99),
        event("event_0005", "user_2", "read", "public", "external", False, 99),
        event("event_0006", "user_3", "read", "internal", "vpn", False, 99),
        event("event_0007", "user_2", "read", "internal", "office", True, 100),
    ]
    want = {
        "allowed_ids": ["event_0004", "event_0005", "event_0006"],
        "denied": {
            "event_0001": ["disabled"],
            "event_0002": ["action_forbidden", "expired", "mfa_required", "untrusted_zone"],
            "event_0003": ["mfa_required", "secret_role"],
            "event_0007": ["expired"],
        },
        "containment": ["user_3"],
    }
    files = {"identities.json": identities, "policy.json": security_triage.POLICY, "events.json": events}
    assert solve("security_triage", files) == want
    codes = {e["id"]: security_triage._codes(identities, e) for e in events}
    assert {k: v for k, v in codes.items() if v} == want["denied"]


def test_media_timeline_overlap_clamps_gaps_and_rejections():
    assets = {
        "asset_1": {"frames": 400, "licensed": True, "fps": 24},
        "asset_2": {"frames": 500, "licensed": False, "fps": 30},
        "asset_3": {"frames": 450, "licensed": True, "fps": 30},
    }
    delivery = {"max_overlap": 10, "delivery_budget": 100, "require_license": True, "fps": 30}

    def clip(cid, asset, start, end, num, den, overlap, gap=0):
        return {
            "id": cid,
            "asset": asset,
            "in": start,
            "out": end,
            "speed_num": num,
            "speed_den": den,
            "overlap": overlap,
            "gap_before": gap,
        }

    clips = [
        clip("clip_0001", "asset_1", 0, 48, 1, 1, 20),  # 60 frames; first retained: no overlap
        clip("clip_0002", "asset_2", 0, 30, 1, 1, 0, gap=50),  # unlicensed; its gap is skipped
        clip("clip_0003", "asset_3", 100, 130, 2, 1, 30),  # 15 frames; max_overlap binds (10)
        clip("clip_0004", "asset_3", 10, 17, 1, 2, 20),  # 14 frames; max_overlap binds (10)
        clip("clip_0005", "asset_3", 0, 3, 1, 1, 9),  # 3 frames; own duration - 1 binds (2)
        clip("clip_0006", "asset_1", 0, 24, 1, 1, 25),  # 30 frames; previous duration - 1 binds (2)
        clip("clip_0007", "asset_1", 390, 410, 1, 1, 0),  # out beyond 400 frames
        clip("clip_0008", "asset_1", 0, 10, 1, 1, 0),  # 12.5 frames
        clip("clip_0009", "asset_2", 490, 510, 3, 2, 0),  # all three faults
        clip("clip_0010", "asset_3", 0, 30, 1, 1, 8, gap=5),  # positive gap: no overlap
        clip("clip_0011", "asset_3", 5, 5, 1, 1, 0),  # in == out
    ]
    want = {
        "rejected": {
            "clip_0002": ["unlicensed"],
            "clip_0007": ["source_bounds"],
            "clip_0008": ["fractional_frame"],
            "clip_0009": ["fractional_frame", "source_bounds", "unlicensed"],
            "clip_0011": ["source_bounds"],
        },
        "timeline": [
            {"id": "clip_0001", "start": 0, "end": 60},
            {"id": "clip_0003", "start": 50, "end": 65},
            {"id": "clip_0004", "start": 55, "end": 69},
            {"id": "clip_0005", "start": 67, "end": 70},
            {"id": "clip_0006", "start": 68, "end": 98},
            {"id": "clip_0010", "start": 103, "end": 133},
        ],
        "total_frames": 133,
        "over_budget_frames": 33,
    }
    files = {"assets.json": assets, "delivery.json": delivery, "edits.json": clips}
    assert solve("media_timeline", files) == want
    assert media_timeline._render(assets, delivery, clips) == want
    under = {**delivery, "delivery_budget": 500}
    assert solve("media_timeline", {**files, "delivery.json": under})["over_budget_frames"] == 0
