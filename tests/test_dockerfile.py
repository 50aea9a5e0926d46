"""No Docker engine runs here, so check what a build would need: every COPY source exists and is
not excluded by .dockerignore, and the image installs the package whose entry point it runs."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _copied_sources() -> list[str]:
    sources = []
    for line in (REPO / "Dockerfile").read_text().splitlines():
        parts = line.split()
        if parts and parts[0] == "COPY" and not any(p.startswith("--from") for p in parts):
            sources += [p for p in parts[1:-1] if not p.startswith("--")]
    return sources


def _ignored(path: str) -> bool:
    patterns = [p.strip().rstrip("/") for p in (REPO / ".dockerignore").read_text().splitlines() if p.strip()]
    return any(fnmatch.fnmatch(path.rstrip("/"), pattern) for pattern in patterns)


def test_every_copied_path_exists_and_is_in_the_build_context() -> None:
    sources = _copied_sources()
    assert "pyproject.toml" in sources
    for source in sources:
        assert (REPO / source).exists(), f"Dockerfile copies {source}, which does not exist"
        assert not _ignored(source), f"Dockerfile copies {source}, but .dockerignore excludes it"


def test_image_copies_every_package_the_wheel_needs() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    copied = {s.rstrip("/") for s in _copied_sources()}
    assert packages <= copied, f"packages not copied into the image: {packages - copied}"
    assert project["project"]["scripts"]["nativedra"] == "nativedra.cli:main"
    assert 'ENTRYPOINT ["nativedra"]' in (REPO / "Dockerfile").read_text()


def test_the_image_installs_the_lock_and_resolves_nothing() -> None:
    """Every pip install in the image is the runtime lock with its hashes, or the package itself
    without its dependencies and without fetching a build backend: the image holds the lock's pins."""
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    installs = [" ".join(line.split()) for line in text.splitlines() if "pip install" in line]
    assert installs, "the image installs the package"
    for line in installs:
        assert "--no-deps" in line, f"pip resolves dependencies in: {line}"
        locked = "--require-hashes" in line and "-r requirements/runtime.txt" in line
        assert locked or "--no-build-isolation ." in line, f"not the lock, nor the package alone: {line}"
    assert "requirements/runtime.txt" in _copied_sources()
