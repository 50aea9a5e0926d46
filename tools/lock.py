"""The lock: every Python dependency this repository installs, at exact versions with hashes.

`pyproject.toml` keeps the ranges a library user needs; the lock files are what this repository runs:

- `requirements/dev.txt`: the package's runtime and dev dependencies and its build backend, for
  `make venv` (so CI and every developer) and the documentation build;
- `requirements/runtime.txt`: the runtime dependencies and the build backend only, at the same
  versions and hashes, for the image (Dockerfile) and the GPU machine's wheels (`make gpu-wheels`).

Both are universal (one file for every platform and Python >= 3.11) and installed with
`pip install --require-hashes --no-deps`, so nothing is resolved at install time.

`python -m tools.lock` (`make lock`) writes the lock again after `pyproject.toml` changed, keeping
every pin that still fits; `--upgrade` (`make upgrade`) moves every pin to the newest version the
ranges allow: an upgrade is that commit, landed once `make test` passes on it. `--check` (in `make
lint`, offline) fails when `pyproject.toml` and the lock disagree; `--installed` (after `make venv`'s
install) fails unless this interpreter has exactly the lock's packages, each needed by pyproject.toml.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.markers import Marker, default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
DEV_LOCK = ROOT / "requirements" / "dev.txt"
RUNTIME_LOCK = ROOT / "requirements" / "runtime.txt"
DEV_EXTRA = "dev"
# The oldest Python pyproject.toml allows: a universal lock holds what every newer one needs too.
LOCK_PYTHON = "3.11"
# The annotation uv writes for a requirement that pyproject.toml states; `-c` ones name the constraints
# that kept a pin, not what needs it.
ROOTS = re.compile(r"^\S+ \(pyproject\.toml\)$")
CONSTRAINT = "-c "
# The venv's own installer comes with the interpreter, not from the lock.
INSTALLER = frozenset({"pip"})


@dataclass(frozen=True)
class Pin:
    """One `name==version ; marker` entry of a lock file, with its hashes and what needs it."""

    name: str
    version: str
    marker: str
    hashes: tuple[str, ...]
    via: tuple[str, ...]

    def requirement(self) -> str:
        return f"{self.name}=={self.version}" + (f" ; {self.marker}" if self.marker else "")

    def applies(self, environment: Mapping[str, str] | None = None) -> bool:
        return not self.marker or Marker(self.marker).evaluate(dict(environment) if environment else None)


_PIN = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)\s*(?:;\s*(?P<marker>[^\\]+?))?\s*\\?$"
)
_HASH = re.compile(r"^\s+--hash=(?P<hash>sha256:[0-9a-f]{64})\s*\\?$")
_VIA = re.compile(r"^\s+#\s+(?:via\s+)?(?P<what>.+?)\s*$")


def parse_lock(text: str, source: str = "lock") -> list[Pin]:
    """The pins of a hashed requirements file as uv writes it; anything else in it is an error."""
    pins: list[Pin] = []
    current: dict[str, Any] | None = None

    def close() -> None:
        if current is not None:
            hashes, via = tuple(current["hashes"]), tuple(current["via"])
            pins.append(Pin(current["name"], current["version"], current["marker"], hashes, via))

    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or (line.startswith("#") and current is None):
            continue
        if pin := _PIN.match(line):
            close()
            marker = (pin["marker"] or "").strip()
            current = {"name": canonicalize_name(pin["name"]), "version": pin["version"], "marker": marker}
            current |= {"hashes": [], "via": []}
        elif current is not None and (hashed := _HASH.match(line)):
            current["hashes"].append(hashed["hash"])
        elif current is not None and (via := _VIA.match(line)):
            if via["what"] != "via":
                current["via"] += [part.strip() for part in via["what"].split(",") if part.strip()]
        else:
            raise ValueError(f"{source} line {number}: not a pinned requirement, hash or annotation: {line!r}")
    close()
    return pins


def declared(pyproject: Mapping[str, Any], extras: Iterable[str] = (), build: bool = True) -> list[Requirement]:
    """What pyproject.toml asks for: its dependencies, the named extras (an extra naming the package
    itself brings that one's requirements in) and, with `build`, its build backend."""
    project = pyproject["project"]
    own = canonicalize_name(project["name"])
    optional: Mapping[str, list[str]] = project.get("optional-dependencies", {})
    wanted, seen = list(extras), set[str]()
    requirements = [Requirement(text) for text in project.get("dependencies", [])]
    while wanted:
        extra = wanted.pop()
        if extra in seen:
            continue
        seen.add(extra)
        if extra not in optional:
            raise ValueError(f"pyproject.toml: project.optional-dependencies has no extra {extra!r}")
        for text in optional[extra]:
            requirement = Requirement(text)
            if canonicalize_name(requirement.name) == own:
                wanted += sorted(requirement.extras)
            else:
                requirements.append(requirement)
    if build:
        requirements += [Requirement(text) for text in pyproject.get("build-system", {}).get("requires", [])]
    return requirements


def disagreements(requirements: Iterable[Requirement], pins: Iterable[Pin], lock: str) -> list[str]:
    """Where a lock file and the requirements it was made from disagree, one sentence each: a
    requirement with no pin or a pin outside its range, a pin without hashes, and a pin nothing asks
    for (one that was added to the lock by hand, or whose requirement left pyproject.toml)."""
    pins = list(pins)
    by_name: dict[str, list[Pin]] = {}
    for pin in pins:
        by_name.setdefault(pin.name, []).append(pin)
    problems: list[str] = []
    direct: set[str] = set()
    for requirement in requirements:
        name = canonicalize_name(requirement.name)
        direct.add(name)
        if name not in by_name:
            problems.append(f"{requirement.name}: in pyproject.toml ({requirement}) but not in {lock}: run make lock")
            continue
        for pin in by_name[name]:
            if not requirement.specifier.contains(pin.version, prereleases=True):
                outside = f"outside pyproject.toml's {requirement}"
                problems.append(f"{requirement.name}: {lock} pins {pin.version}, {outside}")
    for pin in pins:
        if not pin.hashes:
            problems.append(f"{pin.name}=={pin.version}: no hashes in {lock}: run make lock")
        via = [v for v in pin.via if not v.startswith(CONSTRAINT)]
        parents = [canonicalize_name(v.split(" ", 1)[0]) for v in via if not ROOTS.match(v)]
        from_inputs = any(ROOTS.match(v) for v in via)
        if from_inputs and pin.name not in direct:
            problems.append(f"{pin.name}=={pin.version}: {lock} says pyproject.toml asks for it, which it does not")
        elif not from_inputs and not any(parent in by_name for parent in parents):
            problems.append(f"{pin.name}=={pin.version}: in {lock} but nothing in pyproject.toml needs it")
    return problems


def subset_disagreements(runtime: Iterable[Pin], dev: Iterable[Pin]) -> list[str]:
    """The runtime lock must be the dev lock's pins (markers may be narrower), not a second
    resolution that drifted."""
    dev_hashes = {(pin.name, pin.version): set(pin.hashes) for pin in dev}
    dev_versions: dict[str, list[str]] = {}
    for pin in dev:
        dev_versions.setdefault(pin.name, []).append(pin.version)
    problems = []
    for pin in runtime:
        if dev_hashes.get((pin.name, pin.version)) != set(pin.hashes):
            found = " or ".join(dev_versions.get(pin.name, ["nothing"]))
            problems.append(f"{pin.name}: the runtime lock pins {pin.version}, the dev lock {found}: run make lock")
    return problems


def closure(
    requirements: Iterable[Requirement],
    requires_of: Callable[[str], list[Requirement] | None],
    environment: Mapping[str, str],
) -> set[str]:
    """Every distribution the requirements need in this environment, following each one's own
    requirements (markers and extras evaluated as pip would)."""
    needed: dict[str, set[str]] = {}
    queue: list[tuple[Requirement, str]] = [(r, "") for r in requirements]
    while queue:
        requirement, extra = queue.pop()
        if requirement.marker and not requirement.marker.evaluate({**environment, "extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        extras = {""} | {canonicalize_name(e) for e in requirement.extras}
        known = needed.setdefault(name, set())
        if extras <= known:
            continue
        new = extras - known
        known |= extras
        for child in requires_of(name) or []:
            queue += [(child, e) for e in new]
    return set(needed)


def installed_disagreements(
    pins: Iterable[Pin],
    installed: Mapping[str, str],
    needed: set[str],
    environment: Mapping[str, str],
    own: str,
) -> list[str]:
    """Where this interpreter's distributions differ from the lock: `pip freeze` must be the lock
    (its entries for this platform), and every entry must be needed by pyproject.toml here."""
    locked = {pin.name: pin.version for pin in pins if pin.applies(environment)}
    problems = []
    for name, version in sorted(locked.items()):
        if installed.get(name) != version:
            problems.append(f"{name}: the lock says {version}, installed: {installed.get(name, 'nothing')}")
        if name not in needed:
            problems.append(f"{name}: locked and installed, but nothing in pyproject.toml needs it")
    for name, version in sorted(installed.items()):
        if name not in locked and name != own and name not in INSTALLER:
            problems.append(f"{name}=={version}: installed but not in the lock")
    return problems


def _installed() -> dict[str, str]:
    return {canonicalize_name(d.metadata["Name"]): d.version for d in importlib.metadata.distributions()}


def _requires_of(name: str) -> list[Requirement] | None:
    try:
        return [Requirement(text) for text in importlib.metadata.requires(name) or []]
    except importlib.metadata.PackageNotFoundError:
        return None


def _environment() -> dict[str, str]:
    return {key: str(value) for key, value in default_environment().items()}


def _pyproject() -> dict[str, Any]:
    return tomllib.loads(PYPROJECT.read_text())


def _relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


def check() -> list[str]:
    pyproject = _pyproject()
    dev = parse_lock(DEV_LOCK.read_text(), _relative(DEV_LOCK))
    runtime = parse_lock(RUNTIME_LOCK.read_text(), _relative(RUNTIME_LOCK))
    problems = disagreements(declared(pyproject, [DEV_EXTRA]), dev, _relative(DEV_LOCK))
    problems += disagreements(declared(pyproject), runtime, _relative(RUNTIME_LOCK))
    return problems + subset_disagreements(runtime, dev)


def check_installed() -> list[str]:
    pyproject = _pyproject()
    environment = _environment()
    needed = closure(declared(pyproject, [DEV_EXTRA]), _requires_of, environment)
    pins = parse_lock(DEV_LOCK.read_text(), _relative(DEV_LOCK))
    own = canonicalize_name(pyproject["project"]["name"])
    return installed_disagreements(pins, _installed(), needed, environment, own)


def _compile(inputs: list[Requirement], out: Path, upgrade: bool, constraints: list[Pin]) -> None:
    """uv's universal resolution of `inputs` into `out`, keeping the pins already there unless
    upgrading, within `constraints`."""
    with tempfile.TemporaryDirectory() as tmp:
        # Relative names, as they read in the annotations uv writes: `nativedra (pyproject.toml)`.
        lines = ",\n  ".join(json.dumps(str(requirement)) for requirement in inputs)
        project = f'[project]\nname = "nativedra"\nversion = "0"\ndependencies = [\n  {lines}\n]\n'
        (Path(tmp) / "pyproject.toml").write_text(project)
        command = [sys.executable, "-m", "uv", "pip", "compile", "pyproject.toml", "--universal", "--generate-hashes"]
        command += ["--python-version", LOCK_PYTHON, "--quiet", "--no-header", "-o", str(out)]
        command += ["--upgrade"] if upgrade else []
        if constraints:
            constraint_file = Path(tmp) / _relative(DEV_LOCK)
            constraint_file.parent.mkdir(parents=True)
            constraint_file.write_text("".join(f"{pin.requirement()}\n" for pin in constraints))
            command += ["--constraints", _relative(DEV_LOCK)]
        subprocess.run(command, check=True, cwd=tmp)
    header = f"# The lock of {_relative(out)} (tools/lock.py): written by `make lock`, upgraded by `make upgrade`.\n"
    out.write_text(header + out.read_text())


def write(upgrade: bool) -> None:
    pyproject = _pyproject()
    DEV_LOCK.parent.mkdir(exist_ok=True)
    _compile(declared(pyproject, [DEV_EXTRA]), DEV_LOCK, upgrade, [])
    # The runtime lock takes the dev lock's versions: one resolution, two views of it.
    dev = parse_lock(DEV_LOCK.read_text(), _relative(DEV_LOCK))
    _compile(declared(pyproject), RUNTIME_LOCK, False, dev)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="fail when pyproject.toml and the lock disagree")
    mode.add_argument("--installed", action="store_true", help="fail unless this interpreter has exactly the lock")
    mode.add_argument("--upgrade", action="store_true", help="move every pin to the newest version allowed")
    args = parser.parse_args(argv)
    if args.check or args.installed:
        problems = check() if args.check else check_installed()
        for problem in problems:
            print(f"lock: {problem}", file=sys.stderr)
        return 1 if problems else 0
    write(args.upgrade)
    return 0


if __name__ == "__main__":
    sys.exit(main())
