"""A real node: the upstream kubelet on containerd 2.x and runc runs the plugin's image as the
shipped DaemonSet (`manifests/overlays/simulated-node`, i.e. base plus a simulated inventory), and
the shipped example pods, with their images swapped for a probe, see exactly their GPUs. The upstream
kube-proxy routes Service ClusterIPs, so the loopback kube-scheduler calls the extender Deployment
(`manifests/base/extender.yaml`) running on this node through its Service.

Needs root and containers (a cgroup hierarchy, overlayfs, mknod); the Debian packages and the
containerd build are fetched once. Where containers cannot run at all, the module is skipped and
says why.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from dra_driver.discovery.simulated import load_profile, resolve_profile
from dra_driver.kubelet_paths import DEFAULT_CDI_DIR
from extender.pods.gang import GANG, GANG_SIZE
from nativedra.base.kube.names import (
    DRIVER_NAME,
    EVERY_NODE_PROFILE,
    EXTENDER_MARKER,
    EXTENDER_MARKER_QUANTITY,
    GPU_NODE_LABEL,
    WHOLE_GPU_RESOURCE,
)
from nativedra.base.kube.resources import RESOURCE_CLAIMS
from nativedra.cluster import ControlPlane, resolve, wait_for
from nativedra.cluster.extender_wiring import call_extender, stop_calling_extender
from nativedra.cluster.pki import extender_tls
from nativedra.cluster.realnode import (
    NVIDIA_MAJOR,
    NVIDIACTL_MINOR,
    SIMULATED_ROOT,
    ContainersUnavailableError,
    RealNode,
)
from nativedra.cluster.waits import describe_pod
from nativedra.objects import apply_documents, apply_file, device_classes, published_devices
from testkit.dra import CDI_PREFIX
from testkit.extender_harness import bound, fresh_namespace
from testkit.extender_service import NAME as EXTENDER
from testkit.extender_service import NAMESPACE as EXTENDER_NAMESPACE
from testkit.extender_service import (
    SHIPPED_WIRING,
    extender_pods,
    is_ready,
    ready_endpoints,
    restart_rollout,
    rolled_out,
    shipped_wiring,
    tls_secret,
)
from testkit.manifests import containers_unavailable, kustomize

REPO = Path(__file__).resolve().parent.parent
OVERLAY = REPO / "manifests" / "overlays" / "simulated-node"
EXAMPLES = REPO / "manifests" / "examples"
NODE = "real-0"
PLUGIN_NAMESPACE = "nativedra-plugin"
PLUGIN_SELECTOR = "app.kubernetes.io/name=nativedra-plugin"
PROFILE_GPUS = load_profile(resolve_profile("h100-8x")).gpus
GPU_UUIDS = {gpu.uuid: gpu.minor for gpu in PROFILE_GPUS}
# What each probe container prints: its NVIDIA device nodes, then nativedra's and CUDA's environment,
# again every second so a later look shows whether the devices are still there.
METADATA_DIR = "/var/run/kubernetes.io/dra-device-attributes"  # KEP-5304 device metadata, mounted by CDI
PROBE = (
    "while true; do echo BEGIN; ls -l /dev | grep nvidia; env | grep -E '^(NATIVEDRA|CUDA)_' | sort; "
    f"find {METADATA_DIR} -name '*.json' 2>/dev/null | sed 's/^/METADATA /'; echo END; sleep 1; done"
)
EXTENDER_PORT = 8888  # the Service's https port, as shipped
ROLLOUT_PODS = 8  # quarter GPUs created during a rollout: room for them on 8 GPUs whatever else runs
DEVICE_LINE = re.compile(r"^c\S*\s+\d+\s+\S+\s+\S+\s+(\d+),\s*(\d+)\s.*\s(nvidia\S*)$")

pytestmark = pytest.mark.timeout(900)


@dataclass
class Node:
    plane: ControlPlane
    api: client.ApiClient
    node: RealNode

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)


def with_image(documents: list[dict[str, Any]], image: str) -> list[dict[str, Any]]:
    """The manifests with our locally built image where they name the published one."""
    for document in documents:
        if document["kind"] in {"DaemonSet", "Deployment"}:
            for container in document["spec"]["template"]["spec"]["containers"]:
                container["image"] = image
    return documents


def plugin_pods(env: Node) -> list[Any]:
    return list(env.core.list_namespaced_pod(PLUGIN_NAMESPACE, label_selector=PLUGIN_SELECTOR).items)


def ready_plugin(env: Node) -> Any:
    """The plugin pod once it is Ready (its probes pass) and it has published the node's GPUs."""

    def ready() -> Any:
        for pod in plugin_pods(env):
            statuses = pod.status.container_statuses or []
            serving = pod.metadata.deletion_timestamp is None and statuses and all(s.ready for s in statuses)
            if serving and published_devices(env.api, NODE):
                return pod
        return None

    return wait_for(ready, 240, "the plugin DaemonSet pod to be Ready and publishing", lambda: describe_plugin(env))


