"""Extender latency on a busy cluster at 500 and 5,000 nodes x 8 GPUs, through the real HTTP app
and the real watch-fed state (`bench.busy_cluster`, one fresh process per size), and real
kube-scheduler throughput for a DRA workload with the extender divided by without it.

Latency baseline (same run, same process): a JSON encode and decode of the request body the
scheduler sends, the least work any extender must do per call. Every figure also goes to
bench-results/extender.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Generator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client

from bench.busy_cluster import Bounds
from bench.timing import write_results
from dra_driver.discovery.simulated import load_profile, resolve_profile
from dra_driver.publish_config import PublishConfig
from dra_driver.publisher import SlicePublisher
from dra_driver.slices import build_slices
from nativedra.cluster import ControlPlane, commands, create_fake_node, wait_for
from nativedra.cluster.controlplane import free_port
from nativedra.cluster.scheduler_config import scheduler_extra
from nativedra.cluster.waits import http_ok
from nativedra.objects import apply_file, claim_template, device_classes, gpu_pod, request

THROUGHPUT_NODES = 20
THROUGHPUT_PODS = 100
# Calls per figure, and seconds per figure after which a slow one stops at `measure`'s minimum:
# at 5,000 nodes every call that follows a watch event re-plans all gangs, seconds each, so its
# figures have a handful of calls; the whole latency part stays near 8 minutes on 2 cores.
LATENCY_BOUNDS = {500: Bounds(calls=200, budget_s=30.0), 5000: Bounds(calls=50, budget_s=45.0)}


def latency(count: int, bounds: Bounds) -> Generator[str, None, dict[str, Any]]:
    """One size's lines as `bench.busy_cluster` measures them, in an interpreter of its own so its
    RSS is that size's alone; returns its figures."""
    with tempfile.TemporaryDirectory(prefix="nativedra-bench-") as scratch:
        figures = Path(scratch) / "figures.json"
        command = [sys.executable, "-m", "bench.busy_cluster", str(count), "--json", str(figures)]
        command += ["--calls", str(bounds.calls), "--budget", str(bounds.budget_s)]
        with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
            assert process.stdout is not None  # stdout=PIPE
            yield from (line.rstrip("\n") for line in process.stdout)
        if process.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} exited with {process.returncode}")
        result: dict[str, Any] = json.loads(figures.read_text())
        return result


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


def throughput(api: client.ApiClient, plane: ControlPlane) -> Generator[str, None, dict[str, Any]]:
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
    return {
        "nodes": THROUGHPUT_NODES,
        "pods": THROUGHPUT_PODS,
        "with_extender_pods_per_s": extended,
        "without_pods_per_s": plain,
        "ratio": extended / plain,
    }


def run(api: client.ApiClient, plane: ControlPlane) -> Iterator[str]:
    document: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python -m bench extender",
        "cpus": os.cpu_count(),
        "latency": {},
    }
    for count, bounds in LATENCY_BOUNDS.items():
        document["latency"][str(count)] = yield from latency(count, bounds)
    document["throughput"] = yield from throughput(api, plane)
    yield f"figures written to {write_results('extender', document)}"
