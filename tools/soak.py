"""A bounded soak on loopback: pods and gangs churn through the real scheduler and extender, real
plugin processes prepare what is bound (played kubelet), the extender and a plugin are SIGKILLed
twice each. Afterwards: no pod stuck that could fit, no CDI spec lost for a prepared claim, no
device prepared for two claims at once, extender RSS within 10% of its warmed-up level.

`python -m tools.soak --seconds 600` (`make soak`); CI runs a shorter one (e2e/test_soak.py)."""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from kubernetes import client

from dra_driver.kubelet_paths import dra_socket
from extender.plan.config import RACK_LABEL
from extender.pods.gang import GANG, GANG_SIZE, TOPOLOGY_PREFERRED
from nativedra.base.kube.names import GPU_CLASS
from nativedra.base.kube.pods import pod_claim_names
from nativedra.base.kube.resources import RESOURCE_CLAIMS, RESOURCE_SLICES
from nativedra.cluster import ControlPlane, create_fake_node
from nativedra.kubelet_client import make_dev_tree, prepare, unprepare
from nativedra.objects import claim_key, claim_template, gpu_pod, published_devices, request
from testkit.extender_harness import ExtenderCluster, extender_cluster
from testkit.node_plugin import NodePlugin

NAMESPACE = "soak"
GANG_SIZE_PODS = 3


@dataclass
class SoakReport:
    seconds: float
    pods_created: int = 0
    gangs_created: int = 0
    claims_prepared: int = 0
    kills: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    lost_specs: list[str] = field(default_factory=list)
    double_prepared: list[str] = field(default_factory=list)
    rss_warm_kib: int = 0
    rss_end_kib: int = 0
    rss_samples_kib: list[int] = field(default_factory=list)  # the extender's RSS once a minute

    @property
    def rss_growth(self) -> float:
        return (self.rss_end_kib - self.rss_warm_kib) / self.rss_warm_kib if self.rss_warm_kib else 0.0


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class PlayedKubelet:
    """Prepares the claims of bound pods on their node's plugin and unprepares those of gone pods."""

    def __init__(self, api: client.ApiClient, plugins: dict[str, NodePlugin]) -> None:
        self.api = api
        self.plugins = plugins
        self.prepared: dict[str, tuple[str, tuple[str, str, str]]] = {}  # claim uid -> (node, key)

    def sync(self) -> int:
        core = client.CoreV1Api(self.api)
        live: set[str] = set()
        done = 0
        for pod in core.list_namespaced_pod(NAMESPACE).items:
            if not pod.spec.node_name or pod.metadata.deletion_timestamp:
                continue
            for name in filter(None, pod_claim_names(self.api.sanitize_for_serialization(pod)).values()):
                with contextlib.suppress(client.ApiException):
                    claim = RESOURCE_CLAIMS.get(self.api, name, NAMESPACE)
                    key = claim_key(claim)
                    live.add(key[1])
                    if key[1] not in self.prepared and (claim.get("status") or {}).get("allocation"):
                        done += self._call(pod.spec.node_name, key, prepare)
        for uid in [uid for uid in self.prepared if uid not in live]:
            node, key = self.prepared[uid]
            self._call(node, key, unprepare)
        return done

    def _call(self, node: str, key: tuple[str, str, str], verb: object) -> int:
        plugin = self.plugins[node]
        try:
            answer = verb(dra_socket(plugin.plugin_dir), "v1", [key], timeout=10)  # type: ignore[operator]
        except Exception:  # noqa: BLE001 - a killed plugin: the kubelet retries, so do we
            return 0
        if answer.claims[key[1]].error:
            return 0
        if verb is prepare:
            self.prepared[key[1]] = (node, key)
            return 1
        self.prepared.pop(key[1], None)
        return 0