def describe_plugin(env: Node) -> str:
    lines = []
    for pod in plugin_pods(env):
        lines.append(describe_pod(env.api, PLUGIN_NAMESPACE, pod.metadata.name))
        with contextlib.suppress(client.ApiException):
            lines.append(env.core.read_namespaced_pod_log(pod.metadata.name, PLUGIN_NAMESPACE, tail_lines=20))
    return "\n".join(lines)


@pytest.fixture(scope="module")
def real_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    reason = containers_unavailable()
    if reason:
        pytest.skip(reason)
    plane = ControlPlane(state_dir=Path(tmp_path_factory.mktemp("real-node-cluster")), binaries=resolve())
    plane.start()
    node = RealNode(plane, NODE, labels={GPU_NODE_LABEL: "true"}, repo=REPO, kube_proxy=True)
    try:
        try:
            node.start()
        except ContainersUnavailableError as error:
            pytest.skip(str(error))
        api = plane.api_client()
        env = Node(plane, api, node)
        apply_file(api, device_classes())
        assert node.image
        apply_documents(api, with_image(kustomize(OVERLAY), node.image))
        ready_plugin(env)
        yield env
    finally:
        node.stop()
        plane.stop()


def probe_documents(path: Path, namespace: str) -> list[dict[str, Any]]:
    """A shipped example with every container's image and command replaced by the probe."""
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for document in documents:
        document["metadata"]["namespace"] = namespace
        if document["kind"] == "Pod":
            for container in document["spec"]["containers"]:
                container.update(image="PLACEHOLDER", command=["sh", "-c", PROBE])
    return documents


def run_example(env: Node, path: Path, namespace: str) -> list[str]:
    documents = probe_documents(path, namespace)
    for document in documents:
        if document["kind"] == "Pod":
            for container in document["spec"]["containers"]:
                container["image"] = env.node.image
    apply_documents(env.api, documents, namespace)
    return [d["metadata"]["name"] for d in documents if d["kind"] == "Pod"]


@dataclass(frozen=True)
class Seen:
    """What a probe container printed last: its NVIDIA device nodes and its environment."""

    devices: dict[str, tuple[int, int]]  # name -> (major, minor)
    env: dict[str, str]
    metadata: list[str]  # device metadata files in the container


def last_seen(env: Node, namespace: str, pod: str) -> Seen | None:
    try:
        log = env.core.read_namespaced_pod_log(pod, namespace, tail_lines=60)
    except client.ApiException:
        return None
    blocks = re.findall(r"BEGIN\n(.*?)END\n", log, re.DOTALL)
    if not blocks:
        return None
    devices: dict[str, tuple[int, int]] = {}
    variables: dict[str, str] = {}
    metadata: list[str] = []
    for line in blocks[-1].splitlines():
        match = DEVICE_LINE.match(line)
        if line.startswith("METADATA "):
            metadata.append(line.removeprefix("METADATA "))
        elif match:
            devices[match.group(3)] = (int(match.group(1)), int(match.group(2)))
        elif "=" in line:
            key, value = line.split("=", 1)
            variables[key] = value
    return Seen(devices, variables, sorted(metadata))


