"""Licences in the SBOM, and the audit's own checks of it (license-expression, coverage).

The SBOM writer takes each licence as the image states it (Debian's DEP-5 copyright files,
Python core metadata) through cyclonedx-python-lib's factory; the audit checks every
licence with license-expression and every installed package against the image's files,
without the writer's code. Each check is shown refusing a broken SBOM.
"""

from __future__ import annotations

import email.message
import hashlib
import json
import re

import pytest

from pipeline.audit import sbom_checks
from pipeline.errors import ConfigError, VerificationError
from pipeline.image.oci.files import open_image
from pipeline.records import sbom, sbom_licenses

from .conftest import BASE_FILES_COPYRIGHT, LIBC6_COPYRIGHT, SITE, make_image


def _generate(img, monkeypatch) -> dict:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    return json.loads(sbom.generate(img.layout, name=img.name, app_dir="/opt/arena", first_party_license="MIT"))


def _components(doc: dict) -> dict[str, dict]:
    return {c["name"]: c for c in doc["components"]}


def _props(component: dict) -> dict[str, str]:
    return {p["name"]: p["value"] for p in component.get("properties", [])}


# ------------------------------------------------------------------ reading licences


def test_a_dep5_copyright_file_names_each_licence_once_in_order():
    text = BASE_FILES_COPYRIGHT + b"\nFiles: src/extra/*\nCopyright: someone\nLicense: GPL-2+\n"
    assert sbom_licenses.debian_licenses(text) == ("GPL-2+", "BSD-3-clause")


def test_the_header_licence_of_a_dep5_file_comes_first():
    text = (
        b"Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
        b"License: Apache-2.0\n\nFiles: *\nCopyright: x\nLicense: MIT\n"
    )
    assert sbom_licenses.debian_licenses(text) == ("Apache-2.0", "MIT")


def test_a_free_form_copyright_file_gives_no_licence():
    """Guessing from a free-form file (it quotes or refers to several licences) is not done."""
    assert sbom_licenses.debian_licenses(LIBC6_COPYRIGHT) == ()
    assert sbom_licenses.debian_licenses(b"") == ()


def test_the_library_factory_decides_id_expression_or_name():
    def shown(values):
        out = []
        for lic in sbom_licenses.cyclonedx_licenses(values):
            out.append(
                ("expression", lic.value) if hasattr(lic, "value") else ("id", lic.id) if lic.id else ("name", lic.name)
            )
        return out

    assert shown(["MIT"]) == [("id", "MIT")]
    # exceptiongroup's trove classifier name: not an SPDX expression, so a named licence.
    assert shown(["MIT License"]) == [("name", "MIT License")]
    assert shown(["Apache-2.0 OR MIT"]) == [("expression", "Apache-2.0 OR MIT")]
    assert shown(["GPL-2+"]) == [("name", "GPL-2+")]
    # Several values cannot hold an expression (CycloneDX): it is kept as a name, text unchanged.
    assert sorted(shown(["Apache-2.0 OR MIT", "GPL-2+", "GPL-2+"])) == [
        ("name", "Apache-2.0 OR MIT"),
        ("name", "GPL-2+"),
    ]
    assert shown([None, " "]) == []


def _meta(**fields) -> email.message.Message:
    meta = email.message.Message()
    for key, values in fields.items():
        for value in values if isinstance(values, list) else [values]:
            meta[key.replace("_", "-")] = value
    return meta


MIT_CLASSIFIER = "License :: OSI Approved :: MIT License"
BSD_CLASSIFIER = "License :: OSI Approved :: BSD License"