def _start_nodes(cluster: ExtenderCluster, count: int, roots: list[Path]) -> dict[str, NodePlugin]:
    plugins = {}
    for index in range(count):
        name = f"soak-{index}-{uuid.uuid4().hex[:4]}"
        create_fake_node(cluster.api, name, {RACK_LABEL: f"rack-{index % 2}"})
        root = Path(tempfile.mkdtemp(prefix="nd-soak-", dir="/tmp"))
        roots.append(root)
        make_dev_tree(root / "dev", range(8))
        plugin = NodePlugin(
            cluster.plane, root, name, ("--backend", "simulated", "--profile", "a100-8x", "--fractions", "none")
        )
        plugin.start()
        plugins[name] = plugin
    return plugins


def _whole_gpus(api: client.ApiClient, nodes: list[str]) -> int:
    return sum(
        1
        for node in nodes
        for device in published_devices(api, node).values()
        if device["attributes"]["type"]["string"] == "gpu"
    )


def _bound_pods(api: client.ApiClient) -> list[client.V1Pod]:
    pods = client.CoreV1Api(api).list_namespaced_pod(NAMESPACE).items
    return [p for p in pods if p.spec.node_name and not p.metadata.deletion_timestamp]


def _churn(api: client.ApiClient, report: SoakReport, capacity: int, rng: random.Random) -> None:
    """Create a pod or a gang, and delete bound work while the cluster is more than 70% busy."""
    core = client.CoreV1Api(api)
    if rng.random() < 0.3:
        name = f"g{report.gangs_created}"
        labels = {GANG: name, GANG_SIZE: str(GANG_SIZE_PODS)}
        for member in range(GANG_SIZE_PODS):
            gpu_pod(
                api,
                NAMESPACE,
                f"{name}-{member}",
                "two-gpus",
                labels=labels,
                annotations={TOPOLOGY_PREFERRED: RACK_LABEL},
            )
        report.gangs_created += 1
    else:
        gpu_pod(api, NAMESPACE, f"p{report.pods_created}", "one-gpu")
        report.pods_created += 1
    bound = _bound_pods(api)
    used = sum(2 if (p.metadata.labels or {}).get(GANG) else 1 for p in bound)
    while bound and used > 0.7 * capacity:
        victim = bound.pop(rng.randrange(len(bound)))
        gang = (victim.metadata.labels or {}).get(GANG)
        names = [f"{gang}-{m}" for m in range(GANG_SIZE_PODS)] if gang else [str(victim.metadata.name)]
        for pod_name in names:
            with contextlib.suppress(client.ApiException):
                core.delete_namespaced_pod(pod_name, NAMESPACE, grace_period_seconds=0)
        used -= 2 * len(names) if gang else 1


def _spec_devices(plugins: dict[str, NodePlugin]) -> dict[str, list[str]]:
    """(node/device) -> claim UIDs whose CDI spec gives that device."""
    holders: dict[str, list[str]] = {}
    for node, plugin in plugins.items():
        for spec in plugin.cdi_dir.glob("*.yaml"):
            uid = spec.name.split("_", 1)[1].removesuffix(".yaml")
            for device in yaml.safe_load(spec.read_text()).get("devices") or []:
                holders.setdefault(f"{node}/{device['name'].removeprefix(uid + '-')}", []).append(uid)
    return holders


