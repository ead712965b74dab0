"""The release stages as in-toto links, checked against a layout signed by the release key.

Each stage that writes a record (`vendor`, `sbom`, `attest`, `submission`) is recorded as an
in-toto Link: the sha256 of its materials and products, relative to the records
root, signed with the release key into `attestations/links/<step>.<keyid8>.link`.
`attestations/layout.json` (signed by the same key) names the steps, who may sign
them, and the artifact rules that chain them: the SBOM the attest step consumed is
the one the sbom step produced, the vendored files it consumed are those the vendor
step produced. `verify` runs in-toto's verification and then checks the records
on disk against the last products recorded for them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import contextmanager
from copy import deepcopy
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from in_toto.models.layout import Layout, Step
from in_toto.models.link import Link
from in_toto.models.metadata import Envelope, Metadata
from in_toto.runlib import record_artifacts_as_dict
from securesystemslib.signer import CryptoSigner, SSlibKey

from ._io import sha256_file
from .errors import VerificationError

LAYOUT_FILE = "layout.json"
LINKS_DIR = "links"


@dataclass(frozen=True)
class StepSpec:
    """One recorded stage: artifact paths (relative to the records root) and rules."""

    name: str
    materials: tuple[str, ...]
    products: tuple[str, ...]
    material_rules: tuple[str, ...]
    product_rules: tuple[str, ...]


STEPS: tuple[StepSpec, ...] = (
    StepSpec("vendor", ("release.toml",), ("vendor",),
             ("ALLOW release.toml", "DISALLOW *"),
             ("CREATE vendor/*", "DISALLOW *")),
    StepSpec("sbom", ("dist/oci/index.json", "locks/runtime.txt"), ("attestations/sbom.cdx.json",),
             ("ALLOW dist/oci/index.json", "ALLOW locks/runtime.txt", "DISALLOW *"),
             ("CREATE attestations/sbom.cdx.json", "DISALLOW *")),
    StepSpec("attest", ("attestations/sbom.cdx.json", "provenance.json", "vendor"),
             ("attestations/provenance.dsse.json", "attestations/sbom.dsse.json", "attestations/checks.dsse.json"),
             ("MATCH attestations/sbom.cdx.json WITH PRODUCTS FROM sbom",
              "MATCH vendor/* WITH PRODUCTS FROM vendor", "ALLOW provenance.json", "DISALLOW *"),
             ("CREATE attestations/*.dsse.json", "DISALLOW *")),
    StepSpec("submission",
             ("attestations/provenance.dsse.json", "attestations/sbom.dsse.json", "attestations/checks.dsse.json"),
             ("submission.json",),
             ("MATCH attestations/*.dsse.json WITH PRODUCTS FROM attest", "DISALLOW *"),
             ("CREATE submission.json", "DISALLOW *")),
)


def _key_dict(key: SSlibKey) -> dict:
    return {**key.to_dict(), "keyid": key.keyid}


@contextmanager
def _cwd(path: Path):
    # in-toto records artifact paths relative to a base path; cwd keeps them stable too.
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def _spec(name: str) -> StepSpec:
    for s in STEPS:
        if s.name == name:
            return s
    raise VerificationError(f"no in-toto step named {name!r}", expected=[s.name for s in STEPS], actual=name)


def record(step: str, root: Path, signer: CryptoSigner, *, materials: Sequence[str] | None = None,
           products: Sequence[str] | None = None) -> Path:
    """Sign a link for `step` with the hashes of its materials and products under `root`."""
    spec = _spec(step)
    root = Path(root)
    mats = [p for p in (materials or spec.materials) if (root / p).exists()]
    prods = [p for p in (products or spec.products) if (root / p).exists()]
    link = Link(
        name=step,
        materials=record_artifacts_as_dict(mats, base_path=str(root)),
        products=record_artifacts_as_dict(prods, base_path=str(root)),
        command=["python", "-m", "pipeline", step],
        byproducts={}, environment={},
    )
    env = Envelope.from_signable(link)
    env.create_signature(signer)
    out = root / "attestations" / LINKS_DIR / f"{step}.{signer.public_key.keyid[:8]}.link"
    out.parent.mkdir(parents=True, exist_ok=True)
    env.dump(str(out))
    return out


def write_layout(root: Path, signer: CryptoSigner, *, valid_days: int = 365) -> Path:
    """The supply-chain layout: every step, signed only by the release key."""
    key = _key_dict(signer.public_key)
    layout = Layout()
    layout.keys = {key["keyid"]: key}
    layout.expires = (datetime.now(timezone.utc) + timedelta(days=valid_days)).strftime("%Y-%m-%dT%H:%M:%SZ")
    for spec in STEPS:
        step = Step(name=spec.name, pubkeys=[key["keyid"]], threshold=1)
        step.set_expected_command_from_string(f"python -m pipeline {spec.name}")
        for rule in spec.material_rules:
            step.add_material_rule_from_string(rule)
        for rule in spec.product_rules:
            step.add_product_rule_from_string(rule)
        layout.steps.append(step)
    env = Envelope.from_signable(layout)
    env.create_signature(signer)
    out = Path(root) / "attestations" / LAYOUT_FILE
    out.parent.mkdir(parents=True, exist_ok=True)
    env.dump(str(out))
    return out


def verify(root: Path, key: SSlibKey) -> None:
    """in-toto verification of the layout and links, then the records against the last products."""
    from in_toto.exceptions import LinkNotFoundError
    from in_toto.verifylib import in_toto_verify

    root = Path(root)
    att = root / "attestations"
    try:
        layout = Metadata.load(str(att / LAYOUT_FILE))
    except FileNotFoundError:
        raise VerificationError(f"attestations/{LAYOUT_FILE} is missing") from None
    try:
        with _cwd(root):
            in_toto_verify(layout, {key.keyid: _key_dict(key)}, link_dir_path=str(att / LINKS_DIR),
                           persist_inspection_links=False)
    except LinkNotFoundError as exc:
        raise VerificationError(f"in-toto: a stage link is missing: {exc}") from None
    except Exception as exc:  # in-toto's errors share no base class; each is a verification failure
        raise VerificationError(f"in-toto verification failed: {type(exc).__name__}: {exc}") from None
    last: dict[str, str] = {}
    for spec in STEPS:
        link = Metadata.load(str(att / LINKS_DIR / f"{spec.name}.{key.keyid[:8]}.link")).get_payload()
        last.update({p: h["sha256"] for p, h in deepcopy(link.products).items()})
    for path, expected in sorted(last.items()):
        on_disk = root / path
        if path.startswith("dist/") or not on_disk.exists():
            continue  # build outputs are not part of the committed records
        actual = sha256_file(on_disk)
        if actual != expected:
            raise VerificationError(f"{path} differs from the product its stage recorded", expected=expected,
                                    actual=actual)