def running_probe(env: Node, namespace: str, pod: str, timeout_s: float = 120) -> Seen:
    def seen() -> Seen | None:
        status = env.core.read_namespaced_pod(pod, namespace).status
        return last_seen(env, namespace, pod) if status.phase == "Running" else None

    return wait_for(
        seen, timeout_s, f"pod {namespace}/{pod} to run its probe", lambda: describe_pod(env.api, namespace, pod)
    )


def allocated_uuids(env: Node, namespace: str, claim_name: str) -> list[str]:
    """The UUIDs of the GPUs behind the claim's devices (a fraction's is its GPU's), by index."""
    claim = RESOURCE_CLAIMS.get(env.api, claim_name, namespace)
    devices = published_devices(env.api, NODE)
    by_index = {gpu.index: gpu.uuid for gpu in PROFILE_GPUS}
    return [
        by_index[devices[result["device"]]["attributes"]["index"]["int"]]
        for result in claim["status"]["allocation"]["devices"]["results"]
    ]


def pod_claim_name(env: Node, namespace: str, pod: str) -> str:
    statuses = env.core.read_namespaced_pod(pod, namespace).status.resource_claim_statuses
    if statuses:
        return str(statuses[0].resource_claim_name)
    spec_claims = env.core.read_namespaced_pod(pod, namespace).spec.resource_claims
    return str(spec_claims[0].resource_claim_name)


def expected_nodes(uuids: list[str]) -> dict[str, tuple[int, int]]:
    nodes = {f"nvidia{GPU_UUIDS[uuid]}": (NVIDIA_MAJOR, GPU_UUIDS[uuid]) for uuid in uuids}
    return nodes | {"nvidiactl": (NVIDIA_MAJOR, NVIDIACTL_MINOR)}


def claim_spec_files() -> set[str]:
    return {p.name for p in DEFAULT_CDI_DIR.glob(f"{CDI_PREFIX}*.yaml")}


def test_two_gpus_same_numa_see_exactly_their_devices(real_node: Node) -> None:
    with fresh_namespace(real_node.api, "real") as namespace:
        (pod,) = run_example(real_node, EXAMPLES / "two-gpus-same-numa.yaml", namespace)
        seen = running_probe(real_node, namespace, pod)
        uuids = allocated_uuids(real_node, namespace, pod_claim_name(real_node, namespace, pod))
        assert len(uuids) == 2
        numa = {gpu.numa_node for gpu in PROFILE_GPUS if gpu.uuid in uuids}
        assert len(numa) == 1, f"the claim's GPUs {uuids} span NUMA nodes {numa}"
        assert seen.devices == expected_nodes(uuids), f"container saw {seen.devices}"
        assert sorted(seen.env["NATIVEDRA_GPU_UUIDS"].split(",")) == sorted(uuids)
        # The claim comes from a template: its pod claim name and request name the file (KEP-5304).
        assert seen.metadata == [f"{METADATA_DIR}/resourceclaimtemplates/gpus/gpus/{DRIVER_NAME}-metadata.json"]
        # The plugin, as the DaemonSet's service account, reports each device in the claim's status
        # (allowed by the fine-grained `resourceclaims/driver` `associated-node:patch` rule).
        claim_name = pod_claim_name(real_node, namespace, pod)

        def reported() -> list[dict[str, Any]] | None:
            statuses = RESOURCE_CLAIMS.get(real_node.api, claim_name, namespace).get("status", {}).get("devices")
            return [d for d in statuses or [] if d["driver"] == DRIVER_NAME] or None

        entries = wait_for(reported, 30, f"device status on claim {claim_name}")
        assert sorted(e["data"]["uuid"] for e in entries) == sorted(uuids)
        assert all(e["pool"] == NODE and e["conditions"][0]["type"] == "Ready" for e in entries)


def test_quarter_gpu_sees_its_mps_limits(real_node: Node) -> None:
    with fresh_namespace(real_node.api, "real") as namespace:
        (pod,) = run_example(real_node, EXAMPLES / "quarter-gpu.yaml", namespace)
        seen = running_probe(real_node, namespace, pod)
        (uuid,) = allocated_uuids(real_node, namespace, pod_claim_name(real_node, namespace, pod))
        assert seen.devices == expected_nodes([uuid])
        assert seen.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
        memory_mib = int(seen.env["NATIVEDRA_MEMORY_LIMIT_MIB"])
        assert seen.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={memory_mib}M"
        assert 79_000 // 4 <= memory_mib <= 81_559 // 4, memory_mib


