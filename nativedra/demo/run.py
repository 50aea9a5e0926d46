"""`nativedra demo`: a local cluster with simulated GPU nodes running the real plugin and
extender, the example workloads applied, and a map of where everything landed.

Steps, each a function: start the control plane and extender, start the nodes, place the
workloads, play the kubelet, report."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client, config

from extender.plan.config import RACK_LABEL, ZONE_LABEL
from nativedra.cluster import ControlPlane, commands, create_fake_node, wait_for
from nativedra.cluster.addons import JOBSET, KUEUE, LWS, start_addon
from nativedra.cluster.cli import start_detached
from nativedra.cluster.commands import NodeDirs
from nativedra.cluster.controlplane import free_port, stop_recorded
from nativedra.cluster.extender_wiring import call_extender
from nativedra.cluster.waits import http_ok
from nativedra.demo.kubelet_step import play_kubelet
from nativedra.demo.workloads import (
    DEMO_NAMESPACE,
    QUEUE,
    QUEUE_SHARES,
    QUEUED_NAMESPACE,
    apply_examples,
    bound_pods,
    gang_workloads,
    kueue_verdicts,
    queued_settled,
    queued_workloads,
    settled,
)
from nativedra.kubelet_client import make_dev_tree
from nativedra.map.clustermap import read_map, render_svg, render_text
from nativedra.objects import apply_file, device_classes, published_devices

MAX_SIMULATED_GPUS = 16


@dataclass(frozen=True)
class DemoNode:
    name: str
    profile: str
    rack: str
    plugin_args: tuple[str, ...] = ()


DEFAULT_LAYOUT = (
    DemoNode("h100-a1", "h100-8x", "rack-a"),
    DemoNode("h100-a2", "h100-8x", "rack-a"),
    DemoNode("h100-b1", "h100-8x", "rack-b"),
    DemoNode("h100-b2", "h100-8x", "rack-b"),
    DemoNode("l4-c1", "l4-4x", "rack-c", ("--sharing", "consumable")),
)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _fake_dev(dev: Path) -> bool:
    """Device nodes for the simulated GPUs (needs CAP_MKNOD); False when they cannot be made."""
    try:
        make_dev_tree(dev, range(MAX_SIMULATED_GPUS))
    except PermissionError:
        return False
    return True


def start_cluster(state_dir: Path) -> tuple[ControlPlane, client.ApiClient, int]:
    """Control plane whose scheduler calls a local extender; returns it, a client and the extender port."""
    stop_recorded(state_dir)  # a previous demo is replaced, not reused
    _say("starting the local control plane (the first run builds Kubernetes; later runs reuse it)...")
    port = free_port()
    plane = start_detached(state_dir, {})
    api = config.new_client_from_config(config_file=str(plane.kubeconfig))
    extender = commands.extender(plane.kubeconfig, port, "--insecure-http")  # loopback only: see scheduler_extra
    plane.spawn("extender", Path(extender[0]), extender[1:])
    call_extender(plane, port)  # only GPU and gang pods are sent to it, as manifests/scheduler/ wires a cluster
    apply_file(api, device_classes())
    for addon in (JOBSET, LWS, KUEUE):
        _say(f"starting the {addon.name} controller {addon.version} with its webhooks (built once)...")
        start_addon(plane, api, addon)
    return plane, api, port


def start_nodes(
    plane: ControlPlane, api: client.ApiClient, layout: tuple[DemoNode, ...]
) -> tuple[dict[str, NodeDirs], bool]:
    """A fake Node and a real plugin process per simulated node; waits until each has published."""
    dirs: dict[str, NodeDirs] = {}
    devices_made = True
    for node in layout:
        create_fake_node(api, node.name, {RACK_LABEL: node.rack, ZONE_LABEL: "zone-1"})
        dirs[node.name] = NodeDirs(plane.state_dir / "nodes" / node.name)
        devices_made = _fake_dev(dirs[node.name].dev) and devices_made
        arguments = ("--backend", "simulated", "--profile", node.profile, *node.plugin_args)
        command = commands.plugin(node.name, plane.kubeconfig, *arguments, dirs=dirs[node.name])
        plane.spawn(f"plugin-{node.name}", Path(command[0]), command[1:])
    for node in layout:
        wait_for(lambda n=node.name: published_devices(api, n), 60, f"ResourceSlices of {node.name}")  # type: ignore[misc]
    return dirs, devices_made


def _settle(api: client.ApiClient, what: str, quiet_s: float = 3.0) -> None:
    """Every pod bound or judged, and no new binding for `quiet_s`: a pod the scheduler judged
    once (e.g. while capacity was held for a gang) is often placed on its next try."""
    wait_for(lambda: settled(api), 90, what)
    deadline = time.monotonic() + 60
    seen = bound_pods(api)
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = bound_pods(api)
        if now == seen and settled(api):
            return
        seen = now


def _namespace(api: client.ApiClient, name: str) -> None:
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    wait_for(
        lambda: client.CoreV1Api(api).list_namespaced_service_account(name).items,
        30,
        f"the {name} namespace's default ServiceAccount",
    )


def place_workloads(api: client.ApiClient, extender_port: int) -> None:
    _namespace(api, DEMO_NAMESPACE)
    wait_for(lambda: http_ok(f"http://127.0.0.1:{extender_port}/readyz"), 60, "the extender to sync")
    gang_workloads(api)  # first, so the map shows their domains decided before the examples arrive
    _settle(api, "the gangs to be placed or judged")
    apply_examples(api)
    _settle(api, "every demo pod to be scheduled or judged unschedulable")
    _namespace(api, QUEUED_NAMESPACE)
    queued_workloads(api)  # last, so the examples' placement is the same with or without Kueue
    wait_for(lambda: queued_settled(api), 90, "Kueue to judge the queued JobSets and the admitted one to be placed")


def report(api: client.ApiClient, state_dir: Path) -> None:
    cluster_map = read_map(api)
    print(render_text(cluster_map, (RACK_LABEL,)))
    svg = state_dir / "cluster-map.svg"
    svg.write_text(render_svg(cluster_map, (RACK_LABEL,)))
    print(f"\nthe same map as a picture: {svg}")
    print(f"\nKueue: ClusterQueue {QUEUE} has {QUEUE_SHARES} GPU shares of quota; JobSets in {QUEUED_NAMESPACE}:")
    for name, verdict in sorted(kueue_verdicts(api).items()):
        print(f"  {name}: {verdict}")


def run_demo(state_dir: Path, layout: tuple[DemoNode, ...] = DEFAULT_LAYOUT) -> int:
    started = time.monotonic()
    plane, api, port = start_cluster(state_dir)
    dirs, devices_made = start_nodes(plane, api, layout)
    _say(f"{len(layout)} simulated GPU nodes publish their devices; applying workloads in namespace {DEMO_NAMESPACE}")
    place_workloads(api, port)
    report(api, state_dir)
    if devices_made:
        prepared = play_kubelet(api, DEMO_NAMESPACE, dirs)
        specs = sorted(state_dir.glob("nodes/*/cdi/*.yaml"))
        print(
            f"\nkubelet step: {prepared} claims prepared over gRPC; {len(specs)} CDI specs in {state_dir}/nodes/*/cdi"
        )
    else:
        print("\nkubelet step skipped: creating fake device nodes needs root (CAP_MKNOD)")
    print(
        f"\ndemo ready in {time.monotonic() - started:.0f}s. Explore:\n"
        f"  export KUBECONFIG={plane.kubeconfig}\n"
        f"  kubectl get pods -n {DEMO_NAMESPACE} -o wide; kubectl get resourceslices; "
        f"kubectl get resourceclaims -n {DEMO_NAMESPACE} -o yaml\n"
        f"  nativedra cluster status   # processes and logs under {state_dir}\n"
        "Stop everything: make down  (or: nativedra cluster down)"
    )
    return 0
