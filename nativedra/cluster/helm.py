"""The real `helm` CLI, built from its Go module (helm.sh/helm/v3) like the other binaries: once,
into `~/.cache/nativedra/helm/<version>/bin/helm`, under a build lock, never a prebuilt download.
The chart's tests lint, render and install `charts/nativedra` with it."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from nativedra.cluster.gobuild import BinaryError, BuildLock, build_programs, cache_root, download, go_env

__all__ = ["CHART", "HELM_MODULE", "HELM_VERSION", "Helm", "HelmError", "build_helm"]

HELM_MODULE = "helm.sh/helm/v3"
HELM_VERSION = "v3.22.0"
MAIN_PACKAGE = "helm.sh/helm/v3/cmd/helm"


def _home(version: str) -> Path:
    return cache_root() / "helm" / version


def version_ldflags(version: str, upstream_go_mod: str) -> str:
    """What upstream's Makefile sets: the release `helm version` reports, and the Kubernetes version
    `helm template` and `helm lint` assume without a cluster (client-go v0.X -> 1.X; Go's default
    would be 1.20, which a chart's `kubeVersion: >=1.34` refuses)."""
    client_go = re.search(r"^\s*k8s\.io/client-go\s+v0\.(\d+)\.", upstream_go_mod, re.MULTILINE)
    if client_go is None:
        raise BinaryError(f"{HELM_MODULE} {version}: no k8s.io/client-go requirement in its go.mod")
    flags = [f"-X helm.sh/helm/v3/internal/version.version={version}"]
    for package in ("pkg/lint/rules", "pkg/chartutil"):
        flags += [
            f"-X helm.sh/helm/v3/{package}.k8sVersionMajor=1",
            f"-X helm.sh/helm/v3/{package}.k8sVersionMinor={client_go.group(1)}",
        ]
    return " ".join(flags)


def build_helm(version: str = HELM_VERSION) -> Path:
    """The helm binary of `version`, built once from the module proxy (later calls return at once)."""
    binary = _home(version) / "bin" / "helm"
    if binary.is_file():
        return binary
    with BuildLock(_home(version)):
        if not binary.is_file():
            src = _home(version) / "src"
            env = go_env()
            upstream = Path(download(HELM_MODULE, version, src, env)["GoMod"]).read_text()
            directive = re.search(r"^go\s+(\S+)", upstream, re.MULTILINE)
            go_mod = (
                "module nativedra.dev/helmbuild\n\n"
                f"go {directive.group(1) if directive else '1.24'}\n\n"
                f"require {HELM_MODULE} {version}\n"
            )
            ldflags = f"-s -w {version_ldflags(version, upstream)}"
            build_programs(
                src, go_mod, {"helm": MAIN_PACKAGE}, binary.parent, env=env, upstream=upstream, ldflags=ldflags
            )
    return binary


CHART = Path(__file__).resolve().parents[2] / "charts" / "nativedra"


class HelmError(RuntimeError):
    """helm exited non-zero; the message carries its stderr."""


@dataclass(frozen=True)
class Helm:
    """The helm CLI, against `kubeconfig` when given; its own state (repositories, cache) under
    `home`, never the user's."""

    binary: Path
    home: Path
    kubeconfig: Path | None = None

    def __call__(self, *args: str, timeout_s: float = 300) -> str:
        env = dict(
            os.environ,
            HELM_CACHE_HOME=str(self.home / "cache"),
            HELM_CONFIG_HOME=str(self.home / "config"),
            HELM_DATA_HOME=str(self.home / "data"),
        )
        env.pop("KUBECONFIG", None)
        command = [str(self.binary), *args]
        if self.kubeconfig is not None:
            command += ["--kubeconfig", str(self.kubeconfig)]
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout_s, check=False)
        if result.returncode != 0:
            raise HelmError(f"`helm {' '.join(args)}` failed ({result.returncode}):\n{result.stderr[-4000:]}")
        return result.stdout

    def template(
        self,
        values: Mapping[str, Any] | None = None,
        *,
        chart: Path = CHART,
        release: str = "nativedra",
        kube_version: str | None = None,
        api_versions: tuple[str, ...] = (),
    ) -> list[dict[str, Any]]:
        """The documents `helm template` renders with `values` over the chart's defaults, for a
        cluster of `kube_version` (default: helm's own) that also serves `api_versions`."""
        args = ["template", release, str(chart)]
        if kube_version:
            args += ["--kube-version", kube_version]
        for api_version in api_versions:
            args += ["--api-versions", api_version]
        if values:
            args += ["--values", self._values_file(values)]
        return [d for d in yaml.safe_load_all(self(*args)) if d]

    def values_args(self, values: Mapping[str, Any]) -> list[str]:
        """`--values FILE` for install/upgrade."""
        return ["--values", self._values_file(values)]

    def _values_file(self, values: Mapping[str, Any]) -> str:
        self.home.mkdir(parents=True, exist_ok=True)
        text = yaml.safe_dump(dict(values), sort_keys=True)
        path = self.home / f"values-{hashlib.sha256(text.encode()).hexdigest()[:16]}.yaml"
        path.write_text(text)
        return str(path)