def test_shared_claim_gives_both_pods_the_same_gpu(real_node: Node) -> None:
    with fresh_namespace(real_node.api, "real") as namespace:
        writer, reader = run_example(real_node, EXAMPLES / "shared-claim.yaml", namespace)
        seen_writer = running_probe(real_node, namespace, writer)
        seen_reader = running_probe(real_node, namespace, reader)
        (uuid,) = allocated_uuids(real_node, namespace, "shared-gpu")
        assert seen_writer.devices == seen_reader.devices == expected_nodes([uuid])
        assert seen_writer.env["NATIVEDRA_GPU_UUIDS"] == seen_reader.env["NATIVEDRA_GPU_UUIDS"] == uuid


def test_pod_deletion_unprepares_and_removes_the_cdi_spec(real_node: Node) -> None:
    with fresh_namespace(real_node.api, "real") as namespace:
        before = claim_spec_files()
        (pod,) = run_example(real_node, EXAMPLES / "one-gpu.yaml", namespace)
        running_probe(real_node, namespace, pod)
        claim = RESOURCE_CLAIMS.get(real_node.api, pod_claim_name(real_node, namespace, pod), namespace)
        spec = f"{CDI_PREFIX}{claim['metadata']['uid']}.yaml"
        assert spec in claim_spec_files() - before
        real_node.core.delete_namespaced_pod(pod, namespace, grace_period_seconds=0)
        wait_for(
            lambda: spec not in claim_spec_files(), 60, f"the kubelet to unprepare and the plugin to remove {spec}"
        )


def test_plugin_killed_mid_run_is_restarted_and_running_pods_keep_their_devices(real_node: Node) -> None:
    with fresh_namespace(real_node.api, "real") as namespace:
        (pod,) = run_example(real_node, EXAMPLES / "one-gpu.yaml", namespace)
        before = running_probe(real_node, namespace, pod)
        plugin = ready_plugin(real_node)
        restarts = plugin.status.container_statuses[0].restart_count
        container_id = plugin.status.container_statuses[0].container_id.removeprefix("containerd://")
        real_node.node.ctr("tasks", "kill", "--signal", "SIGKILL", container_id)

        def restarted() -> bool:
            pod_now = real_node.core.read_namespaced_pod(plugin.metadata.name, PLUGIN_NAMESPACE)
            return bool(pod_now.status.container_statuses[0].restart_count > restarts)

        wait_for(
            restarted, 120, "the kubelet to restart the killed plugin container", lambda: describe_plugin(real_node)
        )
        ready_plugin(real_node)
        time.sleep(2)  # a probe cycle after the restart
        after = last_seen(real_node, namespace, pod)
        assert after is not None and after.devices == before.devices
        status = real_node.core.read_namespaced_pod(pod, namespace).status
        assert status.phase == "Running" and status.container_statuses[0].restart_count == 0
        # A new claim is prepared by the restarted plugin.
        (second,) = run_example(real_node, EXAMPLES / "quarter-gpu.yaml", namespace)
        assert running_probe(real_node, namespace, second).devices


def test_rolling_update_prepares_every_claim(real_node: Node) -> None:
    """maxSurge 1 with per-pod sockets: while the old and the new plugin pods hand over, new
    claims keep being prepared (no FailedPrepareDynamicResources, every pod runs)."""
    apps = client.AppsV1Api(real_node.api)
    old = ready_plugin(real_node).metadata.uid
    with fresh_namespace(real_node.api, "real") as namespace:
        apps.patch_namespaced_daemon_set(
            "nativedra-plugin",
            PLUGIN_NAMESPACE,
            {"spec": {"template": {"metadata": {"annotations": {"nativedra.dev/restarted-at": str(time.time())}}}}},
        )
        pods: list[str] = []
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and len(pods) < ROLLOUT_PODS:
            pods.append(quarter_gpu_pod(real_node, namespace, len(pods)))
            if old not in {p.metadata.uid for p in plugin_pods(real_node)}:
                break
            time.sleep(2)
        wait_for(
            lambda: old not in {p.metadata.uid for p in plugin_pods(real_node)},
            180,
            "the rollout to replace the plugin pod",
            lambda: describe_plugin(real_node),
        )
        pods.append(quarter_gpu_pod(real_node, namespace, len(pods)))  # prepared by the new pod alone
        for pod in pods:
            assert running_probe(real_node, namespace, pod).devices
        events = real_node.core.list_namespaced_event(namespace).items
        failed = [
            f"{e.involved_object.name}: {e.message}" for e in events if (e.reason or "").startswith("FailedPrepare")
        ]
        assert not failed, failed
    ready_plugin(real_node)


