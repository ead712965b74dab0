"""The first-party task families against docs/spec/families.md: oracles, invariants,
determinism, API errors."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import random
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from env import families
from env.families import DOMAINS, GENERATOR_VERSION, TASK_IDS, grade, make_task, oracle_answer

SEEDS = range(300)
DIFFICULTIES = (1, 2, 3)
REPO = Path(__file__).resolve().parents[2]

SPEC_DOMAINS = {
    "software_change": "software engineering",
    "industrial_schedule": "industrial and physical systems",
    "science_calibration": "natural science",
    "office_reconciliation": "office and white-collar work",
    "finance_ledger": "finance and economics",
    "math_route": "math and formal reasoning",
    "security_triage": "cybersecurity",
    "media_timeline": "media and content production",
}
FILES = {
    "software_change": {"modules.json", "change.json", "tests.json"},
    "industrial_schedule": {"jobs.json", "precedences.json", "calendar.json"},
    "science_calibration": {"calibration.json", "samples.json", "policy.json"},
    "office_reconciliation": {"contacts.json", "changes.json", "policy.json"},
    "finance_ledger": {"accounts.json", "events.json", "policy.json"},
    "math_route": {"graph.json", "request.json", "policy.json"},
    "security_triage": {"identities.json", "policy.json", "events.json"},
    "media_timeline": {"assets.json", "delivery.json", "edits.json"},
}
ANSWER_KEYS = {
    "software_change": {"affected", "tests", "test_cost", "build_order"},
    "industrial_schedule": {"order", "completion", "weighted_tardiness", "makespan"},
    "science_calibration": {"calibration", "medians", "quarantine", "accepted_mean"},
    "office_reconciliation": {"contacts", "unresolved"},
    "finance_ledger": {"closing_cents", "applied_ids", "rejected_ids", "held_ids"},
    "math_route": {"route", "minutes", "exposure"},
    "security_triage": {"allowed_ids", "denied", "containment"},
    "media_timeline": {"rejected", "timeline", "total_frames", "over_budget_frames"},
}
TASK_KEYS = {"task_id", "domain", "prompt", "files", "expected", "rubric", "seed", "difficulty", "generator_version"}


def canonical(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def integer_valued(value) -> bool:
    """Only ints, strings and containers of them: no floats, bools or nulls."""
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return False
    if isinstance(value, dict):
        return all(isinstance(k, str) and integer_valued(v) for k, v in value.items())
    if isinstance(value, list):
        return all(integer_valued(v) for v in value)
    return isinstance(value, (int, str))


# ---------------------------------------------------------------- structural invariants per family


def check_software_change(f, d, exp):
    modules = f["modules.json"]
    names = [f"svc_{i:02d}" for i in range(1, 5 + 2 * d)]
    assert list(modules) == names
    assert modules[names[0]] == []
    for i, name in enumerate(names[1:], start=1):
        deps = modules[name]
        assert 1 <= len(deps) <= 3 and deps == sorted(set(deps)) and set(deps) <= set(names[:i])
    changed = f["change.json"]["changed"]
    assert changed == sorted(set(changed)) and len(changed) == d and set(changed) <= set(names)
    suites = f["tests.json"]
    randoms = {k: v for k, v in suites.items() if k not in ("test_full_a", "test_full_b")}
    assert len(randoms) == 5 + d and len(suites) == 7 + d
    assert all(2 <= s["cost"] <= 10 and set(s["targets"]) <= set(names) and s["targets"] for s in randoms.values())
    assert suites["test_full_a"] == {"targets": names[0::2], "cost": 12 + d}
    assert suites["test_full_b"] == {"targets": names[1::2], "cost": 12 + d}
    assert set(changed) <= set(exp["affected"]) and exp["affected"] == sorted(exp["affected"])
    assert exp["tests"] == sorted(exp["tests"])
    assert set(exp["affected"]) <= {m for s in exp["tests"] for m in suites[s]["targets"]}
    assert exp["test_cost"] == sum(suites[s]["cost"] for s in exp["tests"])
    assert sorted(exp["build_order"]) == exp["affected"]
    placed = set()
    for m in exp["build_order"]:
        assert {x for x in modules[m] if x in exp["affected"]} <= placed
        placed.add(m)


def check_industrial_schedule(f, d, exp):
    jobs = f["jobs.json"]
    assert [j["id"] for j in jobs] == [f"job_{i}" for i in range(1, 5 + d)]
    for j in jobs:
        assert set(j) == {"id", "duration", "release", "due", "weight"}
        assert 2 <= j["duration"] <= 8 and 0 <= j["release"] <= 8 and 9 <= j["due"] <= 30 and 1 <= j["weight"] <= 5
    index = {j["id"]: i for i, j in enumerate(jobs)}
    assert all(index[a] < index[b] for a, b in f["precedences.json"])
    assert len({tuple(p) for p in f["precedences.json"]}) == len(f["precedences.json"])
    lo, hi = f["calendar.json"]["blackout"]
    assert 7 <= lo <= 11 and 14 <= hi <= 18 and f["calendar.json"]["start"] == 0
    position = {job: i for i, job in enumerate(exp["order"])}
    assert sorted(exp["order"]) == sorted(index)
    assert all(position[a] < position[b] for a, b in f["precedences.json"])
    assert exp["makespan"] == max(exp["completion"].values())
    for j in jobs:
        start = exp["completion"][j["id"]] - j["duration"]
        assert start >= j["release"] and not (start < hi and start + j["duration"] > lo)


def check_science_calibration(f, d, exp):
    standards = f["calibration.json"]
    assert sorted((s["reference"], s["time"]) for s in standards) == [(5, 0), (5, 10), (45, 0)]
    cal = exp["calibration"]
    assert 2 <= cal["gain"] <= 7 and -15 <= cal["offset"] <= 15 and cal["drift"] in (-3, -2, -1, 1, 2, 3)
    for s in standards:
        assert s["raw"] == cal["gain"] * s["reference"] + cal["offset"] + cal["drift"] * s["time"]
    samples = f["samples.json"]
    assert len(samples) == 4 + 2 * d
    for sid, s in samples.items():
        assert sid.startswith("sample_") and len(sid) == 11 and sid[7:].isdigit()
        assert 1 <= s["time"] <= 12 and 1 <= s["weight"] <= 2 + d
        assert len(s["raw"]) == (3 if d == 1 else 5)
    assert f["policy.json"]["acceptable_median"] == [15, 35] and 6 <= f["policy.json"]["max_replicate_span"] <= 9
    assert 1 <= len(exp["quarantine"]) <= len(samples) - 2
    assert set(exp["medians"]) == set(samples)
    mean = Fraction(exp["accepted_mean"]["numerator"], exp["accepted_mean"]["denominator"])
    assert exp["accepted_mean"] == {"numerator": mean.numerator, "denominator": mean.denominator}
    assert exp["accepted_mean"]["denominator"] > 0


def check_office_reconciliation(f, d, exp):
    contacts = f["contacts.json"]
    assert [c["id"] for c in contacts] == [f"person_{i}" for i in range(1, 4 + d)]
    assert all(c["phone"].isdigit() for c in contacts)
    rows = f["changes.json"]
    assert len(rows) == 6 + 3 * d
    policy = f["policy.json"]
    assert policy["source_priority"] == {"hr": 3, "crm": 2, "import": 1}
    masters = {c["email"] for c in contacts}
    assert set(policy["aliases"].values()) <= masters and not set(policy["aliases"]) & masters
    for r in rows:
        assert r["email"] != r["email"].strip() and r["email"] == r["email"].upper()
        assert 100 <= r["timestamp"] <= 103 and r["source"] in ("hr", "crm", "import")
        assert set(r["fields"]) in ({"team"}, {"team", "phone"})
        if "phone" in r["fields"]:
            assert not r["fields"]["phone"].isdigit()
        email = r["email"].strip().lower()
        known = email in masters or email in policy["aliases"]
        assert known != (r["id"] in exp["unresolved"])
    assert len(exp["unresolved"]) == 1
    assert set(exp["contacts"]) == {c["id"] for c in contacts}


def check_finance_ledger(f, d, exp):
    accounts = f["accounts.json"]
    assert list(accounts) == sorted(f"acct_{i}" for i in range(1, 3 + d))
    assert all(2000 <= v <= 12000 for v in accounts.values())
    events = f["events.json"]
    entries = [e for e in events if e["kind"] == "entry"]
    reversals = [e for e in events if e["kind"] == "reversal"]
    assert len(entries) == 5 + 2 * d and 3 <= len(reversals) <= 4 + d
    assert 0 <= sum(e["status"] == "pending" for e in entries) <= d + 1
    assert sorted(e["sequence"] for e in events) == list(range(1, len(events) + 1))
    assert len({e["id"] for e in events}) == len(events)
    assert all(set(e) == {"id", "kind", "status", "sequence", "account", "cents"} for e in entries)
    assert all(50 <= abs(e["cents"]) <= 1900 and e["account"] in accounts for e in entries)
    assert all(set(e) == {"id", "kind", "status", "sequence", "target", "cents"} and e["cents"] > 0 for e in reversals)
    by_seq = {e["sequence"]: e for e in events}
    by_id = {e["id"]: e for e in events}
    pairs = [
        e
        for e in entries
        if e["status"] == "posted"
        and all(
            by_seq.get(e["sequence"] + k, {}).get("target") == e["id"]
            and by_seq[e["sequence"] + k]["status"] == "posted"
            for k in (1, 2)
        )
    ]
    assert pairs, "no posted entry immediately followed by two reversals of it"
    partial = [r for r in reversals if r["id"] in exp["applied_ids"] and r["cents"] < abs(by_id[r["target"]]["cents"])]
    assert partial, "no applied partial reversal"
    ids = exp["applied_ids"] + exp["rejected_ids"] + exp["held_ids"]
    assert sorted(ids) == sorted(by_id)


def check_math_route(f, d, exp):
    graph, request, policy = f["graph.json"], f["request.json"], f["policy.json"]
    nodes = [f"N{i:02d}" for i in range(6 + 2 * d)]
    assert request["start"] == nodes[0] and request["goal"] == nodes[-1]
    assert all(e["from"] < e["to"] and {e["from"], e["to"]} <= set(nodes) for e in graph)
    edges = {(e["from"], e["to"]): e for e in graph}
    assert len(edges) == len(graph)
    [forbidden] = policy["forbidden"]
    assert forbidden in nodes[1:-1]
    backbone = [n for n in nodes if n != forbidden]
    legs = list(zip(backbone, backbone[1:]))
    for leg in legs:
        assert 1 <= edges[leg]["minutes"] <= 7 and 0 <= edges[leg]["exposure"] <= 2
    for pair, e in edges.items():
        if pair not in legs:
            assert 2 <= e["minutes"] <= 12 and 0 <= e["exposure"] <= 5
    assert request["required"] == sorted(set(request["required"])) and len(request["required"]) == d
    assert set(request["required"]) <= set(backbone[1:-1])
    assert 0 <= policy["max_exposure"] - sum(edges[leg]["exposure"] for leg in legs) <= 3
    windows, before = policy["node_windows"], policy["required_before"]
    assert len(windows) == d + 1 and set(windows) <= set(backbone)
    assert all(0 <= lo <= hi for lo, hi in windows.values())
    assert len(before) == d
    for key, earlier in before.items():
        assert key in backbone and len(earlier) == 1
        assert earlier[0] in backbone and earlier[0] < key
    clock = 0
    for a, b in legs:  # the backbone itself must be feasible
        clock += edges[a, b]["minutes"]
        if b in windows:
            assert clock <= windows[b][1]
            clock = max(clock, windows[b][0])
    assert exp["minutes"] <= clock and exp["exposure"] <= policy["max_exposure"]
    assert exp["route"][0] == nodes[0] and exp["route"][-1] == nodes[-1] and forbidden not in exp["route"]


def check_security_triage(f, d, exp):
    users = f["identities.json"]
    roles = ("reader", "operator", "admin")
    assert users == {f"user_{i}": {"role": roles[i % 3], "enabled": i != 1} for i in range(1, 4 + d)}
    assert f["policy.json"] == {
        "role_actions": {"reader": ["read"], "operator": ["read", "write"], "admin": ["read", "write", "delete"]},
        "secret_roles": ["admin"],
        "trusted_zones": ["office", "vpn"],
        "mfa_actions": ["write", "delete"],
        "containment_denials": 2,
    }
    events = f["events.json"]
    assert len(events) == 7 + 3 * d
    for e in events:
        assert e["user"] in users and e["action"] in ("read", "write", "delete")
        assert e["sensitivity"] in ("public", "internal", "secret") and e["zone"] in ("office", "vpn", "external")
        assert isinstance(e["mfa"], bool) and 95 <= e["time"] <= 105 and e["expires"] == 100
    assert sorted(exp["allowed_ids"] + list(exp["denied"])) == sorted(e["id"] for e in events)
    assert all(codes == sorted(codes) and codes for codes in exp["denied"].values())


def check_media_timeline(f, d, exp):
    assets, delivery, clips = f["assets.json"], f["delivery.json"], f["edits.json"]
    assert sorted(assets) == sorted(f"asset_{i}" for i in range(1, 5 + d))
    assert all(350 <= a["frames"] <= 650 and a["fps"] in (24, 25, 30) for a in assets.values())
    assert 1 <= sum(not a["licensed"] for a in assets.values()) <= 2
    assert 8 <= delivery["max_overlap"] <= 18 and delivery["delivery_budget"] == 150 + 60 * d
    assert delivery["require_license"] is True and delivery["fps"] in (24, 25, 30)
    assert len(clips) == 4 + 2 * d
    assert all(0 <= c["overlap"] <= 30 and c["gap_before"] >= 0 and c["asset"] in assets for c in clips)
    assert 1 <= len(exp["rejected"]) <= len(clips) - 2
    order = [c["id"] for c in clips]
    kept = [t["id"] for t in exp["timeline"]]
    assert kept == [i for i in order if i not in exp["rejected"]]
    assert exp["total_frames"] == exp["timeline"][-1]["end"]


INVARIANTS = {name[len("check_") :]: fn for name, fn in globals().items() if name.startswith("check_")}


# ---------------------------------------------------------------- the sweep


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
@pytest.mark.parametrize("family", TASK_IDS)
def test_oracle_equals_expected_and_grades_full(family, difficulty):
    prompts = set()
    for seed in SEEDS:
        task = make_task(family, seed, difficulty)
        expected = task["expected"]
        assert canonical(oracle_answer(task)) == canonical(expected), f"{family} d{difficulty} s{seed}"
        assert grade(task, expected) == 1.0
        assert integer_valued(expected), f"{family} d{difficulty} s{seed}: {expected}"
        assert set(expected) == ANSWER_KEYS[family]
        files = {name: json.loads(text) for name, text in task["files"].items()}
        INVARIANTS[family](files, difficulty, expected)
        prompts.add(task["prompt"])
    # The prompt is fixed per family, so it cannot leak anything seed-specific like the answer.
    assert len(prompts) == 1


def test_invariants_cover_every_family():
    assert set(INVARIANTS) == set(TASK_IDS)


def test_module_api_matches_spec():
    assert TASK_IDS == list(SPEC_DOMAINS)
    assert DOMAINS == SPEC_DOMAINS
    assert set(families.__all__) == {"TASK_IDS", "DOMAINS", "make_task", "grade", "oracle_answer", "GENERATOR_VERSION"}


@pytest.mark.parametrize("family", TASK_IDS)
def test_task_record_shape(family):
    task = make_task(family, 7)
    assert set(task) == TASK_KEYS
    assert (task["task_id"], task["domain"], task["seed"], task["difficulty"]) == (family, SPEC_DOMAINS[family], 7, 2)
    assert task["generator_version"] == GENERATOR_VERSION
    assert set(task["files"]) == FILES[family]
    for text in task["files"].values():
        assert text.endswith("\n") and not text.endswith("\n\n")
        assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":")) + "\n"
    rubric = task["rubric"]
    assert set(rubric) == {"version", "components", "partial_credit", "max_partial"}
    assert rubric["components"] == {key: 1 / len(task["expected"]) for key in task["expected"]}
    assert rubric["max_partial"] == 0.8 and rubric["partial_credit"]


@pytest.mark.parametrize("family", TASK_IDS)
def test_prompt_states_shape_and_shared_rules(family):
    prompt = make_task(family, 1)["prompt"]
    for needle in [
        *FILES[family],
        *ANSWER_KEYS[family],
        "answer.json",
        "integer-valued",
        "sorted lexicographically",
        "no extra keys",
        "all three",
    ]:
        assert needle in prompt, needle


def test_oracle_reads_files_only():
    for family in TASK_IDS:
        task = make_task(family, 11, 3)
        stripped = {"task_id": task["task_id"], "files": task["files"]}
        assert oracle_answer(stripped) == task["expected"]


# ---------------------------------------------------------------- determinism


def test_same_arguments_give_byte_identical_tasks():
    for family in TASK_IDS:
        for difficulty in DIFFICULTIES:
            first = canonical(make_task(family, 101, difficulty))
            assert canonical(make_task(family, 101, difficulty)) == first
            assert canonical(make_task(family, 102, difficulty)) != first


def test_arguments_change_the_task():
    base = canonical(make_task("math_route", 5, 2)["files"])
    assert canonical(make_task("math_route", 5, 1)["files"]) != base
    assert canonical(make_task("math_route", 6, 2)["files"]) != base


DIGEST_SCRIPT = """
import hashlib, json
from env.families import TASK_IDS, make_task
h = hashlib.sha256()
for family in TASK_IDS:
    for difficulty in (1, 2, 3):
        for seed in (0, 101, 307, -5, 2**70):
            h.update(json.dumps(make_task(family, seed, difficulty), sort_keys=True).encode())
