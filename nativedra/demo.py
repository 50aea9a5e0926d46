"""`nativedra demo`: a local cluster with simulated GPU nodes running the real plugin, the
example workloads applied, and a map of where everything landed."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client, config

from dra_driver import DRIVER_NAME
from e2e.cluster import WaitTimeoutError, binaries, commands, create_fake_node, wait_for
from e2e.cluster.cli import default_state_dir, start_detached
from e2e.cluster.controlplane import ControlPlaneError, free_port, stop_recorded
from e2e.cluster.waits import http_ok
from e2e.dra import DEVICE_CLASSES, REPO, apply_file, claim_key, claim_template, gpu_pod, published_devices, request
from e2e.extender_harness import scheduler_extra
from e2e.kubelet import make_dev_tree, prepare
from e2e.shapes import jobset_pods, lws_pod
from nativedra.clustermap import read_map, render_svg, render_text
from nativedra.flags import add_flag

RACK_LABEL = "nativedra.dev/rack"
ZONE_LABEL = "topology.kubernetes.io/zone"
EXAMPLES_DIR = REPO / "manifests" / "examples"
DEMO_NAMESPACE = "demo"
MAX_SIMULATED_GPUS = 16
FLAG_FOR_DIR = {"registry": "registry-dir", "plugins": "plugin-dir", "cdi": "cdi-dir", "dev": "dev-root"}
EXAMPLES = (
    "one-gpu.yaml",
    "two-gpus-same-numa.yaml",
    "mig-partition.yaml",
    "quarter-gpu.yaml",
    "share-10gi.yaml",
    "shared-claim.yaml",
)


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


def _settled(api: client.ApiClient) -> bool:
    """Every demo pod is bound or has the scheduler's verdict."""
    pods = client.CoreV1Api(api).list_namespaced_pod(DEMO_NAMESPACE).items
    return bool(pods) and all(
        pod.spec.node_name
        or any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in pod.status.conditions or [])
        for pod in pods
    )


def _node_dirs(state_dir: Path, node: str) -> dict[str, Path]:
    base = state_dir / "nodes" / node
    return {name: base / name for name in ("registry", "plugins", "cdi", "dev")}


def _fake_dev(dev: Path) -> bool:
    """Device nodes for the simulated GPUs (needs CAP_MKNOD); False when they cannot be made."""
    try:
        make_dev_tree(dev, range(MAX_SIMULATED_GPUS))
    except PermissionError:
        return False
    return True


def pod_claim_names(pod: client.V1Pod) -> list[str]:
    """Claims a pod uses: named directly, or generated from a template (listed in its status)."""
    generated = {s.name: s.resource_claim_name for s in pod.status.resource_claim_statuses or []}
    names = []
    for reference in pod.spec.resource_claims or []:
        name = reference.resource_claim_name or generated.get(reference.name)
        if name:
            names.append(name)
    return names


def play_kubelet(api: client.ApiClient, state_dir: Path, nodes: set[str]) -> int:
    """Prepare the claims of every bound demo pod over its node plugin's socket, as the kubelet would."""
    prepared = 0
    for pod in client.CoreV1Api(api).list_namespaced_pod(DEMO_NAMESPACE).items:
        if pod.spec.node_name not in nodes:
            continue
        socket = _node_dirs(state_dir, pod.spec.node_name)["plugins"] / DRIVER_NAME / "dra.sock"
        for claim_name in pod_claim_names(pod):
            claim = client.CustomObjectsApi(api).get_namespaced_custom_object(
                "resource.k8s.io", "v1", DEMO_NAMESPACE, "resourceclaims", claim_name
            )
            key = claim_key(claim)
            error = prepare(socket, "v1", [key]).claims[key[1]].error
            if error:
                _say(f"prepare {pod.metadata.name}: {error}")
            else:
                prepared += 1
    return prepared


def gang_workloads(api: client.ApiClient) -> None:
    """Gangs as their controllers would create them: a JobSet training job (2 x 2 pods, one rack),
    a LeaderWorkerSet leader (its worker follows once it is placed), and a job too big for any rack."""
    claim_template(api, DEMO_NAMESPACE, "two-gpus", [request("gpus", "gpu.nativedra.dev", count=2)])
    jobset_pods(api, DEMO_NAMESPACE, "train", "two-gpus", replicas=2, parallelism=2, exclusive_topology=RACK_LABEL)
    lws_pod(api, DEMO_NAMESPACE, "serve", "two-gpus", size=2, worker=0)
    # 3 pods x 4 GPUs in one rack can never fit: a rack has 2 H100 nodes with 6 whole GPUs each.
    claim_template(api, DEMO_NAMESPACE, "four-gpus", [request("gpus", "gpu.nativedra.dev", count=4)])
    for index in range(3):
        gpu_pod(
            api,
            DEMO_NAMESPACE,
            f"pretrain-{index}",
            "four-gpus",
            labels={"nativedra.dev/gang": "pretrain", "nativedra.dev/gang-size": "3"},
            annotations={"nativedra.dev/topology-required": RACK_LABEL},
        )


