"""A real `nativedra plugin` process on a simulated node, the one way e2e tests and the soak start one."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from kubernetes import client

from dra_driver.kubelet_paths import data_dir, dra_socket, registration_socket
from nativedra.base.kube.resources import RESOURCE_SLICES
from nativedra.cluster import ControlPlane, commands, create_fake_node, resolve, wait_for
from nativedra.cluster.commands import NodeDirs
from nativedra.cluster.components import Features
from nativedra.kubelet_client import make_dev_tree, plugin_info
from nativedra.objects import apply_file, device_classes


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

    def start(self) -> None:
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


@contextlib.contextmanager
def plugin_on_own_plane(
    features: Features | Callable[[str], Features], node: str, *extra: str, fault_file: bool = False
) -> Iterator[tuple[client.ApiClient, NodePlugin]]:
    """A control plane of its own with `features` (or the features for its release), the
    DeviceClasses, one fake node and an h100-8x simulated plugin on it with `extra` flags (and its
    fault file, if asked); all stopped and removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="nd-own-", dir="/tmp"))
    binaries = resolve()
    chosen = features(binaries.version) if callable(features) else features
    plane = ControlPlane(state_dir=root / "cluster", binaries=binaries, features=chosen)
    plane.start()
    try:
        with plugin_on_plane(plane, node, *extra, fault_file=fault_file) as running:
            yield running
    finally:
        plane.stop()
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def plugin_on_plane(
    plane: ControlPlane, node: str, *extra: str, fault_file: bool = False
) -> Iterator[tuple[client.ApiClient, NodePlugin]]:
    """On a running plane: the DeviceClasses, one fake node and an h100-8x simulated plugin on it
    with `extra` flags (and its fault file, if asked); the plugin stopped and the node and its
    slices removed afterwards, so a plane the session shares is left as it was."""
    root = Path(tempfile.mkdtemp(prefix="nd-node-", dir="/tmp"))
    api = plane.api_client()
    plugin = None
    try:
        apply_file(api, device_classes())
        create_fake_node(api, node)
        make_dev_tree(NodeDirs(root / "node").dev, range(8))
        faults = ("--fault-file", str(root / "node" / "faults.yaml")) if fault_file else ()
        plugin = NodePlugin(
            plane, root / "node", node, ("--backend", "simulated", "--profile", "h100-8x", *extra, *faults)
        )
        plugin.start()
        yield api, plugin
    finally:
        if plugin is not None:
            plugin.stop()
        with contextlib.suppress(client.ApiException):
            client.CoreV1Api(api).delete_node(node)
        for item in RESOURCE_SLICES.list(api, field_selector=f"spec.nodeName={node}")["items"]:
            with contextlib.suppress(client.ApiException):
                RESOURCE_SLICES.delete(api, item["metadata"]["name"])
        shutil.rmtree(root, ignore_errors=True)
