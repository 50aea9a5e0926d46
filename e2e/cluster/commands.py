"""Command lines that start nativedra components from this Python environment."""

from __future__ import annotations

import sys
from pathlib import Path


def nativedra(*args: str) -> list[str]:
    return [sys.executable, "-m", "nativedra.cli", *args]


def plugin(node: str, kubeconfig: Path, *args: str) -> list[str]:
    return nativedra("plugin", "--node-name", node, "--kubeconfig", str(kubeconfig), *args)


def extender(kubeconfig: Path, port: int, *args: str) -> list[str]:
    return nativedra("extender", "--kubeconfig", str(kubeconfig), "--port", str(port), "--address", "127.0.0.1", *args)
