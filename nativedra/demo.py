"""`nativedra demo`: a local cluster with simulated GPU nodes running the real plugin, the
example workloads applied, and a map of where everything landed."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client, config

from e2e.cluster import binaries, create_fake_node, wait_for
from e2e.cluster.cli import default_state_dir, start_detached
from e2e.cluster.controlplane import ControlPlaneError, stop_recorded
from e2e.dra import DEVICE_CLASSES, REPO, apply_file, published_devices
from nativedra.clustermap import read_map, render_text
from nativedra.flags import add_flag

RACK_LABEL = "nativedra.dev/rack"
ZONE_LABEL = "topology.kubernetes.io/zone"
EXAMPLES_DIR = REPO / "manifests" / "examples"
DEMO_NAMESPACE = "demo"
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


def run_demo(state_dir: Path, layout: tuple[DemoNode, ...] = DEFAULT_LAYOUT) -> int:
    started = time.monotonic()
    stop_recorded(state_dir)  # a previous demo is replaced, not reused
    _say("starting the local control plane (the first run builds Kubernetes; later runs reuse it)...")
    plane = start_detached(state_dir, {"percentageOfNodesToScore": 100})
    api = config.new_client_from_config(config_file=str(plane.kubeconfig))
    apply_file(api, DEVICE_CLASSES)
    for node in layout:
        create_fake_node(api, node.name, {RACK_LABEL: node.rack, ZONE_LABEL: "zone-1"})
        plane.spawn(
            f"plugin-{node.name}",
            Path(sys.executable),
            [
                "-m",
                "nativedra.cli",
                "plugin",
                "--node-name",
                node.name,
                "--kubeconfig",
                str(plane.kubeconfig),
                "--backend",
                "simulated",
                "--profile",
                node.profile,
                *node.plugin_args,
            ],
        )
    for node in layout:
        wait_for(lambda n=node.name: published_devices(api, n), 60, f"ResourceSlices of {node.name}")  # type: ignore[misc]
    _say(f"{len(layout)} simulated GPU nodes publish their devices; applying examples in namespace {DEMO_NAMESPACE}")
    client.CoreV1Api(api).create_namespace({"metadata": {"name": DEMO_NAMESPACE}})
    wait_for(
        lambda: client.CoreV1Api(api).list_namespaced_service_account(DEMO_NAMESPACE).items,
        30,
        "the demo namespace's default ServiceAccount",
    )
    for example in EXAMPLES:
        apply_file(api, EXAMPLES_DIR / example, DEMO_NAMESPACE)
    wait_for(lambda: _settled(api), 90, "every demo pod to be scheduled or judged unschedulable")
    print(render_text(read_map(api), (RACK_LABEL,)))
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
    except (ControlPlaneError, binaries.BinaryError) as error:
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