@pytest.mark.parametrize(
    "fields, expected",
    [
        # License-Expression first, whatever else the metadata says.
        (
            {"License_Expression": "Apache-2.0 OR MIT", "License": "BSD", "Classifier": MIT_CLASSIFIER},
            "Apache-2.0 OR MIT",
        ),
        # The License field when the library's factory reads it as SPDX.
        ({"License": "Apache-2.0", "Classifier": MIT_CLASSIFIER}, "Apache-2.0"),
        # A classifier that names one SPDX licence, before a License field that is no SPDX id.
        ({"License": "MIT License", "Classifier": MIT_CLASSIFIER}, "MIT"),
        ({"Classifier": ["Programming Language :: Python", MIT_CLASSIFIER]}, "MIT"),
        # A family classifier names no one licence: the License field's name, else the classifier's.
        ({"License": "3-clause BSD", "Classifier": BSD_CLASSIFIER}, "3-clause BSD"),
        ({"Classifier": BSD_CLASSIFIER}, "BSD License"),
        # Two classifiers of different licences: not read as one.
        ({"Classifier": [MIT_CLASSIFIER, "License :: OSI Approved :: ISC License (ISCL)"]}, "MIT License"),
        # A whole licence text in the License field is no name.
        ({"License": "Copyright (c) someone\n\nPermission is hereby granted"}, None),
        ({"License": "UNKNOWN"}, None),
        ({}, None),
    ],
)
def test_python_metadata_licence_order(fields, expected):
    assert sbom_licenses.python_license(_meta(**fields)) == expected


def test_every_mapped_classifier_is_one_spdx_licence():
    from license_expression import LicenseSymbol, get_spdx_licensing

    licensing = get_spdx_licensing()
    for classifier, spdx in sbom_licenses.CLASSIFIER_SPDX.items():
        parsed = licensing.parse(spdx, strict=True)
        assert isinstance(parsed, LicenseSymbol) and not licensing.unknown_license_keys(parsed), classifier


def test_debian_packages_carry_their_copyright_files_licences(small_image, monkeypatch):
    comps = _components(_generate(small_image, monkeypatch))
    base = comps["base-files"]
    assert sorted(base["licenses"], key=json.dumps) == [
        {"license": {"id": "BSD-3-Clause"}},
        {"license": {"name": "GPL-2+"}},
    ]
    assert _props(base)["arena:copyright-file"] == "/usr/share/doc/base-files/copyright"
    # libc6's doc directory is a link to libc-common's; that file is free-form, and not the one
    # the repository's reviewed table read (its hash differs): named, no licence.
    libc = comps["libc6"]
    assert "licenses" not in libc
    assert _props(libc)["arena:copyright-file"] == "/usr/share/doc/libc-common/copyright"


def test_exceptiongroup_classifier_is_the_spdx_id_it_names(tmp_path, monkeypatch):
    meta = (
        b"Metadata-Version: 2.1\nName: exceptiongroup\nVersion: 1.3.2\n"
        b"Classifier: License :: OSI Approved :: MIT License\n\n"
    )
    img = make_image(
        tmp_path,
        base_files={
            f"{SITE}/exceptiongroup-1.3.2.dist-info/METADATA": meta,
            f"{SITE}/exceptiongroup-1.3.2.dist-info/RECORD": b"",
        },
    )
    doc = _generate(img, monkeypatch)
    assert _components(doc)["exceptiongroup"]["licenses"] == [{"license": {"id": "MIT"}}]
    assert sbom_checks.licence_problems(doc) == []


def test_coverage_line():
    comps = [{"licenses": [{"license": {"id": "MIT"}}]}, {}, {"licenses": []}]
    assert sbom_licenses.coverage_line(comps) == "1 of 3 components (33.3%) carry a licence"


# ------------------------------------------------------------------ the audit's licence check


def test_the_audit_accepts_the_sboms_own_licences(small_image, monkeypatch):
    doc = _generate(small_image, monkeypatch)
    sbom_checks.check_licences(doc)


@pytest.mark.parametrize(
    "entry, problem",
    [
        ({"expression": "MIT License"}, "expression 'MIT License' is not SPDX: Invalid symbols sequence"),
        ({"expression": "MIT AND Foo-Bar"}, "expression 'MIT AND Foo-Bar' names licences SPDX does not list: Foo-Bar"),
        ({"expression": "MIT AND"}, "expression 'MIT AND' is not SPDX"),
        ({"license": {"id": "GPL-2+"}}, "id 'GPL-2+' is not one SPDX licence id"),
        ({"license": {"name": " "}}, "a licence with neither an id nor a name"),
    ],
)
def test_the_audit_refuses_a_licence_that_is_not_spdx(small_image, monkeypatch, entry, problem):
    doc = _generate(small_image, monkeypatch)
    target = next(c for c in doc["components"] if c["name"] == "requests")
    target["licenses"] = [entry]
    with pytest.raises(VerificationError) as exc:
        sbom_checks.check_licences(doc)
    message = exc.value.one_line()
    assert message.startswith(
        "1 licence(s) of the SBOM are not valid SPDX (license-expression); expected SPDX "
        "ids, SPDX expressions or named licences, got "
    )
    assert f"{target['bom-ref']}: {problem}" in message


