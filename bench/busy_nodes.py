"""Busy GPU nodes on the benchmark plane and the scheduler that places pods on them, shared by the
benchmarks that run the real kube-scheduler (`bench.bench_scheduler`, `bench.bench_preemption`).

Fake nodes of 8 A100s (fractions off), RACK_SIZE to a rack (`nativedra.dev/rack`), their
ResourceSlices published from this process by the plugin's own builder and publisher. A busy node
runs one pod holding all its GPUs, bound directly, its claim allocated by writing the claim status
as the scheduler's allocator would (devices, node selector, reservedFor the pod): one pod and one
claim per node instead of a scheduling pass, and every mode starts from exactly the same objects.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from dra_driver.discovery.simulated import load_profile, resolve_profile
from dra_driver.inventory import Inventory
from dra_driver.publishing.publish_config import PublishConfig
from dra_driver.publishing.publisher import SlicePublisher
from dra_driver.publishing.slices import build_slices
from extender.plan.config import RACK_LABEL
from nativedra.base.kube.names import DRIVER_NAME, GPU_CLASS
from nativedra.base.kube.resources import RESOURCE_CLAIMS, RESOURCE_SLICES
from nativedra.cluster import ControlPlane, create_fake_node, wait_for
from nativedra.cluster.controlplane import free_port
from nativedra.cluster.extender_wiring import call_extender, stop_calling_extender
from nativedra.cluster.pki import extender_tls
from nativedra.objects import create_claim, request
from testkit.extender_harness import ExtenderCluster, fresh_namespace

RACK_SIZE = 16
GPUS = 8  # per node (a100-8x)
WORKERS = 4  # client threads creating objects: enough to stay ahead of the scheduler on 2 cores
CLEANUP_WAIT_S = 180.0
CLAIM_FINALIZER = "resource.kubernetes.io/delete-protection"  # resourceapi.Finalizer, as the scheduler sets it
# kube-scheduler's client limit (default 50 requests/s, bursts of 100), lifted so it is not what
# caps a figure.
CLIENT = {"clientConnection": {"qps": 1000, "burst": 2000}}


def absent(probe: Any, *args: Any) -> bool:
    try:
        probe(*args)
    except client.ApiException as error:
        if error.status == 404:
            return True
        raise
    return False


@contextlib.contextmanager
def workload_namespace(api: client.ApiClient, prefix: str) -> Iterator[str]:
    """A fresh namespace; afterwards its pods are force-deleted and the namespace waited out, so
    its claims are gone and the next workload starts from the same busy state."""
    core = client.CoreV1Api(api)
    with fresh_namespace(api, prefix) as namespace:
        yield namespace
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    wait_for(lambda: absent(core.read_namespace, namespace), CLEANUP_WAIT_S, f"namespace {namespace} deleted")


def a100_inventory() -> Inventory:
    return load_profile(resolve_profile("a100-8x"))


class _NewNodePublisher(SlicePublisher):
    """The plugin's publisher on a node created a moment ago, which has no slices yet: its first
    LIST is skipped. That LIST (a field selector on the node's name) cost the API server ~0.2 s of
    CPU per call at 1,000 nodes and grew with the cluster, so building 5,000 nodes through it was
    quadratic (4,636 nodes in 20 minutes); every write is still the publisher's own."""

    def list_ours(self) -> list[dict[str, Any]]:
        return []


def gpu_node(api: client.ApiClient, inventory: Inventory, name: str, labels: dict[str, str]) -> None:
    """A Ready node with `labels` whose whole GPUs (fractions off) are published as slices."""
    create_fake_node(api, name, labels)
    _NewNodePublisher(api, name).reconcile(build_slices(inventory, PublishConfig(fractions=()), name))


def occupy(api: client.ApiClient, namespace: str, node: str, priority_class: str | None = None) -> None:
    """`node` runs one pod holding all its GPUs: bound, its claim allocated and reserved for it, with
    the finalizer the scheduler adds. It ends at once when deleted (grace period 0: simulated nodes
    run no kubelet)."""
    claim = create_claim(api, namespace, node, [request("gpus", GPU_CLASS, count=GPUS)])
    spec: dict[str, Any] = {
        "nodeName": node,
        "containers": [
            {"name": "main", "image": "registry.invalid/cuda:12", "resources": {"claims": [{"name": "gpus"}]}}
        ],
        "resourceClaims": [{"name": "gpus", "resourceClaimName": node}],
        "terminationGracePeriodSeconds": 0,
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    pod = client.CoreV1Api(api).create_namespaced_pod(namespace, {"metadata": {"name": node}, "spec": spec})
    results = [{"request": "gpus", "driver": DRIVER_NAME, "pool": node, "device": f"gpu-{i}"} for i in range(GPUS)]
    only_node = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    claim["status"] = {
        "allocation": {"devices": {"results": results}, "nodeSelector": {"nodeSelectorTerms": [only_node]}},
        "reservedFor": [{"resource": "pods", "name": node, "uid": pod.metadata.uid}],
    }
    RESOURCE_CLAIMS.replace_status(api, node, claim, namespace)
    # The allocator's finalizer: with it the claim controller deallocates the claim once its pod is
    # gone (evicted, preempted); without it the devices would stay allocated to nobody.
    RESOURCE_CLAIMS.patch(api, node, {"metadata": {"finalizers": [CLAIM_FINALIZER]}}, namespace)


@contextlib.contextmanager
def busy_cluster(
    api: client.ApiClient, nodes: int, idle: int, prefix: str, priority_class: str | None = None
) -> Iterator[tuple[dict[str, str], str]]:
    """`nodes` GPU nodes named `prefix`-nNNNN, RACK_SIZE consecutive ones to a rack; all but the
    first `idle` fully busy (of `priority_class`). Yields (node -> rack, the busy pods' namespace).
    Afterwards the busy pods, the nodes and their slices (owned by the nodes) are deleted and waited
    out, so the next cluster starts from an empty one."""
    inventory = a100_inventory()
    rack_of = {f"{prefix}-n{i:04d}": f"{prefix}-rack-{i // RACK_SIZE:02d}" for i in range(nodes)}
    busy = list(rack_of)[idle:]
    core = client.CoreV1Api(api)
    with ThreadPoolExecutor(WORKERS) as pool, fresh_namespace(api, f"busy-{nodes}") as namespace:
        list(pool.map(lambda item: gpu_node(api, inventory, item[0], {RACK_LABEL: item[1]}), rack_of.items()))
        list(pool.map(lambda node: occupy(api, namespace, node, priority_class), busy))
        try:
            yield rack_of, namespace
        finally:
            core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
            list(pool.map(core.delete_node, rack_of))
    wait_for(lambda: absent(core.read_namespace, namespace), CLEANUP_WAIT_S, f"namespace {namespace} deleted")
    wait_for(lambda: not slices_of(api, rack_of), CLEANUP_WAIT_S, "the nodes' slices deleted")


def slices_of(api: client.ApiClient, nodes: dict[str, str]) -> list[str]:
    """The names of slices still published for `nodes` (other benchmarks' nodes may have some)."""
    items = RESOURCE_SLICES.list(api)["items"]
    return [s["metadata"]["name"] for s in items if s["spec"].get("nodeName") in nodes]


@contextlib.contextmanager
def scheduler(
    plane: ControlPlane,
    api: client.ApiClient,
    scratch: Path,
    extender_config: dict[str, Any] | None,
    namespace: str = "",
) -> Iterator[ExtenderCluster | None]:
    """A freshly started scheduler, alone (`extender_config` None) or calling a fresh extender
    process of that config over mutual TLS, wired as `testkit.extender_harness` wires it (which
    also sets percentageOfNodesToScore: 100); `namespace` is the extender's own (its preemption
    Leases), "" its default. Yields the extender, if any; afterwards the scheduler runs alone
    again, as the other benchmarks expect."""
    if extender_config is None:
        plane.restart_scheduler(CLIENT)
        yield None
        return
    scratch.mkdir(parents=True)
    tls = extender_tls(scratch / "tls")
    config_file = scratch / "extender.yaml"
    config_file.write_text(yaml.safe_dump(extender_config))
    extender = ExtenderCluster(
        plane, api, free_port(), free_port(), tls, config_file, scratch / "extender.log", namespace=namespace
    )
    extender.start_extender()
    try:
        call_extender(plane, extender.port, tls, CLIENT)
        yield extender
    finally:
        extender.kill_extender()
        stop_calling_extender(plane)
