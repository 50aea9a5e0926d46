"""`python -m hardware.wheels DIR [PYTHON_VERSION]`: the locked runtime dependencies
(requirements/runtime.txt) as wheels for a GPU machine's own Python, where no registry is reachable,
with the lock itself beside them: `run_on_gpu.sh` installs from it with every hash checked."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

RUNTIME_LOCK = Path(__file__).resolve().parent.parent / "requirements" / "runtime.txt"
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64", "manylinux_2_34_x86_64")


def download_command(requirements: Path, out: Path, python_version: str) -> list[str]:
    """pip download of exactly the lock's pins (no resolution, hashes checked) as binary wheels."""
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    command = [sys.executable, "-m", "pip", "download", "-q", "-d", str(out), "--only-binary=:all:"]
    command += ["--require-hashes", "--no-deps", "--python-version", python_version, "--implementation", "cp"]
    return [*command, *platforms, "-r", str(requirements)]


def main(out: Path, python_version: str) -> int:
    out.mkdir(parents=True, exist_ok=True)
    requirements = out / "requirements.txt"
    shutil.copyfile(RUNTIME_LOCK, requirements)
    return subprocess.run(download_command(requirements, out, python_version), check=False).returncode


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "3.12"))
