"""Extender latency at 500 and 5,000 nodes x 8 GPUs (in-process, the same code the HTTP app runs),
and real kube-scheduler throughput for a DRA workload with the extender divided by without it.

Latency baseline (same run): a JSON round trip of the request body the scheduler sends, the
least work any extender must do per call.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

from kubernetes import client

from bench.timing import measure, report
from dra_driver.discovery.simulated import load_profile, resolve_profile
from dra_driver.publish_config import PublishConfig
from dra_driver.publisher import SlicePublisher
from dra_driver.slices import build_slices
from extender.config import RACK_LABEL, ExtenderConfig
from extender.decide import Decider
from extender.view import ClusterView
from nativedra.cluster import ControlPlane, commands, create_fake_node, wait_for
from nativedra.cluster.controlplane import free_port
from nativedra.cluster.scheduler_config import scheduler_extra
from nativedra.cluster.waits import http_ok
from nativedra.objects import apply_file, claim_template, device_classes, gpu_pod, request
from tests import builders

THROUGHPUT_NODES = 20
THROUGHPUT_PODS = 100


def _view(count: int) -> ClusterView:
    """`count` nodes of 8 GPUs, 16 to a rack, and the templates the measured pods use."""
    nodes = builders.gpu_nodes({f"n{index:05d}": {RACK_LABEL: f"rack-{index // 16}"} for index in range(count)})
    templates = [builders.claim_template(name, devices, namespace="b") for name, devices in (("one", 1), ("eight", 8))]
    return builders.view(nodes, templates=templates)


def _pod(name: str, template: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return builders.pod(name, namespace="b", labels=labels, template=template, created=builders.CREATED)


def latency(count: int) -> Iterator[str]:
    view = _view(count)
    decider = Decider(ExtenderConfig())
    names = sorted(view.nodes)
    single = _pod("single", "one")
    member = _pod("member-0", "eight", builders.gang_labels("train", 16, RACK_LABEL))
    body = json.dumps({"Pod": single, "NodeNames": names})
    baseline = measure(lambda: json.loads(json.dumps(json.loads(body))), 20)
    start = time.perf_counter()
    decider.filter(view, member, names)
    warm = time.perf_counter() - start
    yield f"{count} nodes: first gang filter (selector evaluation and per-node caches) {warm * 1000:.0f} ms"
    for label, pod in (("filter, 1-GPU pod", single), ("filter, gang member 16x8 GPUs/rack", member)):
        timing = measure(lambda pod=pod: decider.filter(view, pod, names, now=time.time()), 20)  # type: ignore[misc]
        yield report(f"{count} nodes: {label}", timing, baseline, "JSON round trip")
    first = measure(lambda: Decider(ExtenderConfig()).prioritize(view, single, names), 5)
    yield report(f"{count} nodes: prioritize, first call for a pod shape", first, baseline, "JSON round trip")
    timing = measure(lambda: decider.prioritize(view, single, names), 20)
    yield report(f"{count} nodes: prioritize, steady state", timing, baseline, "JSON round trip")


def _throughput(api: client.ApiClient, namespace: str) -> float:
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": namespace}})
    wait_for(lambda: core.list_namespaced_service_account(namespace).items, 30, "default ServiceAccount")
    claim_template(api, namespace, "one", [request("gpus", "gpu.nativedra.dev", count=1)])
    start = time.perf_counter()
    for index in range(THROUGHPUT_PODS):
        gpu_pod(api, namespace, f"p{index:03d}", "one")
    wait_for(
        lambda: sum(1 for p in core.list_namespaced_pod(namespace).items if p.spec.node_name) == THROUGHPUT_PODS,
        300,
        "all pods bound",
    )
    return THROUGHPUT_PODS / (time.perf_counter() - start)


def throughput(api: client.ApiClient, plane: ControlPlane) -> Iterator[str]:
    apply_file(api, device_classes())
    inventory = load_profile(resolve_profile("a100-8x"))
    for index in range(THROUGHPUT_NODES):
        name = f"tput-{index:02d}"
        create_fake_node(api, name)
        SlicePublisher(api, name).reconcile(build_slices(inventory, PublishConfig(fractions=()), name))
    plain = _throughput(api, "tput-plain")
    port = free_port()
    plane.restart_scheduler(scheduler_extra(port))
    extender = subprocess.Popen(
        commands.extender(plane.kubeconfig, port, "--insecure-http"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: http_ok(f"http://127.0.0.1:{port}/readyz"), 60, "the extender")
        client.CoreV1Api(api).delete_namespace("tput-plain")
        wait_for(lambda: not list(client.CoreV1Api(api).list_namespaced_pod("tput-plain").items), 120, "cleanup")
        extended = _throughput(api, "tput-extended")
    finally:
        extender.terminate()
        extender.wait(timeout=15)
    yield (
        f"scheduler throughput, {THROUGHPUT_PODS} 1-GPU DRA pods on {THROUGHPUT_NODES} nodes: "
        f"{extended:.1f} pods/s with the extender = {extended / plain:.2f} x without it ({plain:.1f} pods/s)"
    )


def run(api: client.ApiClient, plane: ControlPlane) -> Iterator[str]:
    for count in (500, 5000):
        yield from latency(count)
    yield from throughput(api, plane)