def quarter_gpu_pod(env: Node, namespace: str, number: int, labels: dict[str, str] | None = None) -> str:
    """The quarter-GPU example as pod number `number` of the namespace (its own claim template)."""
    documents = probe_documents(EXAMPLES / "quarter-gpu.yaml", namespace)
    for document in documents:
        document["metadata"]["name"] += f"-{number}"
        if document["kind"] == "Pod":
            document["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] += f"-{number}"
            document["spec"]["containers"][0]["image"] = env.node.image
            document["metadata"].setdefault("labels", {}).update(labels or {})
    apply_documents(env.api, documents, namespace)
    return str(documents[-1]["metadata"]["name"])


def test_device_fault_reaches_the_pod_status(real_node: Node) -> None:
    with fresh_namespace(real_node.api, "real") as namespace:
        (pod,) = run_example(real_node, EXAMPLES / "one-gpu.yaml", namespace)
        running_probe(real_node, namespace, pod)
        (uuid,) = allocated_uuids(real_node, namespace, pod_claim_name(real_node, namespace, pod))
        faults = SIMULATED_ROOT / "faults.yaml"
        faults.write_text(yaml.safe_dump({"unhealthy": [uuid]}))
        try:

            def unhealthy() -> list[Any] | None:
                statuses = real_node.core.read_namespaced_pod(pod, namespace).status.container_statuses or []
                health = [
                    device
                    for status in statuses
                    for resource in status.allocated_resources_status or []
                    for device in resource.resources or []
                ]
                return [d for d in health if d.health == "Unhealthy"] or None

            found = wait_for(
                unhealthy,
                90,
                "the kubelet to report the device Unhealthy in the pod status",
                lambda: describe_pod(real_node.api, namespace, pod) + "\n" + describe_plugin(real_node),
            )
            assert len(found) == 1

            # The health stream and the slices are updated apart: the taint may land a moment later.
            def tainted_indexes() -> set[int]:
                devices = published_devices(real_node.api, NODE).values()
                return {d["attributes"]["index"]["int"] for d in devices if d.get("taints")}

            tainted = wait_for(tainted_indexes, 60, "the faulty GPU's taint in the published slices")
            assert tainted == {next(gpu.index for gpu in PROFILE_GPUS if gpu.uuid == uuid)}
        finally:
            faults.unlink(missing_ok=True)


def _plugin_env(env: Node, entry: dict[str, Any]) -> None:
    """Patch one env entry of the plugin's container (as the chart's values would set it) and wait
    for the rolled-out pod to serve."""
    old = ready_plugin(env).metadata.uid
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "plugin", "env": [entry]}]}}}}
    client.AppsV1Api(env.api).patch_namespaced_daemon_set("nativedra-plugin", PLUGIN_NAMESPACE, patch)
    wait_for(
        lambda: old not in {p.metadata.uid for p in plugin_pods(env)},
        180,
        "the rollout of the plugin",
        lambda: describe_plugin(env),
    )
    ready_plugin(env)