def run_demo(state_dir: Path, layout: tuple[DemoNode, ...] = DEFAULT_LAYOUT) -> int:
    started = time.monotonic()
    stop_recorded(state_dir)  # a previous demo is replaced, not reused
    _say("starting the local control plane (the first run builds Kubernetes; later runs reuse it)...")
    port = free_port()
    plane = start_detached(state_dir, scheduler_extra(port))
    api = config.new_client_from_config(config_file=str(plane.kubeconfig))
    extender = commands.extender(plane.kubeconfig, port)
    plane.spawn("extender", Path(extender[0]), extender[1:])
    apply_file(api, DEVICE_CLASSES)
    devices_made = True
    for node in layout:
        create_fake_node(api, node.name, {RACK_LABEL: node.rack, ZONE_LABEL: "zone-1"})
        dirs = _node_dirs(state_dir, node.name)
        devices_made = _fake_dev(dirs["dev"]) and devices_made
        arguments = ["--backend", "simulated", "--profile", node.profile, *node.plugin_args]
        for flag in ("registry", "plugins", "cdi", "dev"):
            arguments += [f"--{FLAG_FOR_DIR[flag]}", str(dirs[flag])]
        command = commands.plugin(node.name, plane.kubeconfig, *arguments)
        plane.spawn(f"plugin-{node.name}", Path(command[0]), command[1:])
    for node in layout:
        wait_for(lambda n=node.name: published_devices(api, n), 60, f"ResourceSlices of {node.name}")  # type: ignore[misc]
    _say(f"{len(layout)} simulated GPU nodes publish their devices; applying examples in namespace {DEMO_NAMESPACE}")
    client.CoreV1Api(api).create_namespace({"metadata": {"name": DEMO_NAMESPACE}})
    wait_for(
        lambda: client.CoreV1Api(api).list_namespaced_service_account(DEMO_NAMESPACE).items,
        30,
        "the demo namespace's default ServiceAccount",
    )
    wait_for(lambda: http_ok(f"http://127.0.0.1:{port}/readyz"), 60, "the extender to sync")
    gang_workloads(api)  # first, so the map shows their domains decided before the examples arrive
    wait_for(lambda: _settled(api), 90, "the gangs to be placed or judged")
    for example in EXAMPLES:
        apply_file(api, EXAMPLES_DIR / example, DEMO_NAMESPACE)
    wait_for(lambda: _settled(api), 90, "every demo pod to be scheduled or judged unschedulable")
    lws_pod(api, DEMO_NAMESPACE, "serve", "two-gpus", size=2, worker=1)  # the LWS controller adds workers later
    wait_for(lambda: _settled(api), 90, "the inference worker")
    cluster_map = read_map(api)
    print(render_text(cluster_map, (RACK_LABEL,)))
    svg = state_dir / "cluster-map.svg"
    svg.write_text(render_svg(cluster_map, (RACK_LABEL,)))
    print(f"\nthe same map as a picture: {svg}")
    if devices_made:
        prepared = play_kubelet(api, state_dir, {node.name for node in layout})
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


def _demo(args: argparse.Namespace) -> int:
    try:
        return run_demo(Path(args.state_dir).resolve())
    except (ControlPlaneError, binaries.BinaryError, WaitTimeoutError) as error:
        print(f"nativedra demo: {error}", file=sys.stderr)
        return 1


def register(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = subcommands.add_parser(
        "demo",
        help="local cluster + simulated GPU nodes + examples, then a map of the placements",
        description="Starts the local control plane, five simulated GPU nodes (2 racks x 2 nodes of 8x H100, "
        "one node of 4x L4 in consumable-share mode) each with a real plugin process, applies the examples and "
        "prints which pod holds which GPU. Leaves it running; stop with `nativedra cluster down`.",
    )
    add_flag(demo, "--state-dir", type=Path, default=default_state_dir(), help="cluster files and logs")
    demo.set_defaults(handler=_demo)
