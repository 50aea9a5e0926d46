"""A busy cluster as an admin's looks with the shipped publishing defaults: five GPU products (A100,
H100, H200 8-GPU nodes, L4 4-GPU nodes, MI300X), each published with `PublishConfig()` (whole GPUs,
1/2, 1/4 and 1/8 fractions, MIG placements where the GPU has them: about 120 devices per 8-GPU
node), zones and racks, CPU and memory allocatable. Every busy node runs a random number of 1-GPU
pods on random GPUs, some of its free GPUs hold a fractional pod, 10% of the nodes run bound 8-pod
gangs, and pending rack gangs wait. No two nodes are used alike, so no cache keyed by node model
gets the best case of identical nodes.
"""

from __future__ import annotations

import json
import random
from typing import Any

from dra_driver.discovery.simulated import load_profile, resolve_profile
from dra_driver.publishing.publish_config import PublishConfig
from dra_driver.publishing.slices import build_slices
from extender.plan.config import RACK_LABEL
from testkit.builders import (
    FRACTION_CLASS,
    GPU_CLASS,
    BusyCluster,
    bind_to_node,
    claim_template,
    claimed_pod,
    gang_labels,
    with_pending_gangs,
)

PRODUCTS = ("a100-8x", "h100-8x", "h200-8x", "l4-4x", "mi300x-8x")
RACK_SIZE = 16
RACKS_PER_ZONE = 25
PRIORITIES = (0, 10, 100)
ZONE_LABEL = "topology.kubernetes.io/zone"
ALLOCATABLE = {"cpu": "192", "memory": "2Ti", "pods": "110"}
PLACEHOLDER = "@node@"
SERIAL = "@serial@"  # the first 8 hex digits of each GPU's UUID: no two nodes' GPUs share a UUID
FRACTIONAL_SHARE = 0.2  # of the busy nodes, those where one free GPU holds a half-GPU pod


def product_slices(profile: str) -> tuple[str, int]:
    """The product's slices for a placeholder node, as JSON text to stamp a node's name and its
    GPUs' serial into, and its GPUs."""
    inventory = load_profile(resolve_profile(profile))
    specs = build_slices(inventory, PublishConfig(), PLACEHOLDER)
    slices = []
    for index, spec in enumerate(specs):
        spec["pool"]["generation"] = 1
        slices.append({"metadata": {"name": f"{PLACEHOLDER}-slice-{index}"}, "spec": spec})
    text = json.dumps(slices)
    for gpu in inventory.gpus:  # "GPU-" and 8 hex digits, then the rest of the UUID
        text = text.replace(gpu.uuid, f"GPU-{SERIAL}{gpu.uuid[12:]}")
    return text, len(inventory.gpus)


def node_labels(name: str, index: int, profile: str) -> dict[str, str]:
    rack = index // RACK_SIZE
    return {
        "kubernetes.io/hostname": name,
        RACK_LABEL: f"rack-{rack:04d}",
        ZONE_LABEL: f"zone-{rack // RACKS_PER_ZONE}",
        "nativedra.dev/product": profile,
    }


def _running(member: dict[str, Any], rng: random.Random) -> None:
    member["spec"]["priority"] = rng.choice(PRIORITIES)
    member["spec"]["containers"] = [{"name": "c", "resources": {"requests": {"cpu": "8", "memory": "64Gi"}}}]
    member["status"]["startTime"] = f"2026-12-0{rng.randint(1, 3)}T0{rng.randint(0, 9)}:00:00Z"


def mixed_busy_cluster(
    count: int, *, seed: int = 1, pending_gangs: int = 20, pending_gang_size: int = 8, namespace: str = "busy"
) -> BusyCluster:
    """`count` nodes of the five products in turn, RACK_SIZE to a rack (a rack holds 3 or 4 L4
    nodes, so a rack gang is 8 pods x 8 GPUs): 10% of the nodes (whole gangs of 8 of the 8-GPU ones)
    run bound 8-pod gangs, each pod on all of its node's GPUs; the next 70% run 1 to all of their
    GPUs' worth of 1-GPU pods on random GPUs, and FRACTIONAL_SHARE of those with a GPU left run a
    half-GPU pod on one; the last 20% are free, and `pending_gangs` gangs of `pending_gang_size`
    pods x 8 GPUs that require one rack wait for them. Every bound pod's claim is allocated and
    reserved for it."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible cluster, not a secret
    products = {profile: product_slices(profile) for profile in PRODUCTS}
    one, eight = claim_template("one", 1, namespace=namespace), claim_template("eight", 8, namespace=namespace)
    half = claim_template("half", 1, device_class=FRACTION_CLASS["metadata"]["name"], namespace=namespace)
    names = [f"n{index:05d}" for index in range(count)]
    nodes: list[dict[str, Any]] = []
    slices: list[dict[str, Any]] = []
    eight_gpu_nodes: list[str] = []
    gpus_of: dict[str, int] = {}
    for index, name in enumerate(names):
        profile = PRODUCTS[index % len(PRODUCTS)]
        text, gpus = products[profile]
        nodes.append({"metadata": {"name": name, "labels": node_labels(name, index, profile)}})
        nodes[-1]["status"] = {"allocatable": dict(ALLOCATABLE)}
        slices.extend(json.loads(text.replace(PLACEHOLDER, name).replace(SERIAL, f"{index:08x}")))
        gpus_of[name] = gpus
        if gpus == 8:
            eight_gpu_nodes.append(name)
    pairs: list[tuple[dict[str, Any], dict[str, Any]]] = []
    gang_nodes = [name for name in eight_gpu_nodes if name < names[count // 10]][: count // 10 // 8 * 8]
    for index, node in enumerate(gang_nodes):
        labels = gang_labels(f"bound-{index // 8}", 8, RACK_LABEL)
        pairs.append(claimed_pod(f"bound-{index // 8}-{index % 8}", eight, namespace, labels=labels))
        bind_to_node(*pairs[-1], node, [f"gpu-{gpu}" for gpu in range(8)])
    running: list[tuple[dict[str, Any], dict[str, Any]]] = []
    taken = set(gang_nodes)
    for node in (name for name in names[: count * 8 // 10] if name not in taken):
        gpus = gpus_of[node]
        used = rng.sample(range(gpus), rng.randint(1, gpus))
        for gpu in used:
            running.append(claimed_pod(f"{node}-gpu-{gpu}", one, namespace))
            bind_to_node(*running[-1], node, [f"gpu-{gpu}"])
            _running(running[-1][0], rng)
        free = sorted(set(range(gpus)) - set(used))
        if free and rng.random() < FRACTIONAL_SHARE:
            gpu = rng.choice(free)
            pairs.append(claimed_pod(f"{node}-half-{gpu}", half, namespace))
            bind_to_node(*pairs[-1], node, [f"gpu-{gpu}-1of2-0"])
            _running(pairs[-1][0], rng)
    pairs.extend(running)
    listed = {
        "nodes": nodes,
        "resourceslices": slices,
        "resourceclaimtemplates": [one, eight, half],
        "deviceclasses": [GPU_CLASS, FRACTION_CLASS],
    }
    return with_pending_gangs(
        listed,
        pairs,
        running,
        names=names,
        pending_gangs=pending_gangs,
        pending_gang_size=pending_gang_size,
        namespace=namespace,
    )