def test_a_fatal_fault_under_no_execute_evicts_the_running_pod_through_the_real_kubelet(real_node: Node) -> None:
    """The admin's choice (the chart's plugin.faults.fatalEffect, here its env var): XID 79 on the
    GPU of a running pod. The plugin taints the GPU NoExecute and tells the pod; the real
    kube-controller-manager evicts it and the real kubelet stops it and unprepares its claim."""
    effect = "NATIVEDRA_FATAL_FAULT_EFFECT"
    _plugin_env(real_node, {"name": effect, "value": "NoExecute"})
    faults = SIMULATED_ROOT / "faults.yaml"
    try:
        with fresh_namespace(real_node.api, "evicted") as namespace:
            (pod,) = run_example(real_node, EXAMPLES / "one-gpu.yaml", namespace)
            running_probe(real_node, namespace, pod)
            claim = pod_claim_name(real_node, namespace, pod)
            claim_uid = RESOURCE_CLAIMS.get(real_node.api, claim, namespace)["metadata"]["uid"]
            (uuid,) = allocated_uuids(real_node, namespace, claim)
            faults.write_text(yaml.safe_dump({"faults": [{"gpu": uuid, "xid": 79}]}))
            started = time.monotonic()

            def gone() -> bool:
                try:
                    real_node.core.read_namespaced_pod(pod, namespace)
                except client.ApiException as error:
                    return bool(error.status == 404)
                return False

            wait_for(gone, 120, f"pod {pod} evicted and stopped", lambda: describe_pod(real_node.api, namespace, pod))
            print(f"the pod on the faulty GPU was gone {time.monotonic() - started:.1f} s after the fault was written")

            def told() -> dict[str, str] | None:
                selector = f"involvedObject.name={pod}"
                events = real_node.core.list_namespaced_event(namespace, field_selector=selector).items
                reasons = {e.reason: e.message for e in events}
                return reasons if {"DeviceTaintManagerEviction", "GPUFault"} <= set(reasons) else None

            reasons = wait_for(told, 30, "the eviction's and the plugin's events on the pod")
            assert "XID 79" in reasons["GPUFault"], reasons
            spec = Path(DEFAULT_CDI_DIR) / f"{CDI_PREFIX}{claim_uid}.yaml"
            wait_for(lambda: not spec.exists(), 60, "the claim unprepared (its CDI spec removed)")
    finally:
        faults.unlink(missing_ok=True)
        _plugin_env(real_node, {"name": effect, "$patch": "delete"})


def test_a_pod_carrying_the_extender_marker_is_admitted_by_the_real_kubelet(real_node: Node) -> None:
    """The marker the extender's policy adds (an extended resource no node advertises) does not keep
    a pod off a node: the kubelet drops extended resources its node lacks before its admission check
    (removeMissingExtendedResources). Placed here directly, as a scheduler that ignores the marker would."""
    with fresh_namespace(real_node.api, "marked") as namespace:
        container = {
            "name": "c",
            "image": real_node.node.image,
            "command": ["sh", "-c", "sleep 3600"],
            "resources": {"limits": {EXTENDER_MARKER: EXTENDER_MARKER_QUANTITY}},
        }
        pod = {"metadata": {"name": "marked"}, "spec": {"nodeName": NODE, "containers": [container]}}
        real_node.core.create_namespaced_pod(namespace, pod)
        wait_for(
            lambda: real_node.core.read_namespaced_pod("marked", namespace).status.phase == "Running",
            120,
            "the marked pod running",
            lambda: describe_pod(real_node.api, namespace, "marked"),
        )
        requests = real_node.core.read_namespaced_pod("marked", namespace).spec.containers[0].resources.requests
        defaulted = {EXTENDER_MARKER: EXTENDER_MARKER_QUANTITY}
        assert requests == defaulted, "the API server defaulted the request to the limit"


def test_a_pod_asking_gpus_in_its_limits_is_prepared_and_sees_exactly_them(real_node: Node) -> None:
    """Device-plugin-style (DRAExtendedResource): `nativedra.dev/gpu: 2` in the limits and no claim;
    the scheduler makes the pod a claim, the plugin prepares it, and the container sees its two GPUs."""
    with fresh_namespace(real_node.api, "legacy") as namespace:
        container = {
            "name": "probe",
            "image": real_node.node.image,
            "command": ["sh", "-c", PROBE],
            "resources": {"limits": {WHOLE_GPU_RESOURCE: "2"}},
        }
        pod = {"metadata": {"name": "legacy"}, "spec": {"containers": [container], "terminationGracePeriodSeconds": 0}}
        real_node.core.create_namespaced_pod(namespace, pod)
        seen = running_probe(real_node, namespace, "legacy")
        status = real_node.core.read_namespaced_pod("legacy", namespace).status
        claim = status.extended_resource_claim_status.resource_claim_name
        uuids = allocated_uuids(real_node, namespace, claim)
        assert len(uuids) == 2
        assert seen.devices == expected_nodes(uuids), f"container saw {seen.devices}"


