"""What a real node needs besides the kubelet: containerd 2.x built from its Go module, and runc,
the CNI plugins, socat, podman and debootstrap from Debian's packages (installed when missing)."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from nativedra.cluster.gobuild import BinaryError, BuildLock, build_programs, cache_root, download, go_env

log = logging.getLogger(__name__)

CONTAINERD_MODULE = "github.com/containerd/containerd/v2"
CONTAINERD_VERSION = "v2.4.2"  # 2.x resolves CDI devices by default
CONTAINERD_PROGRAMS = {
    "containerd": f"{CONTAINERD_MODULE}/cmd/containerd",
    "containerd-shim-runc-v2": f"{CONTAINERD_MODULE}/cmd/containerd-shim-runc-v2",
    "ctr": f"{CONTAINERD_MODULE}/cmd/ctr",
}
CNI_BIN_DIR = Path("/usr/lib/cni")
# Debian package -> a file it installs (how we tell it is there).
DEBIAN_PACKAGES = {
    "runc": "runc",
    "containernetworking-plugins": str(CNI_BIN_DIR / "bridge"),
    "socat": "socat",
    "podman": "podman",
    "debootstrap": "debootstrap",
    "iproute2": "ip",
}


@dataclass(frozen=True)
class NodeRuntime:
    containerd_bin: Path  # directory with containerd, containerd-shim-runc-v2 and ctr
    runc: Path
    cni_bin_dir: Path

    @property
    def containerd(self) -> Path:
        return self.containerd_bin / "containerd"

    @property
    def ctr(self) -> Path:
        return self.containerd_bin / "ctr"


def _present(marker: str) -> bool:
    return Path(marker).exists() if marker.startswith("/") else shutil.which(marker) is not None


def missing_packages() -> list[str]:
    return [package for package, marker in DEBIAN_PACKAGES.items() if not _present(marker)]


def install_packages() -> None:
    """apt-get install what is missing (root only; a clear error otherwise)."""
    missing = missing_packages()
    if not missing:
        return
    command = ["apt-get", "install", "--yes", "--no-install-recommends", *missing]
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise BinaryError(f"a real node needs Debian packages {', '.join(missing)}: run `{' '.join(command)}` as root")
    log.info("installing %s from Debian's packages", ", ".join(missing))
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0:
        update = subprocess.run(["apt-get", "update"], capture_output=True, text=True, env=env, check=False)
        result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if result.returncode != 0:
            raise BinaryError(f"`{' '.join(command)}` failed:\n{update.stderr[-1000:]}{result.stderr[-2000:]}")


def build_containerd(version: str = CONTAINERD_VERSION) -> Path:
    """containerd, its runc shim and ctr, built once into the cache (about 90 s on 2 cores)."""
    bin_dir = cache_root() / "containerd" / version / "bin"
    if all((bin_dir / name).is_file() for name in CONTAINERD_PROGRAMS):
        return bin_dir
    with BuildLock(bin_dir.parent):
        if not all((bin_dir / name).is_file() for name in CONTAINERD_PROGRAMS):
            env = go_env()
            src = bin_dir.parent / "src"
            upstream = Path(download(CONTAINERD_MODULE, version, src, env)["GoMod"]).read_text()
            go_line = next((line for line in upstream.splitlines() if line.startswith("go ")), "go 1.24")
            go_mod = f"module nativedra.dev/containerdbuild\n\n{go_line}\n\nrequire {CONTAINERD_MODULE} {version}\n"
            build_programs(src, go_mod, CONTAINERD_PROGRAMS, bin_dir, env=env, upstream=upstream)
    return bin_dir


def resolve_runtime() -> NodeRuntime:
    install_packages()
    runc = shutil.which("runc")
    if runc is None:
        raise BinaryError("runc is not on PATH after installing it")
    return NodeRuntime(containerd_bin=build_containerd(), runc=Path(runc), cni_bin_dir=CNI_BIN_DIR)
