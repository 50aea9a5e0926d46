"""Synthetic cluster objects for the extender's unit tests and its benchmark.

One builder for both, so a test and the benchmark describe a cluster the same way. Objects are
the plain dicts the API would deliver; devices come from the plugin's own slice builder, so they
carry exactly the attributes and counters the real driver publishes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dra_driver.discovery.simulated import load_profile, resolve_profile
from dra_driver.publishing.publish_config import PublishConfig
from dra_driver.publishing.slices import build_slices
from extender.cluster.view import ClusterView
from extender.devices.node_usage import Node, Usage, usage_from
from extender.devices.slices import nodes_from
from extender.plan.config import RACK_LABEL
from extender.pods.facts import PodFacts
from extender.pods.gang import GANG, GANG_SIZE, TOPOLOGY_REQUIRED, JobSetShape, NativeGroup
from nativedra.base.kube.names import DRIVER_NAME

DRIVER = DRIVER_NAME
GPU = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'"
FRACTION = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'fraction'"
GPU_CLASS: dict[str, Any] = {"metadata": {"name": DRIVER}, "spec": {"selectors": [{"cel": {"expression": GPU}}]}}
SHARE = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'share'"
SHARE_CLASS: dict[str, Any] = {
    "metadata": {"name": f"share.{DRIVER}"},
    "spec": {"selectors": [{"cel": {"expression": SHARE}}]},
}
FRACTION_CLASS: dict[str, Any] = {
    "metadata": {"name": f"fraction.{DRIVER}"},
    "spec": {"selectors": [{"cel": {"expression": FRACTION}}]},
}
CREATED = "2026-11-29T00:00:00Z"


def node_objects(
    labels_by_node: dict[str, dict[str, str]],
    profile: str = "a100-8x",
    fractions: tuple[int, ...] = (),
    shares: bool = False,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Node objects and their ResourceSlices (complete pools, generation 1), as the watches see them;
    with `shares`, every GPU is published as one shared device (consumable capacity)."""
    inventory = load_profile(resolve_profile(profile))
    publish = PublishConfig(fractions=fractions, share_gpus="all" if shares else ())
    nodes, slices = [], []
    for name, labels in labels_by_node.items():
        nodes.append({"metadata": {"name": name, "labels": labels}})
        for index, spec in enumerate(build_slices(inventory, publish, name)):
            spec["pool"]["generation"] = 1
            slices.append({"metadata": {"name": f"{name}-slice-{index}"}, "spec": spec})
    return nodes, slices


def gpu_nodes(
    labels_by_node: dict[str, dict[str, str]], fractions: tuple[int, ...] = (), shares: bool = False
) -> dict[str, Node]:
    """Node models of 8 A100s each (no fractions or shares unless asked: whole-GPU planning stays readable)."""
    return nodes_from(*node_objects(labels_by_node, fractions=fractions, shares=shares), DRIVER)


def racks(counts: dict[str, int], label: str = "rack") -> dict[str, Node]:
    """`counts` racks of GPU nodes named `<rack>-<index>`, labelled with their rack."""
    return gpu_nodes({f"{rack}-{index}": {label: rack} for rack, count in counts.items() for index in range(count)})


def claim_template(name: str, count: int, device_class: str = DRIVER, namespace: str = "ns") -> dict[str, Any]:
    """A ResourceClaimTemplate with one request `gpus` of `count` devices of `device_class`."""
    request = {"name": "gpus", "exactly": {"deviceClassName": device_class, "count": count}}
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


def allocated_claim(
    name: str, node: str, devices: list[str], namespace: str = "ns", reserved_for: str | None = None
) -> dict[str, Any]:
    """A ResourceClaim the scheduler allocated on `node` (whole devices of our driver), reserved
    for pod `reserved_for` as the scheduler's PreBind writes it (before the pod gets its node)."""
    results = [{"request": "gpus", "driver": DRIVER, "pool": node, "device": device} for device in devices]
    status: dict[str, Any] = {"allocation": {"devices": {"results": results}}}
    if reserved_for:
        status["reservedFor"] = [{"resource": "pods", "name": reserved_for, "uid": f"uid-{reserved_for}"}]
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {}, "status": status}


def gang_labels(name: str, size: int, required: str | None = None) -> dict[str, str]:
    """Labels of a nativedra gang member, optionally asking for one domain of label `required`."""
    labels = {GANG: name, GANG_SIZE: str(size)}
    return labels | ({TOPOLOGY_REQUIRED: required} if required else {})