def test_the_audit_accepts_license_refs_and_names():
    doc = {
        "components": [
            {"name": "a", "licenses": [{"expression": "LicenseRef-vendor-NOTICE OR MIT"}]},
            {"name": "b", "licenses": [{"license": {"name": "GPL-2+ with OpenSSL exception"}}]},
            {"name": "c", "licenses": [{"license": {"id": "LGPL-2.1+"}}]},
        ]
    }
    assert sbom_checks.licence_problems(doc) == []


# ------------------------------------------------------------------ the audit's coverage check


def test_the_audit_finds_every_installed_package_in_the_sbom(small_image, monkeypatch):
    doc = _generate(small_image, monkeypatch)
    sbom_checks.check_coverage(doc, open_image(small_image.layout), "/opt/arena")


def test_the_audit_refuses_an_sbom_missing_a_debian_package(small_image, monkeypatch):
    doc = _generate(small_image, monkeypatch)
    doc["components"] = [c for c in doc["components"] if c["name"] != "libc6"]
    with pytest.raises(VerificationError) as exc:
        sbom_checks.check_coverage(doc, open_image(small_image.layout), "/opt/arena")
    assert exc.value.one_line().startswith(
        "the SBOM has no component for 1 package(s) or file(s) installed in the image; expected a component "
        "for every dpkg package, Python distribution and application file, got deb libc6 2.36-9+deb12u4"
    )


def test_the_audit_finds_a_distribution_the_sbom_writer_does_not_look_for(tmp_path, monkeypatch):
    """Python metadata outside site-packages: the writer passes it over, the audit reads the image
    on its own terms and names what is missing."""
    meta = b"Metadata-Version: 2.1\nName: Hidden_Tool\nVersion: 1.0\n\n"
    img = make_image(tmp_path, base_files={"opt/tool/hidden_tool-1.0.dist-info/METADATA": meta})
    doc = _generate(img, monkeypatch)
    with pytest.raises(VerificationError, match="got pypi hidden-tool 1.0"):
        sbom_checks.check_coverage(doc, open_image(img.layout), "/opt/arena")


def test_the_audit_refuses_a_component_the_image_does_not_hold(small_image, monkeypatch):
    doc = _generate(small_image, monkeypatch)
    doc["components"].append(
        {
            "type": "library",
            "name": "ghost",
            "version": "1",
            "purl": "pkg:deb/debian/ghost@1?arch=amd64",
            "bom-ref": "ghost",
        }
    )
    with pytest.raises(
        VerificationError,
        match="the SBOM lists 1 component.s. the image does not hold; "
        "expected only what the image's layers install, got deb ghost 1",
    ):
        sbom_checks.check_coverage(doc, open_image(small_image.layout), "/opt/arena")


# ------------------------------------------------------------------ the reviewed table

LIBC6_SHA256 = hashlib.sha256(LIBC6_COPYRIGHT).hexdigest()
LIBC6_QUOTE = "Most of the GNU C library is under the following copyright"
OPENENV_LICENSE = b"BSD 3-Clause License\n\n(c) Someone.\n\nRedistribution and use ...\n"


def _table(
    *,
    sha256: str = LIBC6_SHA256,
    quote: str = LIBC6_QUOTE,
    expression: str = "LGPL-2.1-or-later AND LicenseRef-copyright-file-other",
    extra: str = "",
):
    return sbom_licenses.ReviewedTable.parse(
        f'''
[[deb]]
names = ["libc6", "libc-bin"]
sha256 = "{sha256}"
expression = "{expression}"
quote = "{quote}"
{extra}''',
        "test-table.toml",
    )


def _generate_with(img, monkeypatch, table) -> dict:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    return json.loads(
        sbom.generate(img.layout, name=img.name, app_dir="/opt/arena", first_party_license="MIT", reviewed=table)
    )