print(h.hexdigest())
"""


def test_tasks_identical_across_processes_and_hash_seeds():
    digests = set()
    for hash_seed in ("0", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed, PYTHONPATH=str(REPO))
        out = subprocess.run(
            [sys.executable, "-c", DIGEST_SCRIPT], env=env, cwd=REPO, capture_output=True, text=True, check=True
        )
        digests.add(out.stdout.strip())
    local = hashlib.sha256()
    for family in TASK_IDS:
        for difficulty in (1, 2, 3):
            for seed in (0, 101, 307, -5, 2**70):
                local.update(json.dumps(make_task(family, seed, difficulty), sort_keys=True).encode())
    assert digests == {local.hexdigest()}


def test_global_random_state_untouched():
    random.seed(4242)
    before = random.getstate()
    for family in TASK_IDS:
        task = make_task(family, 3, 3)
        oracle_answer(task)
        grade(task, task["expected"])
    assert random.getstate() == before


def test_grade_and_oracle_never_mutate_arguments():
    for family in TASK_IDS:
        task = make_task(family, 9, 2)
        answer = copy.deepcopy(task["expected"])
        snapshot_task, snapshot_answer = copy.deepcopy(task), copy.deepcopy(answer)
        grade(task, answer)
        oracle_answer(task)
        assert task == snapshot_task and answer == snapshot_answer


# ---------------------------------------------------------------- argument errors


@pytest.mark.parametrize("task_id", ["nope", "", "Software_change", None, 3, ("software_change",)])
def test_unknown_family_refused(task_id):
    with pytest.raises(ValueError):
        make_task(task_id, 1)


@pytest.mark.parametrize("seed", [True, False, 1.0, "1", None, 2**3 + 0.5])
def test_seed_must_be_exact_int(seed):
    with pytest.raises(ValueError):
        make_task("software_change", seed)


@pytest.mark.parametrize("difficulty", [0, 4, -1, True, 2.0, "2", None])
def test_difficulty_must_be_1_to_3(difficulty):
    with pytest.raises(ValueError):
        make_task("software_change", 1, difficulty)


def test_default_difficulty_is_2_and_big_or_negative_seeds_work():
    assert make_task("finance_ledger", 5) == make_task("finance_ledger", 5, 2)
    assert make_task("finance_ledger", -(2**80), 1)["seed"] == -(2**80)


def test_int_subclass_seed_refused():
    class Seed(int):
        pass

    with pytest.raises(ValueError):
        make_task("software_change", Seed(3))
