"""A bad release.toml or trust.toml stops `release` and `audit` at once, before any stage.

Each case runs the real command (`python -m pipeline release --config ...`, `audit
--records ...`) on copies of the committed files with one thing broken, and an empty
directory as the checkout: the command must exit 2 within seconds with one line naming the
file it read, the key and the fix, and leave the checkout as it was (no `.release/`: a
release makes `.release/staging` before its first stage). The controls run the same commands
on the unbroken files and show that they do get that far, so the assertions can fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FAST_S = 30  # "within seconds": the interpreter's start on a loaded machine, no stage


def copies(root: Path) -> Path:
    """A directory holding copies of the committed release.toml and trust.toml (files, not a tree)."""
    root.mkdir(parents=True, exist_ok=True)
    for name in ("release.toml", "trust.toml"):
        shutil.copy(REPO / name, root / name)
    return root


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} is not once in {path}"
    path.write_text(text.replace(old, new))


def key_file(tmp_path: Path) -> Path:
    """A release key of the test's own (a release signs with it; none is made in the checkout)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    path = tmp_path / "release.key.pem"
    path.write_bytes(
        Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return path


def pipeline(*args: str, key: Path) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "RELEASE_SIGNING_KEY": str(key)}
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    return done, time.monotonic() - start


def release(config: Path, checkout: Path, key: Path) -> tuple[subprocess.CompletedProcess, float]:
    checkout.mkdir(exist_ok=True)
    return pipeline("release", "--config", str(config), "--repo", str(checkout), key=key)


# (file, what is replaced, by what, what the message must say)
BROKEN = {
    "trust-keyid-typo": (
        "trust.toml",
        "keyids = [",
        "keyid = [",
        ("unknown key 'keyid' in [trust.local]", "did you mean `keyids`?"),
    ),
    "trust-typo-in-another-profile": (
        "trust.toml",
        'issuer = "https://token',
        'isuer = "https://token',
        ("unknown key 'isuer' in [trust.arena]", "did you mean `issuer`?"),
    ),
    "layout-valid-days-0": (
        "release.toml",
        "layout_valid_days = 365",
        "layout_valid_days = 0",
        (
            "intoto.layout_valid_days is out of range",
            "expected > 0, got 0",
            "set intoto.layout_valid_days to a value > 0",
        ),
    ),
    "runtime-key-typo": (
        "release.toml",
        "health_timeout_s = 120",
        "health_timout_s = 120",
        ("unknown key 'health_timout_s' in [runtime]", "did you mean `health_timeout_s`?"),
    ),
    "budget-wrong-type": (
        "release.toml",
        "tool_calls_total = 16",
        'tool_calls_total = "16"',
        ("budgets.procedural.tool_calls_total has the wrong type", "write tool_calls_total as a whole number"),
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_bad_config_stops_a_release_before_any_stage(tmp_path, case):
    name, old, new, says = BROKEN[case]
    # Elsewhere than the checkout, as --config allows: the message names this path.
    config_dir = copies(tmp_path / "elsewhere")
    edit(config_dir / name, old, new)
    checkout = tmp_path / "checkout"
    done, took = release(config_dir / "release.toml", checkout, key_file(tmp_path))
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: {config_dir / name}: "), line
    for part in says:
        assert part in line, line
    assert "==> " not in done.stdout + done.stderr  # no stage banner
    assert list(checkout.iterdir()) == [], "the release started work in the checkout"
    assert took < FAST_S


def test_control_the_unbroken_files_do_start_a_release(tmp_path):
    """Teeth: the same command on the committed files gets past the configuration, makes
    `.release/` in the checkout and starts its first stage (and fails there: not a git checkout)."""
    config_dir = copies(tmp_path / "elsewhere")
    checkout = tmp_path / "checkout"
    done, _ = release(config_dir / "release.toml", checkout, key_file(tmp_path))
    assert done.returncode != 0
    assert "==> checkout" in done.stdout + done.stderr
    assert (checkout / ".release").is_dir()


def test_the_same_trust_typo_stops_an_audit_at_once(tmp_path):
    records = copies(tmp_path / "records")
    edit(records / "trust.toml", "keyids = [", "keyid = [")
    done, took = pipeline("audit", "--records", str(records), key=key_file(tmp_path))
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: {records / 'trust.toml'}: unknown key 'keyid' in [trust.local]"), line
    assert "did you mean `keyids`?" in line
    assert not (records / "dist").exists() and took < FAST_S  # no check ran, no summary written


def test_control_an_audit_of_unbroken_files_runs_its_checks(tmp_path):
    """Teeth: with a valid trust.toml the audit runs (and fails: these records hold nothing)."""
    records = copies(tmp_path / "records")
    done, _ = pipeline("audit", "--records", str(records), key=key_file(tmp_path))
    assert done.returncode == 1 and "audit: FAILED" in done.stderr