def run_soak(
    root: Path, seconds: float, nodes: int = 3, seed: int = 7, shared: ControlPlane | None = None
) -> SoakReport:
    """The soak on a control plane of its own, or on `shared` (a running one, default gates), which
    it leaves as it found it: its namespace, nodes and their slices are removed afterwards."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible workload, not cryptography
    report = SoakReport(seconds)
    roots: list[Path] = []
    plugins: dict[str, NodePlugin] = {}
    with extender_cluster(root, {"planTimeoutSeconds": 60}, shared=shared) as cluster:
        api = cluster.api
        client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
        for name, count in (("one-gpu", 1), ("two-gpus", 2)):
            claim_template(api, NAMESPACE, name, [request("gpus", GPU_CLASS, count=count)])
        plugins = _start_nodes(cluster, nodes, roots)
        try:
            kubelet = PlayedKubelet(api, plugins)
            time.sleep(2)
            capacity = _whole_gpus(api, list(plugins))
            started = time.monotonic()
            kills = {0.3: "extender", 0.45: "plugin", 0.6: "extender", 0.75: "plugin"}
            warm_at: float | None = None
            while (elapsed := time.monotonic() - started) < seconds:
                _churn(api, report, capacity, rng)
                report.claims_prepared += kubelet.sync()
                for fraction in [f for f in kills if elapsed >= f * seconds]:
                    victim = kills.pop(fraction)
                    if victim == "extender" and cluster.process:
                        cluster.process.kill()
                        cluster.process.wait()
                        cluster.start_extender()
                        warm_at = time.monotonic() + 0.1 * seconds
                    else:
                        plugin = rng.choice(list(plugins.values()))
                        assert plugin.process is not None
                        plugin.process.kill()
                        plugin.process.wait()
                        plugin.start()
                    report.kills.append(f"{victim} at {elapsed:.0f}s")
                if warm_at is not None and time.monotonic() >= warm_at and cluster.process:
                    report.rss_warm_kib, warm_at = _rss_kib(cluster.process.pid), None
                if cluster.process and elapsed >= 60 * (len(report.rss_samples_kib) + 1):
                    report.rss_samples_kib.append(_rss_kib(cluster.process.pid))
                time.sleep(0.5)
            _finish(api, cluster, kubelet, plugins, report, capacity)
        finally:
            for plugin in plugins.values():
                plugin.stop()
            for directory in roots:
                shutil.rmtree(directory, ignore_errors=True)
            if shared is not None:
                _remove(api, list(plugins))
    return report


def _remove(api: client.ApiClient, nodes: list[str]) -> None:
    """The soak's namespace and nodes, and the nodes' slices (their owner is gone)."""
    core = client.CoreV1Api(api)
    with contextlib.suppress(client.ApiException):
        core.delete_namespace(NAMESPACE)
    for node in nodes:
        with contextlib.suppress(client.ApiException):
            core.delete_node(node)
        for item in RESOURCE_SLICES.list(api, field_selector=f"spec.nodeName={node}")["items"]:
            with contextlib.suppress(client.ApiException):
                RESOURCE_SLICES.delete(api, item["metadata"]["name"])


def _finish(
    api: client.ApiClient,
    cluster: ExtenderCluster,
    kubelet: PlayedKubelet,
    plugins: dict[str, NodePlugin],
    report: SoakReport,
    capacity: int,
) -> None:
    """Gangs leave; every plain pod that fits must then be bound, and the node files must agree."""
    core = client.CoreV1Api(api)
    for pod in core.list_namespaced_pod(NAMESPACE).items:
        if (pod.metadata.labels or {}).get(GANG):
            with contextlib.suppress(client.ApiException):
                core.delete_namespaced_pod(pod.metadata.name, NAMESPACE, grace_period_seconds=0)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        kubelet.sync()
        pods = [p for p in core.list_namespaced_pod(NAMESPACE).items if not p.metadata.deletion_timestamp]
        pending = [p.metadata.name for p in pods if not p.spec.node_name]
        if not pending or len(pods) - len(pending) >= capacity:
            break
        time.sleep(1)
    report.stuck = pending if len(pods) - len(pending) < capacity else []
    kubelet.sync()
    specs = {node: {p.name for p in plugin.cdi_dir.glob("*.yaml")} for node, plugin in plugins.items()}
    report.lost_specs = [
        uid for uid, (node, _) in kubelet.prepared.items() if not any(uid in name for name in specs[node])
    ]
    report.double_prepared = [device for device, uids in _spec_devices(plugins).items() if len(set(uids)) > 1]
    if cluster.process:
        report.rss_end_kib = _rss_kib(cluster.process.pid)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--nodes", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="nd-soak-run-", dir="/tmp"))
    try:
        report = run_soak(root, args.seconds, args.nodes)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({**report.__dict__, "rss_growth": round(report.rss_growth, 3)}, indent=2))
    ok = not (report.stuck or report.lost_specs or report.double_prepared) and report.rss_growth <= 0.10
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
