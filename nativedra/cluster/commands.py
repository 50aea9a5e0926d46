"""Command lines that start nativedra components from this Python environment: the one way the
demo, the tests and the benchmarks launch a plugin or an extender process."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class NodeDirs:
    """The host directories a plugin uses, all under one root for a simulated node."""

    root: Path

    @property
    def registry(self) -> Path:
        return self.root / "registry"

    @property
    def plugins(self) -> Path:
        return self.root / "plugins"

    @property
    def cdi(self) -> Path:
        return self.root / "cdi"

    @property
    def dev(self) -> Path:
        return self.root / "dev"

    def flags(self) -> list[str]:
        return [
            "--registry-dir",
            str(self.registry),
            "--plugin-dir",
            str(self.plugins),
            "--cdi-dir",
            str(self.cdi),
            "--dev-root",
            str(self.dev),
        ]


def nativedra(*args: str) -> list[str]:
    return [sys.executable, "-m", "nativedra.cli", *args]


def plugin(node: str, kubeconfig: Path, *args: str, dirs: NodeDirs | None = None) -> list[str]:
    directories = dirs.flags() if dirs else []
    return nativedra("plugin", "--node-name", node, "--kubeconfig", str(kubeconfig), *directories, *args)


def extender(kubeconfig: Path, port: int, *args: str) -> list[str]:
    return nativedra("extender", "--kubeconfig", str(kubeconfig), "--port", str(port), "--address", "127.0.0.1", *args)
