"""The commands attestations/README.md gives an auditor, run for real: the DSSE snippet
(securesystemslib with the published key) and in-toto's own `in-toto-verify` CLI."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from . import conftest

BIN = Path(sys.executable).parent


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """Records released today, so in-toto's CLI (which refuses expired layouts) accepts them."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(conftest.EPOCH))
    today = datetime.now(UTC)
    monkeypatch.setattr(conftest, "RELEASED_ON", (today.year, today.month, today.day))
    return conftest.make_records(tmp_path / "records")


def _snippets(readme: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", readme, flags=re.S)


def _run(rec, script: str) -> subprocess.CompletedProcess:
    env = {"PATH": f"{BIN}:/usr/bin:/bin"}
    return subprocess.run(["bash", "-c", script], cwd=rec.root, env=env, capture_output=True, text=True, timeout=120)


def test_readme_dsse_snippet_verifies_and_rejects_a_forgery(fresh):
    readme = (fresh.root / "attestations" / "README.md").read_text()
    snippet = next(s for s in _snippets(readme) if "securesystemslib" in s).replace("python -", f"{sys.executable} -")
    proc = _run(fresh, snippet)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"{n} signature OK" for n in ("release", "provenance", "sbom", "checks")]
    from pipeline.records import signing

    signing.KeySigner(signing.CryptoSigner.generate_ed25519()).publish(fresh.root / "attestations")
    assert _run(fresh, snippet).returncode != 0  # the snippet checks the published key's keyid first


def test_in_toto_cli_verifies_the_layout_and_links(fresh):
    readme = (fresh.root / "attestations" / "README.md").read_text()
    command = next(s for s in _snippets(readme) if "in-toto-verify" in s)
    proc = _run(fresh, command)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    next((fresh.root / "attestations" / "links").glob("sbom.*.link")).unlink()
    proc = _run(fresh, command)
    assert proc.returncode == 1 and "LinkNotFoundError" in proc.stdout + proc.stderr


def test_in_toto_command_refuses_a_layout_and_links_resigned_with_a_published_forged_key(fresh):
    """in-toto-verify trusts the key it is given: the README's command checks the published key's
    keyid first, so a forger who re-signs the layout and links and publishes their key is refused."""
    from in_toto.models.metadata import Envelope, Metadata

    from pipeline.records import signing

    readme = (fresh.root / "attestations" / "README.md").read_text()
    command = next(s for s in _snippets(readme) if "in-toto-verify" in s)
    forger = signing.KeySigner(signing.CryptoSigner.generate_ed25519())
    att = fresh.root / "attestations"
    for path in [att / "layout.json", *(att / "links").glob("*.link")]:
        payload = Metadata.load(str(path)).get_payload()
        if path.name == "layout.json":
            payload.keys = {forger.keyid: {**forger.functionary().to_dict(), "keyid": forger.keyid}}
            for step in payload.steps:
                step.pubkeys = [forger.keyid]
        env = Envelope.from_signable(payload)
        forger.sign_envelope(env)
        target = (
            path
            if path.name == "layout.json"
            else path.with_name(path.name.replace(fresh.signer.keyid[:8], forger.keyid[:8]))
        )
        env.dump(str(target))
        if target != path:
            path.unlink()
    forger.publish(att)
    assert _run(fresh, command.split("&& \\\n", 1)[1]).returncode == 0  # in-toto-verify alone is fooled
    proc = _run(fresh, command)
    assert proc.returncode != 0 and forger.keyid in proc.stderr