def test_a_reviewed_free_form_file_gives_its_licence(small_image, monkeypatch, capsys):
    doc = _generate_with(small_image, monkeypatch, _table())
    libc = _components(doc)["libc6"]
    assert libc["licenses"] == [{"expression": "LGPL-2.1-or-later AND LicenseRef-copyright-file-other"}]
    assert _props(libc)["arena:license-reviewed"] == "test-table.toml"
    assert _props(libc)["arena:copyright-file"] == "/usr/share/doc/libc-common/copyright"
    # The DEP-5 reading of another package is not touched, and the audit accepts the expression.
    assert "arena:license-reviewed" not in _props(_components(doc)["base-files"])
    sbom_checks.check_licences(doc)
    assert "libc6" not in capsys.readouterr().err


def test_a_copyright_file_whose_hash_differs_gets_no_licence(small_image, monkeypatch, capsys):
    """The file changed since it was read (a new upload, an edit): the old reading is not
    carried over; the component has no licence, the figure drops, and the writer says why."""
    reviewed_doc = _generate_with(small_image, monkeypatch, _table())
    doc = _generate_with(small_image, monkeypatch, _table(sha256="0" * 64))
    libc = _components(doc)["libc6"]
    assert "licenses" not in libc and "arena:license-reviewed" not in _props(libc)
    assert sbom_licenses.coverage(doc["components"])[0] == sbom_licenses.coverage(reviewed_doc["components"])[0] - 1
    err = capsys.readouterr().err
    assert (
        f"sbom: deb libc6: /usr/share/doc/libc-common/copyright (sha256 {LIBC6_SHA256}) is not the file "
        f"reviewed ({'0' * 64}): no licence claimed; review it again in test-table.toml"
    ) in err


def test_a_table_entry_whose_quote_is_not_in_the_file_is_refused(small_image, monkeypatch):
    """The hash is the file's, but the passage the reviewer quoted is not in it: the entry
    was not read from this file, and the SBOM is not written with it."""
    with pytest.raises(ConfigError) as exc:
        _generate_with(small_image, monkeypatch, _table(quote="either version 2.1 of the License"))
    message = exc.value.one_line()
    assert message.startswith(
        "test-table.toml: the reviewed licence of deb libc6 quotes text its file does not "
        "hold; expected either version 2.1 of the License, got "
        f"/usr/share/doc/libc-common/copyright (sha256 {LIBC6_SHA256})"
    )


def test_a_quote_matches_across_line_breaks():
    data = b"The GNU C Library is free software;\n   you can redistribute it\n"
    assert sbom_licenses.quote_in("free software; you can redistribute", data)
    assert not sbom_licenses.quote_in("free software; you may redistribute", data)


@pytest.mark.parametrize(
    "expression, problem",
    [
        ("MIT License", "expression 'MIT License' is not SPDX"),
        ("GPL-2+", "expression 'GPL-2+' names licences SPDX does not list: GPL-2+"),
        ("LGPL-2.1-or-later AND", "expression 'LGPL-2.1-or-later AND' is not SPDX"),
        ("LGPL-2.1-or-later AND Public-Domain", "names licences SPDX does not list: Public-Domain"),
        ("GPL-3.0-or-later WITH No-Such-exception", "expression 'GPL-3.0-or-later WITH No-Such-exception' is not SPDX"),
        ("", "expression '' is empty"),
    ],
)
def test_an_invalid_expression_in_the_table_is_refused(expression, problem):
    with pytest.raises(ConfigError) as exc:
        _table(expression=expression)
    message = exc.value.one_line()
    assert message.startswith("test-table.toml: [[deb]] #1 (libc6, libc-bin): ")
    assert problem in message


@pytest.mark.parametrize(
    "change, refused",
    [
        ({"sha256": "ABC"}, "`sha256` is not a sha256 hex digest"),
        ({"quote": " "}, "`quote` is not a short passage"),
        ({"quote": "x " * 200}, "`quote` is not a short passage"),
        ({"extra": "licence = 'MIT'"}, "has unknown keys"),
    ],
)
def test_a_malformed_table_entry_is_refused(change, refused):
    with pytest.raises(ConfigError, match=re.escape(refused)):
        _table(**change)


def test_one_file_of_a_package_is_read_once():
    text = ('[[deb]]\nnames = ["a"]\nsha256 = "' + "1" * 64 + '"\nexpression = "MIT"\nquote = "q"\n') * 2
    with pytest.raises(ConfigError, match="deb a has two entries for one file"):
        sbom_licenses.ReviewedTable.parse(text, "t")