@pytest.fixture
def served_extender(real_node: Node, tmp_path: Path) -> Iterator[str]:
    """The shipped extender Deployment (applied with the overlay) serving on the real node from its
    Secret, and the real kube-scheduler wired to its Service as shipped; unwired after. Yields the
    URL the scheduler calls."""
    tls = extender_tls(tmp_path / "extender-tls")
    apply_documents(real_node.api, [tls_secret(tls)])
    restart_rollout(real_node.api)  # its pods so far waited for the Secret
    wait_for(
        lambda: rolled_out(real_node.api),
        180,
        "the extender Deployment rolled out",
        lambda: describe_extender(real_node),
    )
    cluster_ip = real_node.core.read_namespaced_service(EXTENDER, EXTENDER_NAMESPACE).spec.cluster_ip
    wiring, mounts = shipped_wiring(tls, tmp_path / "scheduler-files")
    url = str(wiring["extenders"][0]["urlPrefix"])
    assert url == f"https://{cluster_ip}:8888", "the shipped urlPrefix names the Service's fixed ClusterIP"
    call_extender(real_node.plane, EXTENDER_PORT, tls, extra=wiring, mounts=mounts)  # replaces the loopback entry
    written = yaml.safe_load((real_node.plane.state_dir / "scheduler-config.yaml").read_text())
    assert written["extenders"] == yaml.safe_load(SHIPPED_WIRING.read_text())["extenders"]
    try:
        yield url
    finally:
        stop_calling_extender(real_node.plane)


def test_a_gang_is_placed_through_the_shipped_wiring(real_node: Node, served_extender: str) -> None:
    """Installed from manifests/ and wired with manifests/scheduler/ as shipped (the fixture): a
    two-pod GPU gang is marked by the shipped policy (so no scheduler without the extender entry
    could place it), moved to the `nativedra` profile, and bound whole, the scheduler calling the
    extender at the Service's fixed ClusterIP with no DNS."""
    with fresh_namespace(real_node.api, "gang") as namespace:
        labels = {GANG: "pair", GANG_SIZE: "2"}
        pods = [quarter_gpu_pod(real_node, namespace, number, labels) for number in range(2)]
        wait_for(lambda: bound(real_node.api, namespace, pods), 90, "the gang bound whole")
        for name in pods:
            pod = real_node.core.read_namespaced_pod(name, namespace)
            assert pod.spec.scheduler_name == EVERY_NODE_PROFILE
            assert EXTENDER_MARKER in (pod.spec.containers[0].resources.limits or {})
        assert served_extender == "https://10.96.0.88:8888"


def describe_extender(env: Node) -> str:
    lines = [f"ready endpoints: {ready_endpoints(env.api)}"]
    for pod in extender_pods(env.api):
        lines.append(describe_pod(env.api, EXTENDER_NAMESPACE, pod.metadata.name))
        with contextlib.suppress(client.ApiException):
            lines.append(env.core.read_namespaced_pod_log(pod.metadata.name, EXTENDER_NAMESPACE, tail_lines=15))
    return "\n".join(lines)


