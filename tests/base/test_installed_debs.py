"""`installed_debs`: the packages a rootfs installed, with the sha256 of the .deb apt
resolved each one to (read from the suite's index, of which only the installed packages'
paragraphs are parsed)."""

from __future__ import annotations

import pytest

from pipeline.errors import ReleaseError
from pipeline.image.base import Deb, debian_python_version, installed_debs

STATUS = """\
Package: bash
Status: install ok installed
Architecture: amd64
Version: 5.2.15-2+b13

Package: gone
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0

Package: zlib1g
Status: install ok installed
Architecture: amd64
Version: 1:1.2.13
Description: compression library
 a continuation line: not a field
"""

INDEX = """\
Package: apt
Version: 2.6.1
Architecture: amd64
SHA256: {apt}

Package: bash
Version: 5.2.15-2+b13
Architecture: amd64
SHA256: {bash}

Package: bash
Version: 5.2.15-2+b12
Architecture: amd64
SHA256: {old}

Package: zlib1g
Version: 1:1.2.13
Architecture: amd64
SHA256: {zlib}
"""
HASHES = {"apt": "a" * 64, "bash": "b" * 64, "old": "c" * 64, "zlib": "d" * 64}


def _rootfs(tmp_path, status: str, index: str):
    root = tmp_path / "key"
    (root / "var" / "lib" / "dpkg").mkdir(parents=True)
    (root / "var" / "lib" / "dpkg" / "status").write_text(status)
    (tmp_path / "key.Packages").write_text(index)
    return root


def test_installed_packages_get_the_sha256_of_the_version_installed(tmp_path):
    root = _rootfs(tmp_path, STATUS, INDEX.format(**HASHES))
    assert installed_debs(root) == (
        Deb("bash", "5.2.15-2+b13", "amd64", "b" * 64),
        Deb("zlib1g", "1:1.2.13", "amd64", "d" * 64),
    )


def test_an_installed_package_missing_from_the_index_is_an_error(tmp_path):
    index = INDEX.format(**HASHES).replace("Package: zlib1g", "Package: zlib1g-dev")
    root = _rootfs(tmp_path, STATUS, index)
    with pytest.raises(ReleaseError, match="installed package zlib1g 1:1.2.13 is not in the apt index"):
        installed_debs(root)


def test_a_version_the_index_does_not_hold_is_an_error(tmp_path):
    root = _rootfs(tmp_path, STATUS.replace("5.2.15-2+b13", "5.2.15-2+b14"), INDEX.format(**HASHES))
    with pytest.raises(ReleaseError, match="installed package bash 5.2.15-2\\+b14 is not in the apt index"):
        installed_debs(root)


def test_the_python_version_is_the_installed_python3_11s(tmp_path):
    status = (
        STATUS
        + """
Package: python3.11
Status: install ok installed
Description: Interactive high-level object-oriented language (version 3.11)
 Version: 9.9.9 in a continuation line is no field
Version: 3.11.2-6+deb12u6
"""
    )
    assert debian_python_version(_rootfs(tmp_path, status, "")) == "3.11.2"
    gone = status.replace("install ok installed\nDescription", "deinstall ok config-files\nDescription")
    with pytest.raises(ReleaseError, match="python3.11 is not installed"):
        debian_python_version(_rootfs(tmp_path / "gone", gone, ""))