def test_the_repositorys_table_passes_the_audits_expression_check():
    """Every expression of the committed table, read by the audit's licence check (the one
    license-expression check, not the table's loader), and every entry keyed by a package
    and a file hash."""
    table = sbom_licenses.reviewed_table()
    assert table.source == "pipeline/records/reviewed_licenses.toml"
    entries = [e for by_hash in table.entries.values() for e in by_hash.values()]
    assert len(entries) >= 20
    for e in entries:
        doc = {"components": [{"name": e.name, "licenses": [{"expression": e.expression}]}]}
        assert sbom_checks.licence_problems(doc) == [], e
        assert re.fullmatch(r"[0-9a-f]{64}", e.sha256) and e.quote.strip() and e.kind in ("deb", "pypi")


def test_a_distribution_without_licence_metadata_gets_its_reviewed_licence_file(tmp_path, monkeypatch, capsys):
    """openenv-core names only its License-File; the table's reading of that file's hash is used."""
    meta = b"Metadata-Version: 2.4\nName: openenv-core\nVersion: 0.3.0\nLicense-File: LICENSE\n\n"
    dist = f"{SITE}/openenv_core-0.3.0.dist-info"
    img = make_image(
        tmp_path,
        base_files={f"{dist}/METADATA": meta, f"{dist}/RECORD": b"", f"{dist}/licenses/LICENSE": OPENENV_LICENSE},
    )
    table = """
[[pypi]]
names = ["OpenEnv_Core"]
sha256 = "{sha}"
expression = "BSD-3-Clause"
quote = "BSD 3-Clause License"
"""
    ok = sbom_licenses.ReviewedTable.parse(table.format(sha=hashlib.sha256(OPENENV_LICENSE).hexdigest()), "t")
    assert _components(_generate_with(img, monkeypatch, ok))["openenv-core"]["licenses"] == [
        {"license": {"id": "BSD-3-Clause"}}
    ]
    stale = sbom_licenses.ReviewedTable.parse(table.format(sha="2" * 64), "t")
    assert "licenses" not in _components(_generate_with(img, monkeypatch, stale))["openenv-core"]
    assert (
        f"sbom: pypi openenv-core: /{dist}/licenses/LICENSE (sha256 "
        f"{hashlib.sha256(OPENENV_LICENSE).hexdigest()}) is not the file reviewed"
    ) in capsys.readouterr().err


def test_the_licences_directory_carries_the_licences_of_what_it_holds(tmp_path, monkeypatch):
    """The project's own LICENSE file is the project's licence; a vendored source's licence file its source's."""
    from pipeline.config import Source

    source = Source(
        name="metaharness-tasks",
        repository="https://example.invalid/m",
        revision="0" * 40,
        path="tasks.py",
        sha256="0" * 64,
        size=1,
        license="Apache-2.0",
        license_file="LICENSE",
        profiles=("arena",),
    )
    img = make_image(
        tmp_path,
        app_files={
            "opt/arena/env/app.py": b"",
            "opt/arena/licenses/LICENSE": b"MIT License\n",
            "opt/arena/licenses/metaharness-tasks.LICENSE": b"Apache\n",
            "opt/arena/licenses/unknown.LICENSE": b"?\n",
        },
    )
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    doc = json.loads(
        sbom.generate(img.layout, name=img.name, app_dir="/opt/arena", sources=[source], first_party_license="MIT")
    )
    comps = _components(doc)
    assert comps["/opt/arena/licenses/LICENSE"]["licenses"] == [{"license": {"id": "MIT"}}]
    assert comps["/opt/arena/licenses/metaharness-tasks.LICENSE"]["licenses"] == [{"license": {"id": "Apache-2.0"}}]
    assert "licenses" not in comps["/opt/arena/licenses/unknown.LICENSE"]


def test_unlicensed_line_names_what_has_no_licence():
    comps = [{"name": "b", "licenses": [{"license": {"id": "MIT"}}]}, {"name": "c"}, {"name": "a", "licenses": []}]
    assert sbom_licenses.unlicensed_line(comps) == "no licence: a, c"
    assert sbom_licenses.unlicensed_line(comps, shown=1) == "no licence: a and 1 more"
    assert sbom_licenses.unlicensed_line(comps[:1]) is None
