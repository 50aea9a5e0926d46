"""The published wheel works outside the source checkout and carries no test code."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _run(command: list[str], cwd: Path) -> str:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def test_wheel_installed_in_a_fresh_venv_runs_outside_the_checkout(tmp_path: Path) -> None:
    # Build from a copy: an in-tree build leaves build/lib behind, whose stale files a later wheel would carry.
    source = tmp_path / "source"
    shutil.copytree(
        REPO,
        source,
        symlinks=True,
        ignore=shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__"),
    )
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(dist), str(source)], tmp_path)
    (wheel,) = dist.glob("nativedra-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/", 1)[0] for name in names if "/" in name and ".dist-info" not in name}
    assert top_level == {"nativedra", "dra_driver", "extender", "cdi"}, top_level
    assert "nativedra/data/deviceclasses.yaml" in names
    assert "nativedra/data/examples/one-gpu.yaml" in names
    assert "dra_driver/profiles/h100-8x.yaml" in names
    assert not [n for n in names if "conftest" in n or n.startswith(("e2e/", "tests/", "testkit/", "tools/", "bench/"))]

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / "bin"
    _run([str(bin_dir / "pip"), "install", "--quiet", str(wheel)], tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    assert "Starts the local control plane" in _run([str(bin_dir / "nativedra"), "demo", "--help"], outside)
    table = _run([str(bin_dir / "nativedra"), "inventory", "--backend", "simulated", "--profile", "h100-8x"], outside)
    assert "NVIDIA H100 80GB HBM3" in table and table.count("\n") == 9, table
    assert "control plane" in _run([str(bin_dir / "nativedra"), "cluster", "--help"], outside)
    shipped = _run(
        [
            str(bin_dir / "python"),
            "-c",
            "from nativedra.objects import shipped; print(shipped('examples/one-gpu.yaml').read_text())",
        ],
        outside,
    )
    assert "kind: ResourceClaimTemplate" in shipped or "kind: ResourceClaim" in shipped