def pod(
    name: str = "p",
    *,
    namespace: str = "ns",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    template: str | None = None,
    created: str | None = None,
    claim: str | None = None,
    node: str | None = None,
    phase: str | None = None,
    group: str | None = None,
) -> dict[str, Any]:
    """A pending pod (uid `uid-<name>`); with `template`, it claims devices through that
    ResourceClaimTemplate, and `claim` names the claim the controller generated from it; with
    `node`, it is bound there; `phase` is its status phase (e.g. Succeeded); `group` is the native
    PodGroup it names in spec.schedulingGroup."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}",
        "labels": labels or {},
        "annotations": annotations or {},
    }
    if created:
        metadata["creationTimestamp"] = created
    claims = [{"name": "gpus", "resourceClaimTemplateName": template}] if template else []
    spec: dict[str, Any] = {"resourceClaims": claims, "containers": []}
    if node:
        spec["nodeName"] = node
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    status: dict[str, Any] = {}
    if claim:
        status["resourceClaimStatuses"] = [{"name": "gpus", "resourceClaimName": claim}]
    if phase:
        status["phase"] = phase
    return {"metadata": metadata, "spec": spec, "status": status}


def view(
    nodes: dict[str, Node],
    *,
    usage: dict[str, Usage] | None = None,
    pods: Sequence[dict[str, Any]] = (),
    templates: Sequence[dict[str, Any]] = (),
    classes: Sequence[dict[str, Any]] = (GPU_CLASS,),
    claims: Sequence[dict[str, Any]] = (),
    jobsets: Sequence[dict[str, Any]] = (),
    pod_groups: Sequence[dict[str, Any]] | None = None,
    version: int = 1,
) -> ClusterView:
    """A cluster view as the watches would build it; nothing in use unless `usage` says so, or
    allocated `claims` (their devices are counted as in use, as the watches count them).
    `pod_groups` are native PodGroups; None: the cluster does not serve that API."""
    if usage is None:
        usage = usage_from(list(claims), nodes, DRIVER)
    return ClusterView(
        version=version,
        nodes=nodes,
        usage=usage,
        pods={(p["metadata"]["namespace"], p["metadata"]["name"]): PodFacts.of(p) for p in pods},
        claims={(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in claims},
        templates={(t["metadata"]["namespace"], t["metadata"]["name"]): t for t in templates},
        classes={c["metadata"]["name"]: c for c in classes},
        jobsets={(j["metadata"]["namespace"], j["metadata"]["name"]): JobSetShape.from_api(j) for j in jobsets},
        native_groups=None
        if pod_groups is None
        else {(g["metadata"]["namespace"], g["metadata"]["name"]): NativeGroup.from_api(g) for g in pod_groups},
    )


def pod_group(
    name: str, min_count: int | None = None, topology: str | None = None, namespace: str = "ns"
) -> dict[str, Any]:
    """A native PodGroup (scheduling.k8s.io/v1beta1) as the API returns it: a gang of at least
    `min_count` pods, or the basic policy without one; `topology` is its required node label."""
    policy: dict[str, Any] = {"gang": {"minCount": min_count}} if min_count is not None else {"basic": {}}
    spec: dict[str, Any] = {"schedulingPolicy": policy}
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def jobset(
    name: str, jobs: Sequence[tuple[str, int, int]], exclusive: str | None = None, namespace: str = "ns"
) -> dict[str, Any]:
    """A JobSet object: `jobs` are (replicated job, replicas, pods per Job)."""
    annotations = {"alpha.jobset.sigs.k8s.io/exclusive-topology": exclusive} if exclusive else {}
    replicated = [
        {"name": job, "replicas": replicas, "template": {"spec": {"parallelism": pods, "completions": pods}}}
        for job, replicas, pods in jobs
    ]
    return {
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": {"replicatedJobs": replicated},
    }


def jobset_pod(
    jobset_name: str,
    job: str,
    index: int,
    completion: int,
    *,
    template: str,
    exclusive: str | None = None,
    node: str | None = None,
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod as the JobSet and Job controllers label it (and the JobSet webhook annotates it)."""
    labels = {
        "jobset.sigs.k8s.io/jobset-name": jobset_name,
        "jobset.sigs.k8s.io/replicatedjob-name": job,
        "jobset.sigs.k8s.io/job-index": str(index),
        "jobset.sigs.k8s.io/job-key": f"key-{jobset_name}-{job}-{index}",
        "batch.kubernetes.io/job-completion-index": str(completion),
    }
    annotations = {"alpha.jobset.sigs.k8s.io/exclusive-topology": exclusive} if exclusive else {}
    member = pod(
        f"{jobset_name}-{job}-{index}-{completion}",
        labels=labels,
        annotations=annotations,
        template=template,
        created=CREATED,
        node=node,
    )
    if node_selector:
        member["spec"]["nodeSelector"] = node_selector
    return member


@dataclass(frozen=True)
class BusyCluster:
    """A busy cluster as the extender's first LIST delivers it (`objects`: watched kind -> items),
    and the pods a benchmark or test asks about, each already delivered by the pod watch except
    `plain`, which the watch drops (no claims, no gang)."""

    objects: dict[str, list[dict[str, Any]]]
    node_names: list[str]
    plain: dict[str, Any]
    single: dict[str, Any]  # pending, one GPU through its generated, unallocated claim
    member: dict[str, Any]  # pending member of the oldest pending gang (16 x 8 GPUs, one rack required)
    running: list[tuple[dict[str, Any], dict[str, Any]]]  # bound 1-GPU pods and their claims: what churns most
    namespace: str


