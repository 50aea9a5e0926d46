"""A real `nativedra plugin` process on a simulated node, the one way e2e tests and the soak start one."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from dra_driver.kubelet_paths import data_dir, dra_socket, registration_socket
from nativedra.cluster import ControlPlane, commands, wait_for
from nativedra.cluster.commands import NodeDirs
from nativedra.kubelet_client import plugin_info


class NodePlugin:
    """A `nativedra plugin` process with its own kubelet directories, restartable like a pod."""

    def __init__(self, control_plane: ControlPlane, root: Path, node: str, args: tuple[str, ...]) -> None:
        self.control_plane = control_plane
        self.dirs = NodeDirs(root)
        self.root = root
        self.node = node
        self.args = args
        self.registry_dir = self.dirs.registry
        self.plugin_dir = self.dirs.plugins
        self.cdi_dir = self.dirs.cdi
        self.fault_file = root / "faults.yaml"
        self.process: subprocess.Popen[bytes] | None = None
        self.log = root / "plugin.log"

    @property
    def data_dir(self) -> Path:
        return data_dir(self.plugin_dir)

    @property
    def registration_socket(self) -> Path:
        return registration_socket(self.registry_dir)

    @property
    def dra_socket(self) -> Path:
        return dra_socket(self.plugin_dir)

    def start(self, env: dict[str, str] | None = None) -> None:
        with self.log.open("ab") as log:
            process = subprocess.Popen(
                commands.plugin(
                    self.node,
                    self.control_plane.kubeconfig,
                    "--fault-file",
                    str(self.fault_file),
                    *self.args,
                    dirs=self.dirs,
                ),
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
            )
        self.process = process
        wait_for(
            lambda: process.poll() is not None or self.answers(),
            30,
            "the plugin to answer GetInfo on its registration socket",
            self.log.read_text,
        )
        assert process.poll() is None, self.log.read_text()

    def answers(self) -> bool:
        """Serving, as the kubelet checks it (a socket file left by a killed process does not count)."""
        return plugin_info(self.registration_socket) is not None

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def wait_dead(self) -> int:
        assert self.process is not None
        return self.process.wait(timeout=30)
