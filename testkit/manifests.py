"""The shipped manifests as kustomize renders them, for tests that check or apply them, and whether
this machine can run them on a real node."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

MANIFESTS = Path(__file__).resolve().parent.parent / "manifests"


def kustomize(path: Path) -> list[dict[str, Any]]:
    """The documents `kubectl kustomize path` renders (the kubectl on PATH, or the venv's)."""
    kubectl = shutil.which("kubectl") or str(Path(sys.executable).parent / "kubectl")
    output = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, check=True).stdout
    return [d for d in yaml.safe_load_all(output) if d]


def named(documents: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """The one document of `kind` called `name`."""
    (found,) = [d for d in documents if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def containers_unavailable() -> str | None:
    """Why this machine cannot run a real node's containers, or None."""
    if sys.platform != "linux" or os.geteuid() != 0:
        return "a real node needs root on Linux (kubelet, containerd, mknod)"
    if shutil.which("apt-get") is None and shutil.which("runc") is None:
        return "a real node needs runc (Debian: apt-get install runc)"
    if not Path("/sys/fs/cgroup").is_dir():
        return "no cgroup hierarchy at /sys/fs/cgroup"
    return None
