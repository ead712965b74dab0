"""The release stages as in-toto links, recorded while they run, and the layout that chains them.

`StageRecorder.step(name)` wraps a stage of the release: it hashes the stage's
materials when the stage starts (in-toto's runlib, in-process) and its products when
it ends, with the command that actually ran (the release's own command line). The
records are staged (`.release/staging/<id>/`) before they are installed, so each
path is looked up in the staging directory first, then in the checkout; the names
recorded are the final ones, relative to the checkout.

`write` puts the links into `attestations/links/<step>.<keyid8>.link` and the layout
into `attestations/layout.json`. With key signing both are DSSE envelopes signed by
the release key (so `in-toto-verify` can check them); with sigstore signing they are
unsigned envelopes. In both modes the release statement (pipeline.records.statement)
binds each file's sha256 to the release signature.

Layout expiry is a release.toml policy (`[intoto] layout_valid_days`, default 365).
`verify` checks that the layout was valid when the release was made (the signed
release time); that it has expired since is reported as information, so auditing
old records does not start failing on a date.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from copy import deepcopy
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from in_toto.models.layout import Layout, Step
from in_toto.models.link import Link
from in_toto.models.metadata import Envelope, Metadata
from in_toto.runlib import record_artifacts_as_dict
from securesystemslib.signer import KEY_FOR_TYPE_AND_SCHEME, SigstoreKey

from pipeline._io import is_tree_path, sha256_file
from pipeline.config import ReleaseConfig
from pipeline.errors import VerificationError
from pipeline.formats import parse_utc_time, utc_time

LAYOUT_FILE = "layout.json"
LINKS_DIR = "links"
# A keyless release names its sigstore identity as the layout's functionary; securesystemslib
# loads such keys only once they are registered (its documented opt-in for SigstoreKey).
KEY_FOR_TYPE_AND_SCHEME.setdefault((SigstoreKey.DEFAULT_KEY_TYPE, SigstoreKey.DEFAULT_SCHEME), SigstoreKey)


@dataclass(frozen=True)
class StepSpec:
    """One recorded stage: artifact paths (relative to the checkout) and its rules."""

    name: str
    materials: tuple[str, ...]
    products: tuple[str, ...]
    material_rules: tuple[str, ...]
    product_rules: tuple[str, ...]


def steps(suffix: str) -> tuple[StepSpec, ...]:
    """The release's steps; `suffix` is the signer's attestation suffix (.dsse.json/.sigstore.json)."""
    statements = tuple(f"attestations/{k}{suffix}" for k in ("provenance", "sbom", "checks"))
    return (
        StepSpec(
            "vendor",
            ("release.toml",),
            ("vendor",),
            ("ALLOW release.toml", "DISALLOW *"),
            ("ALLOW vendor/*", "DISALLOW *"),
        ),
        StepSpec(
            "build",
            ("release.toml", "locks/runtime.txt", "vendor", "env"),
            ("dist/build.json", "dist/oci/index.json"),
            (
                "MATCH vendor/* WITH PRODUCTS FROM vendor",
                "ALLOW release.toml",
                "ALLOW locks/runtime.txt",
                "ALLOW env/*",
                "DISALLOW *",
            ),
            ("CREATE dist/build.json", "CREATE dist/oci/index.json", "DISALLOW *"),
        ),
        StepSpec(
            "sbom",
            ("dist/oci/index.json", "locks/runtime.txt"),
            ("attestations/sbom.cdx.json",),
            ("MATCH dist/oci/index.json WITH PRODUCTS FROM build", "ALLOW locks/runtime.txt", "DISALLOW *"),
            ("CREATE attestations/sbom.cdx.json", "DISALLOW *"),
        ),
        StepSpec(
            "verify",
            ("dist/build.json",),
            ("attestations/checks.json",),
            ("MATCH dist/build.json WITH PRODUCTS FROM build", "DISALLOW *"),
            ("CREATE attestations/checks.json", "DISALLOW *"),
        ),
        StepSpec(
            "attest",
            ("attestations/sbom.cdx.json", "attestations/checks.json", "vendor", "locks/runtime.txt", "release.toml"),
            ("provenance.json",) + statements,
            (
                "MATCH attestations/sbom.cdx.json WITH PRODUCTS FROM sbom",
                "MATCH attestations/checks.json WITH PRODUCTS FROM verify",
                "MATCH vendor/* WITH PRODUCTS FROM vendor",
                "ALLOW locks/runtime.txt",
                "ALLOW release.toml",
                "DISALLOW *",
            ),
            ("CREATE provenance.json",) + tuple(f"CREATE {s}" for s in statements) + ("DISALLOW *",),
        ),
        StepSpec(
            "submission",
            ("attestations/checks.json", "release.toml"),
            ("submission.json",),
            ("MATCH attestations/checks.json WITH PRODUCTS FROM verify", "ALLOW release.toml", "DISALLOW *"),
            ("CREATE submission.json", "DISALLOW *"),
        ),
    )


def valid_days(cfg: ReleaseConfig) -> int:
    """`[intoto] layout_valid_days` of release.toml (how long a new layout is valid; its rule and
    default are the model's, checked when the file is loaded)."""
    return cfg.intoto.layout_valid_days


def link_name(step: str, keyid: str) -> str:
    return f"{step}.{keyid[:8]}.link"


@contextmanager
def _cwd(path: Path) -> Iterator[None]:
    # in-toto's rule checks resolve nothing on disk, but its loaders take paths relative to cwd.
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


class StageRecorder:
    """Records each stage of one release as an in-toto link while the stage runs."""

    def __init__(self, repo: Path, staging: Path, command: Sequence[str], suffix: str) -> None:
        self.repo, self.staging = Path(repo), Path(staging)
        self.command = list(command)
        self.specs = {s.name: s for s in steps(suffix)}
        self.links: dict[str, Link] = {}

    def _artifacts(self, paths: Sequence[str]) -> dict:
        """Hashes of `paths`, each from the staging directory if staged there, else the checkout."""
        out: dict = {}
        for base in (self.staging, self.repo):
            here = [p for p in paths if (base / p).exists() and p not in out]
            if here:
                out.update(record_artifacts_as_dict(here, base_path=str(base), follow_symlink_dirs=True))
        return out

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Materials hashed now, products when the stage ends; nothing recorded if it fails."""
        spec = self.specs[name]
        materials = self._artifacts(spec.materials)
        yield
        self.links[name] = Link(
            name=name,
            materials=materials,
            products=self._artifacts(spec.products),
            command=self.command,
            byproducts={},
            environment={},
        )

    def write(self, att_dir: Path, functionary, *, sign, released_on: datetime, days: int) -> list[Path]:
        """Links and layout into `att_dir`; `sign(envelope)` adds the signature (or nothing)."""
        missing = [n for n in self.specs if n not in self.links]
        if missing:
            raise VerificationError("in-toto: stages were not recorded", expected=list(self.specs), actual=missing)
        written = []
        for name, spec_link in self.links.items():
            env = Envelope.from_signable(spec_link)
            sign(env)
            out = Path(att_dir) / LINKS_DIR / link_name(name, functionary.keyid)
            out.parent.mkdir(parents=True, exist_ok=True)
            env.dump(str(out))
            written.append(out)
        env = Envelope.from_signable(layout(functionary, self.specs.values(), self.command, released_on, days))
        sign(env)
        out = Path(att_dir) / LAYOUT_FILE
        env.dump(str(out))
        written.append(out)
        return written


def layout(functionary, specs, command: Sequence[str], released_on: datetime, days: int) -> Layout:
    """The supply-chain layout: every step, the release signer as its only functionary."""
    key = {**functionary.to_dict(), "keyid": functionary.keyid}
    lay = Layout()
    lay.keys = {functionary.keyid: key}
    lay.expires = utc_time(released_on + timedelta(days=days))
    for spec in specs:
        step = Step(name=spec.name, pubkeys=[functionary.keyid], threshold=1)
        step.expected_command = list(command)
        for rule in spec.material_rules:
            step.add_material_rule_from_string(rule)
        for rule in spec.product_rules:
            step.add_product_rule_from_string(rule)
        lay.steps.append(step)
    return lay


def _release_rules(suffix: str) -> list[tuple[str, list, list]]:
    """(step, material rules, product rules) of the release's own layout, as in-toto stores them."""
    out = []
    for spec in steps(suffix):
        step = Step(name=spec.name)
        for rule in spec.material_rules:
            step.add_material_rule_from_string(rule)
        for rule in spec.product_rules:
            step.add_product_rule_from_string(rule)
        out.append((spec.name, step.expected_materials, step.expected_products))
    return out


def _is_release_layout(lay: Layout, suffix: str) -> None:
    """The layout is the release's own: its steps and rules, and nothing for a verifier to run.

    Without it a layout of no steps (or of ALLOW * rules) verifies nothing and passes.
    """
    if lay.inspect:
        raise VerificationError(
            "in-toto: the layout has inspections (commands a verifier would run)",
            expected="none",
            actual=[i.name for i in lay.inspect],
        )
    want = _release_rules(suffix)
    got = [(st.name, st.expected_materials, st.expected_products) for st in lay.steps]
    if [w[0] for w in want] != [g[0] for g in got]:
        raise VerificationError(
            "in-toto: the layout's steps are not the release's",
            expected=[w[0] for w in want],
            actual=[g[0] for g in got],
        )
    for (name, materials, products), (_, got_materials, got_products) in zip(want, got):
        if (materials, products) != (got_materials, got_products):
            raise VerificationError(
                f"in-toto: the rules of step {name} are not the release's",
                expected={"materials": materials, "products": products},
                actual={"materials": got_materials, "products": got_products},
            )


def _links_only(chain: dict) -> dict:
    """{step: {keyid: Link}}; a layout in place of a link (an in-toto sublayout), or a link naming
    paths outside the records tree, is refused.

    in-toto would verify a sublayout recursively and run its inspections: commands from the
    records. The release writes links only, and the audit runs nothing it reads.
    """
    out: dict = {}
    for step, by_key in chain.items():
        out[step] = {}
        for keyid, metadata in by_key.items():
            payload = metadata.get_payload()
            if payload.type_ != "link":
                raise VerificationError(
                    f"in-toto: the metadata of step {step} is a {payload.type_}, not a link",
                    expected="link",
                    actual=payload.type_,
                    hint="a release delegates no step to a sublayout",
                )
            # Rules such as "ALLOW vendor/*" match "vendor/../../dev/zero" too, and in sigstore mode
            # the links are unsigned: a path outside the tree is refused before any rule or read.
            outside = sorted(a for a in (*payload.materials, *payload.products) if not is_tree_path(a))
            if outside:
                raise VerificationError(
                    f"in-toto: the link of step {step} names paths outside the records tree",
                    expected="relative paths without '..'",
                    actual=", ".join(outside),
                )
            out[step][keyid] = payload
    return out


def _sigstore_functionary(lay: Layout, identity: str) -> None:
    """In sigstore mode the layout's one functionary is the signer's sigstore identity, as a sigstore key."""
    named = sorted(k.get("keyval", {}).get("identity", "?") for k in lay.keys.values())
    _equal_functionaries(named, [identity])
    kinds = sorted({(k.get("keytype"), k.get("scheme")) for k in lay.keys.values()})
    want = [(SigstoreKey.DEFAULT_KEY_TYPE, SigstoreKey.DEFAULT_SCHEME)]
    if kinds != want:
        raise VerificationError(
            "in-toto: the layout's functionary is not a sigstore identity", expected=want, actual=kinds
        )


def verify(
    root: Path,
    *,
    key=None,
    released_on: datetime,
    now: datetime | None = None,
    identity: str | None = None,
    suffix: str | None = None,
) -> str:
    """in-toto verification of the layout and links, then the records against the last products.

    `key` (the trusted release key) checks the layout's and links' signatures; None in
    sigstore mode, where the release statement binds these files instead; `identity`
    (sigstore mode) is the verified signer the layout must name. `suffix` names the signed
    statements in the release's rules (default: by mode). The layout must be the release's own
    (steps, rules, no inspections). Returns a note on the layout's validity (expired since the
    release: information only).
    """
    from in_toto import verifylib

    from pipeline.records.signing import BUNDLE_SUFFIX, DSSE_SUFFIX

    suffix = suffix or (DSSE_SUFFIX if key is not None else BUNDLE_SUFFIX)
    root = Path(root)
    att = root / "attestations"
    try:
        metadata = Metadata.load(str(att / LAYOUT_FILE))
    except FileNotFoundError:
        raise VerificationError(
            f"attestations/{LAYOUT_FILE} is missing",
            hint="a release writes its layout with its links; the records are incomplete",
        ) from None
    except Exception as exc:  # in-toto's InvalidMetadata, json's errors: each means not a layout
        raise VerificationError(
            f"attestations/{LAYOUT_FILE} is not in-toto metadata",
            expected="a DSSE envelope holding an in-toto layout",
            actual=f"{type(exc).__name__}: {exc}".rstrip(": "),
        ) from None
    try:
        if key is not None:
            try:
                verifylib.verify_metadata_signatures(metadata, {key.keyid: {**key.to_dict(), "keyid": key.keyid}})
            except Exception:  # in-toto raises its own SignatureVerificationError without a message
                raise VerificationError(
                    f"in-toto: attestations/{LAYOUT_FILE} is not signed by the trusted key",
                    expected=key.keyid,
                    actual=", ".join(sorted(metadata.signatures)) or "no signature",
                ) from None
        lay = metadata.get_payload()
        if not isinstance(lay, Layout):
            raise VerificationError(
                f"attestations/{LAYOUT_FILE} does not hold a layout",
                expected="_type layout",
                actual=f"_type {getattr(lay, '_type', '?')}",
            )
        if key is not None and set(lay.keys) != {key.keyid}:
            raise VerificationError(
                "in-toto: the layout names other functionaries than the trusted key",
                expected=[key.keyid],
                actual=sorted(lay.keys),
            )
        if identity is not None:
            _sigstore_functionary(lay, identity)
        _is_release_layout(lay, suffix)
        expires = parse_utc_time(lay.expires)
        if released_on > expires:
            raise VerificationError(
                "in-toto: the layout had already expired when the release was made",
                expected=f"released before {lay.expires}",
                actual=f"released {utc_time(released_on)}",
            )
        with _cwd(root):
            chain = verifylib.load_links_for_layout(lay, str(att / LINKS_DIR))
            if key is not None:
                chain = verifylib.verify_link_signature_thresholds(lay, chain)
            chain = _links_only(chain)
            verifylib.verify_all_steps_command_alignment(lay, chain)
            if key is not None:
                verifylib.verify_threshold_constraints(lay, chain)
            reduced = verifylib.reduce_chain_links(chain)
            verifylib.verify_all_item_rules(lay.steps, reduced)
    except VerificationError:
        raise
    except Exception as exc:  # in-toto's errors share no base class; each is a verification failure
        raise VerificationError(f"in-toto verification failed: {type(exc).__name__}: {exc}") from None
    last: dict[str, str] = {}
    for step in lay.steps:
        link = reduced[step.name]
        link = link.get_payload() if hasattr(link, "get_payload") else link
        last.update({p: h["sha256"] for p, h in deepcopy(link.products).items()})
    for path, expected in sorted(last.items()):
        on_disk = root / path  # a tree path (_links_only); hashed only as a regular file
        if path.startswith("dist/"):
            continue  # build outputs are not part of the committed records
        if on_disk.is_symlink() or (on_disk.exists() and not on_disk.is_file()):
            raise VerificationError(
                f"in-toto: the product {path} is not a regular file",
                expected="a regular file",
                actual="a link" if on_disk.is_symlink() else "a special file or directory",
            )
        if not on_disk.exists():
            raise VerificationError(
                f"{path} is missing (the {_producer(lay, reduced, path)} step produced it)",
                hint="vendor/ is not committed: `python -m pipeline vendor` fetches the pinned files"
                if path.startswith("vendor/")
                else None,
            )
        actual = sha256_file(on_disk)
        if actual != expected:
            raise VerificationError(
                f"{path} differs from the product its stage recorded", expected=expected, actual=actual
            )
    now = now or datetime.now(UTC)
    state = "expired" if now > expires else "valid until"
    return f"layout {state} {lay.expires} (release {utc_time(released_on)}: valid then)"


def _equal_functionaries(named: list[str], signer: list[str]) -> None:
    if named != signer:
        raise VerificationError(
            "in-toto: the layout names another functionary than the release signer", expected=signer, actual=named
        )


def _producer(lay: Layout, reduced: dict, path: str) -> str:
    for step in reversed(lay.steps):
        link = reduced[step.name]
        link = link.get_payload() if hasattr(link, "get_payload") else link
        if path in link.products:
            return step.name
    return "?"