def test_extender_pods_deleted_while_it_is_down_come_back_and_it_serves_again(
    real_node: Node, served_extender: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 25 end to end: the extender runs as the shipped Deployment on this node, kube-scheduler
    calls it through its Service (kube-proxy's iptables rules take the ClusterIP to a pod) with the
    shipped wiring (managedResources marker, ignorable: false, HTTPS with a client certificate).
    Every extender pod is deleted; a marked GPU pod then waits, its FailedScheduling naming the
    extender's URL; the Deployment's replacement pods, unmarked, are scheduled while the extender is
    down, run on the kubelet and become Ready; and the waiting GPU pod is bound. The test does nothing
    between the deletion and the bind but watch."""
    api, core = real_node.api, real_node.core
    with fresh_namespace(api, "outage") as namespace:
        served = quarter_gpu_pod(real_node, namespace, 0)
        wait_for(lambda: bound(api, namespace, [served]), 60, "a GPU pod bound through the Service")
        pods = extender_pods(api)
        old = {pod.metadata.uid for pod in pods}
        old_containers = {container_id(status) for pod in pods for status in pod.status.container_statuses}
        started = time.monotonic()
        for pod in pods:
            core.delete_namespaced_pod(pod.metadata.name, EXTENDER_NAMESPACE, grace_period_seconds=0)

        def down() -> bool:
            """The deleted pods' processes gone (a force-deleted pod's container outlives its API
            object for a moment, and answers on a connection the scheduler kept), no endpoint ready."""
            return not (running_containers(real_node) & old_containers) and not ready_endpoints(api)

        wait_for(down, 60, "every extender container gone and no endpoint ready", lambda: describe_extender(real_node))
        seen: dict[str, float] = {"down": time.monotonic() - started}
        waiting = quarter_gpu_pod(real_node, namespace, 1)
        told: list[str] = []

        def replacements() -> list[Any]:
            return [pod for pod in extender_pods(api) if pod.metadata.uid not in old]

        def watch() -> bool:
            """Record when each step is first seen; done once the GPU pod is bound and every
            replacement is Ready."""
            now = time.monotonic() - started
            if "told" not in seen:
                told.extend(
                    m for m in failed_scheduling(real_node, namespace, waiting) if f"{served_extender}/filter" in m
                )
                if told:
                    seen["told"] = now
            new = replacements()
            if "replacement bound" not in seen and len(new) == len(old) and all(p.spec.node_name for p in new):
                seen["replacement bound"] = now
            if "replacement ready" not in seen and any(is_ready(pod) for pod in new):
                seen["replacement ready"] = now
            if "every replacement ready" not in seen and len(new) == len(old) and all(is_ready(p) for p in new):
                seen["every replacement ready"] = now
            if "gpu pod bound" not in seen and bound(api, namespace, [waiting]):
                seen["gpu pod bound"] = now
            return "gpu pod bound" in seen and "every replacement ready" in seen

        wait_for(
            watch,
            180,
            "the waiting GPU pod bound and every replacement Ready",
            lambda: f"{seen}\n{describe_pod(api, namespace, waiting)}\n{describe_extender(real_node)}",
            interval_s=0.1,
        )
        rounded = {step: round(seconds, 1) for step, seconds in seen.items()}
        with capsys.disabled():
            print(f"\nextender pods deleted; seconds after: {rounded}")
            print(f"the GPU pod's FailedScheduling: {told[:1]}")
        assert told, f"the GPU pod was bound without being told the extender at {served_extender} is down"
        assert seen["told"] < seen["gpu pod bound"]
        assert "replacement ready" in seen and seen["replacement ready"] <= seen["gpu pod bound"], seen
        limits = core.read_namespaced_pod(waiting, namespace).spec.containers[0].resources.limits or {}
        assert limits.get(EXTENDER_MARKER) == EXTENDER_MARKER_QUANTITY, "the shipped policy marked the GPU pod"
        running = running_containers(real_node)
        for pod in replacements():
            assert pod.spec.node_name == NODE
            assert EXTENDER_MARKER not in (pod.spec.containers[0].resources.limits or {}), "not marked"
            assert all(s.ready and s.state.running for s in pod.status.container_statuses or []), pod.status
            container = container_id(pod.status.container_statuses[0])
            assert container in running, f"the kubelet's container {container} is not running in containerd"
        assert running_probe(real_node, namespace, waiting).devices


def failed_scheduling(env: Node, namespace: str, pod: str) -> list[str]:
    events = env.core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.kind=Pod,involvedObject.name={pod},reason=FailedScheduling"
    )
    return [e.message or "" for e in events.items]


def container_id(status: Any) -> str:
    return str(status.container_id or "").removeprefix("containerd://")


def running_containers(env: Node) -> set[str]:
    """Containers whose task runs in the node's containerd (`ctr tasks list`: TASK PID STATUS)."""
    rows = [line.split() for line in env.node.ctr("tasks", "list").splitlines()[1:]]
    return {row[0] for row in rows if len(row) >= 3 and row[2] == "RUNNING"}