def claimed_pod(
    name: str, template: dict[str, Any], namespace: str, *, labels: dict[str, str] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A pod claiming through `template` and the claim the controller generated for it (same
    spec, not allocated); both carry a resourceVersion, as every object from the API does."""
    claim_name = f"{name}-gpus"
    member = pod(
        name,
        namespace=namespace,
        labels=labels,
        template=template["metadata"]["name"],
        created=CREATED,
        claim=claim_name,
    )
    claim = {"metadata": {"name": claim_name, "namespace": namespace}, "spec": template["spec"]["spec"], "status": {}}
    for obj in (member, claim):
        obj["metadata"]["resourceVersion"] = "1"
    return member, claim


def bind_to_node(member: dict[str, Any], claim: dict[str, Any], node: str, devices: list[str]) -> None:
    """`member` bound to `node` and running, its claim allocated there and reserved for it."""
    member["spec"]["nodeName"] = node
    member["status"]["phase"] = "Running"
    name, namespace = member["metadata"]["name"], member["metadata"]["namespace"]
    claim["status"] = allocated_claim(claim["metadata"]["name"], node, devices, namespace, reserved_for=name)["status"]


def busy_cluster(
    count: int, *, rack_size: int = 16, pending_gangs: int = 20, pending_gang_size: int = 16, namespace: str = "busy"
) -> BusyCluster:
    """`count` nodes of 8 A100s (fractions off), `rack_size` consecutive nodes to a rack
    (`RACK_LABEL`): 10% of the nodes (rounded down to whole gangs) run bound 8-pod gangs of
    8 GPUs per pod, one rack each; the next 70% run eight 1-GPU pods each; the rest are free,
    and `pending_gangs` gangs of `pending_gang_size` pods x 8 GPUs that require one rack wait for
    them. Every bound pod's claim is allocated and reserved for it, as the scheduler leaves it."""
    names = [f"n{index:05d}" for index in range(count)]
    nodes, slices = node_objects({name: {RACK_LABEL: f"rack-{i // rack_size:04d}"} for i, name in enumerate(names)})
    one, eight = claim_template("one", 1, namespace=namespace), claim_template("eight", 8, namespace=namespace)
    gpus = [f"gpu-{index}" for index in range(8)]
    pairs: list[tuple[dict[str, Any], dict[str, Any]]] = []
    gang_nodes = count // 10 // 8 * 8
    for index, node in enumerate(names[:gang_nodes]):
        labels = gang_labels(f"bound-{index // 8}", 8, RACK_LABEL)
        pairs.append(claimed_pod(f"bound-{index // 8}-{index % 8}", eight, namespace, labels=labels))
        bind_to_node(*pairs[-1], node, gpus)
    running = []
    for node in names[gang_nodes : gang_nodes + round(count * 0.7)]:
        for gpu in gpus:
            running.append(claimed_pod(f"{node}-{gpu}", one, namespace))
            bind_to_node(*running[-1], node, [gpu])
    pairs.extend(running)
    listed = {"nodes": nodes, "resourceslices": slices, "resourceclaimtemplates": [one, eight]}
    return with_pending_gangs(
        listed,
        pairs,
        running,
        names=names,
        pending_gangs=pending_gangs,
        pending_gang_size=pending_gang_size,
        namespace=namespace,
    )


def with_pending_gangs(
    listed: dict[str, list[dict[str, Any]]],
    pairs: list[tuple[dict[str, Any], dict[str, Any]]],
    running: list[tuple[dict[str, Any], dict[str, Any]]],
    *,
    names: list[str],
    pending_gangs: int,
    pending_gang_size: int,
    namespace: str,
) -> BusyCluster:
    """A busy cluster of `listed` objects (nodes, slices, templates: "one" and "eight" first, and
    the classes beside GPU_CLASS) and bound `pairs`, once `pending_gangs` gangs of
    `pending_gang_size` pods x 8 GPUs that require one rack wait, and a 1-GPU pod is pending."""
    one, eight = listed["resourceclaimtemplates"][:2]
    pairs = list(pairs)
    for gang in range(pending_gangs):
        labels = gang_labels(f"pending-{gang:02d}", pending_gang_size, RACK_LABEL)
        pairs.extend(
            claimed_pod(f"pending-{gang:02d}-{i:02d}", eight, namespace, labels=labels)
            for i in range(pending_gang_size)
        )
    member = pairs[-pending_gangs * pending_gang_size][0] if pending_gangs else pairs[-1][0]
    pairs.append(claimed_pod("single", one, namespace))
    return BusyCluster(
        objects={
            "deviceclasses": [GPU_CLASS],
            **listed,
            "pods": [p for p, _ in pairs],
            "resourceclaims": [c for _, c in pairs],
            "podgroups": [],
            "jobsets": [],
        },  # the classes first: their LIST is the one a benchmark may hold back to start its clock
        node_names=names,
        plain=pod("plain", namespace=namespace, created=CREATED),
        single=pairs[-1][0],
        member=member,
        running=running,
        namespace=namespace,
    )
