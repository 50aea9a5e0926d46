"""Fixtures that give every e2e test the real control plane."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from nativedra.cluster import ControlPlane, create_fake_node, resolve, wait_for
from nativedra.cluster.commands import NodeDirs
from nativedra.kubelet_client import make_dev_tree
from nativedra.objects import apply_file, device_classes, published_devices
from testkit.extender_harness import fresh_namespace
from testkit.four_way import NATIVE_GANGS
from testkit.node_plugin import NodePlugin


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


@pytest.fixture(scope="session")
def gated_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """The one plane with gates beyond the defaults that more than one module needs: native gang
    scheduling with rack constraints (`testkit.four_way.NATIVE_GANGS`), started by the first module
    that asks. Like `control_plane`, each module leaves it as it found it (scheduler alone, its
    namespaces and nodes removed)."""
    plane = ControlPlane(
        state_dir=Path(tmp_path_factory.mktemp("gated-cluster")), binaries=resolve(), features=NATIVE_GANGS
    )
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def namespace(api: client.ApiClient) -> Iterator[str]:
    """A fresh namespace with its `default` ServiceAccount, deleted after the test."""
    with fresh_namespace(api, "t") as name:
        yield name


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


@pytest.fixture
def device_classes_applied(api: client.ApiClient) -> None:
    """The shipped DeviceClasses (server-side apply: harmless when already there)."""
    apply_file(api, device_classes())


@pytest.fixture
def h100(fake_nodes: Callable[..., str], node_plugin: Callable[..., NodePlugin], api: client.ApiClient) -> NodePlugin:
    """A real plugin on a node of 8 simulated H100s, once its 140 devices are published, or, on an
    API server that drops partition fields (1.34/1.35 defaults), once its 6 whole GPUs are: tests of
    whole GPUs then still run, and those of partitions fail naming what is missing."""
    node = fake_nodes("h100")
    plugin = node_plugin(node)

    def settled() -> bool:
        devices = published_devices(api, node).values()
        # Until the plugin has read back what was stored, parts may be listed without their counters.
        if not all(d["attributes"]["type"]["string"] == "gpu" or "consumesCounters" in d for d in devices):
            return False
        return len(devices) == 6 if "does not store" in plugin.log.read_text() else len(devices) >= 140

    wait_for(settled, 60, f"slices of {node}", plugin.log.read_text)
    return plugin
