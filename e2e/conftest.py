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

from nativedra.cluster import ControlPlane, commands, create_fake_node, resolve, wait_for


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


@pytest.fixture
def plugin_processes(control_plane: ControlPlane, tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start real `nativedra plugin` processes against the test cluster; stopped after the test."""
    started: list[subprocess.Popen[bytes]] = []

    def start(node: str, *args: str) -> subprocess.Popen[bytes]:
        log = (tmp_path / f"plugin-{node}.log").open("wb")
        process = subprocess.Popen(
            commands.plugin(node, control_plane.kubeconfig, *args),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        process.terminate()
    for process in started:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class NodePlugin:
    """A `nativedra plugin` process with its own kubelet directories, restartable like a pod."""

    def __init__(self, control_plane: ControlPlane, root: Path, node: str, args: tuple[str, ...]) -> None:
        self.control_plane = control_plane
        self.root = root
        self.node = node
        self.args = args
        self.registry_dir = root / "registry"
        self.plugin_dir = root / "plugins"
        self.cdi_dir = root / "cdi"
        self.fault_file = root / "faults.yaml"
        self.process: subprocess.Popen[bytes] | None = None
        self.log = root / "plugin.log"

    @property
    def data_dir(self) -> Path:
        return self.plugin_dir / "gpu.nativedra.dev"

    @property
    def registration_socket(self) -> Path:
        return self.registry_dir / "gpu.nativedra.dev-reg.sock"

    @property
    def dra_socket(self) -> Path:
        return self.data_dir / "dra.sock"

    def start(self, env: dict[str, str] | None = None) -> None:
        with self.log.open("ab") as log:
            process = subprocess.Popen(
                commands.plugin(
                    self.node,
                    self.control_plane.kubeconfig,
                    "--registry-dir",
                    str(self.registry_dir),
                    "--plugin-dir",
                    str(self.plugin_dir),
                    "--cdi-dir",
                    str(self.cdi_dir),
                    "--dev-root",
                    str(self.root / "dev"),
                    "--fault-file",
                    str(self.fault_file),
                    *self.args,
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
        from nativedra.kubelet_client import plugin_info  # noqa: PLC0415

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
    """Factory: a plugin for `node` with a fake /dev of 8 NVIDIA GPUs; stopped after the test."""
    from nativedra.kubelet_client import make_dev_tree  # noqa: PLC0415 - grpc stubs load only for tests that need them

    plugins: list[NodePlugin] = []
    roots: list[Path] = []

    def start(node: str, *args: str) -> NodePlugin:
        # Unix socket paths must stay under 108 bytes: pytest's tmp paths are too long.
        root = Path(tempfile.mkdtemp(prefix="nd-", dir="/tmp"))
        roots.append(root)
        make_dev_tree(root / "dev", range(8))
        plugin = NodePlugin(control_plane, root, node, args or ("--backend", "simulated", "--profile", "h100-8x"))
        plugin.start()
        plugins.append(plugin)
        return plugin

    yield start
    for plugin in plugins:
        plugin.stop()
    for root in roots:
        shutil.rmtree(root, ignore_errors=True)
