"""`python -m hardware.wheels DIR [PYTHON_VERSION]`: the runtime dependencies at the versions of this
virtual environment, as wheels for a GPU machine's own Python (no registry reachable there), with
the pinned requirements file that `run_on_gpu.sh` installs from."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64", "manylinux_2_34_x86_64")


def pinned_requirements(pyproject: Path) -> list[str]:
    names = [
        re.split(r"[<>=!~\[ ;]", d, maxsplit=1)[0]
        for d in tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    ]
    return [f"{name}=={importlib.metadata.version(name)}" for name in names]


def main(out: Path, python_version: str) -> int:
    out.mkdir(parents=True, exist_ok=True)
    requirements = out / "requirements.txt"
    requirements.write_text("\n".join(pinned_requirements(Path("pyproject.toml"))) + "\n")
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    command = [sys.executable, "-m", "pip", "download", "-q", "-d", str(out), "--only-binary=:all:"]
    command += ["--python-version", python_version, "--implementation", "cp", *platforms, "-r", str(requirements)]
    return subprocess.run(command, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "3.12"))
