"""Fixtures that give every e2e test the real control plane."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from dra_driver.kubelet_paths import data_dir, dra_socket, registration_socket
from nativedra.cluster import ControlPlane, commands, create_fake_node, resolve, wait_for
from nativedra.cluster.commands import NodeDirs
from nativedra.kubelet_client import make_dev_tree, plugin_info


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = ControlPlane(state_dir=Path(tmp_path_factory.mktemp("cluster")), binaries=resolve())
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def api(control_plane: ControlPlane) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(control_plane.kubeconfig))


@pytest.fixture
def namespace(api: client.ApiClient) -> Iterator[str]:
    """A fresh namespace with its `default` ServiceAccount, deleted after the test."""
    core = client.CoreV1Api(api)
    name = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace({"metadata": {"name": name}})

    def has_default_sa() -> bool:
        return any(sa.metadata.name == "default" for sa in core.list_namespaced_service_account(name).items)

    wait_for(has_default_sa, 30, f"ServiceAccount default in namespace {name}")
    try:
        yield name
    finally:
        with contextlib.suppress(client.ApiException):
            core.delete_namespace(name)


@pytest.fixture
def fake_nodes(api: client.ApiClient) -> Iterator[Callable[..., str]]:
    """Factory for uniquely named Ready nodes; all are deleted after the test."""
    created: list[str] = []

    def make(prefix: str = "node", labels: dict[str, str] | None = None) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        create_fake_node(api, name, labels)
        created.append(name)
        return name

    yield make
    core = client.CoreV1Api(api)
    for name in created:
        with contextlib.suppress(client.ApiException):
            core.delete_node(name)


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


@pytest.fixture
def node_plugin(control_plane: ControlPlane, tmp_path: Path) -> Iterator[Callable[..., NodePlugin]]:
    """Factory: a plugin for `node` with its own kubelet directories and a fake /dev of 8 NVIDIA GPUs
    (the one way tests launch a plugin process); stopped after the test."""

    plugins: list[NodePlugin] = []
    roots: list[Path] = []

    def start(node: str, *args: str) -> NodePlugin:
        # Unix socket paths must stay under 108 bytes: pytest's tmp paths are too long.
        root = Path(tempfile.mkdtemp(prefix="nd-", dir="/tmp"))
        roots.append(root)
        make_dev_tree(NodeDirs(root).dev, range(8))
        plugin = NodePlugin(control_plane, root, node, args or ("--backend", "simulated", "--profile", "h100-8x"))
        plugin.start()
        plugins.append(plugin)
        return plugin

    yield start
    for plugin in plugins:
        plugin.stop()
    for root in roots:
        shutil.rmtree(root, ignore_errors=True)
