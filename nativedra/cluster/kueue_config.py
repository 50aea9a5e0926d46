"""The Kueue Configuration the local cluster, the e2e tests and the demo run Kueue with (v0.19.0 by
default; `NATIVEDRA_KUEUE_VERSION=v0.17.0` for the release before), and the ClusterQueue quota shapes
that count nativedra's devices. Pure.

v0.19.0 (its defaults, but for VisibilityOnDemand as below): DRA quota is beta and on
(`KueueDRAIntegration`), and so are counter-based quota for partitionable devices
(`KueueDRAIntegrationPartitionableDevices`) and extended-resource quota
(`KueueDRAIntegrationExtendedResource`). A `deviceClassMappings` entry with a counter source charges a
claim the counters its devices consume (the largest among the devices its selectors match, times
its count), read from the ResourceSlices: fractions and MIG placements are charged their `memory`
counter in bytes (`nativedra.dev/gpu-memory`), so a quarter GPU costs a quarter of a GPU's memory
and a 3g.40gb placement 40 GB, where v0.17 charged each one device. Whole GPUs stay counted as
devices (`nativedra.dev/gpu`: a class with a counter source refuses pods that ask for it as an
extended resource). Shares stay one device each: capacity-based quota
(`KueueDRAIntegrationConsumableCapacity`) is alpha and off in v0.19. CEL selectors and constraints
are accepted from v0.18.

v0.17.0 gates (Configuration `featureGates`, Kueue's own, not Kubernetes'):
- `DynamicResourceAllocation: true` (alpha in v0.17, off by default): without it Kueue counts
  only container requests, so a pod that gets its GPUs from a ResourceClaimTemplate is admitted
  for free. With it, `resources.deviceClassMappings` turns each device a claim template asks for
  into a logical resource of the ClusterQueue (one DeviceClass -> one name, `count` devices per
  request). Kueue reads only ResourceClaimTemplates (a pod naming a ResourceClaim directly is
  inadmissible) and only plain `exactly` requests: a template with CEL selectors, `constraints`
  (e.g. matchAttribute numaNode), `config`, `firstAvailable`, adminAccess or allocationMode All
  makes the workload inadmissible with the field named. `capacity.requests` (consumable shares)
  are not read: a share counts as one device whatever amount it asks for.
- `VisibilityOnDemand: false` (beta, on by default): it starts an aggregated API server on a
  fixed port (8082) that two local clusters would fight over, and nothing here reads it.
- `TopologyAwareScheduling` stays at its default (beta, on since v0.14): a ResourceFlavor with a
  `topologyName` makes Kueue choose the domain of `podset-required-topology` itself. Kueue's TAS
  sees only node allocatable (cpu, memory, pods): it counts neither DRA devices nor the logical
  resources of `deviceClassMappings` (KEP-2941: DRA quota does not work with TAS), so it may choose
  a rack whose GPUs are taken. nativedra then plans inside Kueue's rack and never elsewhere (the
  pod's nodeSelector says which), so GPU pods under TAS should also request cpu in proportion to
  their GPUs on nodes whose allocatable cpu matches (docs/kueue.md).

`resources.excludeResourcePrefixes` leaves out the extender marker (`nativedra.dev/extender`, added
to GPU and gang pods by manifests/scheduler/extender-marker-policy.yaml): no quota covers it, and a
ClusterQueue would otherwise refuse every marked pod group ("resource nativedra.dev/extender
unavailable").
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any

from nativedra.base.kube.names import (
    DRIVER_NAME,
    EXTENDER_MARKER,
    FRACTION_CLASS,
    GPU_CLASS,
    MIG_CLASS,
    SHARE_CLASS,
)

VERSIONS = ("v0.17.0", "v0.19.0")
DEFAULT_VERSION = "v0.19.0"
CONFIG_API_VERSION = "config.kueue.x-k8s.io/v1beta2"
API_VERSION = "kueue.x-k8s.io/v1beta2"

# Logical resources a ClusterQueue's nominalQuota names, one per nativedra DeviceClass. The whole-GPU
# name is the DeviceClass's extendedResourceName, so a pod asking `nativedra.dev/gpu: N` in its
# limits and one with an N-GPU claim template are counted against the same quota.
WHOLE_GPUS = "nativedra.dev/gpu"
FRACTIONS = "nativedra.dev/gpu-fraction"
MIG_PARTITIONS = "nativedra.dev/gpu-mig"
SHARES = "nativedra.dev/gpu-share"
GPU_MEMORY = "nativedra.dev/gpu-memory"  # v0.19: fractions and MIG placements, by their memory counter
DEVICE_CLASS_MAPPINGS = {
    WHOLE_GPUS: GPU_CLASS,
    FRACTIONS: FRACTION_CLASS,
    MIG_PARTITIONS: MIG_CLASS,
    SHARES: SHARE_CLASS,
}
MEMORY_COUNTER = "memory"  # the counter every fraction and MIG placement consumes (dra_driver/publishing/slices.py)

# Kueue's integrations this cluster serves: JobSet (and the Jobs it owns), LeaderWorkerSet and plain
# pods (LWS groups are admitted through Kueue's pod-group machinery, which needs "pod").
FRAMEWORKS = ("batch/job", "jobset.x-k8s.io/jobset", "pod", "leaderworkerset.x-k8s.io/leaderworkerset")
FEATURE_GATES = {"DynamicResourceAllocation": True, "VisibilityOnDemand": False}  # v0.17.0
# v0.19.0 removed DynamicResourceAllocation (an unknown gate stops it) and turns on by default what it did.
FEATURE_GATES_V019 = {"VisibilityOnDemand": False}

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# Where Kueue v0.17 reads its metrics certificate when internalCertManagement is off (hard-coded).
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")


def kueue_version() -> str:
    """The Kueue release to run: NATIVEDRA_KUEUE_VERSION, else the default."""
    version = os.environ.get("NATIVEDRA_KUEUE_VERSION", DEFAULT_VERSION)
    if version not in VERSIONS:
        raise ValueError(f"NATIVEDRA_KUEUE_VERSION={version!r}: nativedra runs Kueue {' or '.join(VERSIONS)}")
    return version


def counts_by_counter(version: str) -> bool:
    """Whether this Kueue charges fractions and MIG placements by their counters (v0.19+)."""
    return version != "v0.17.0"


def device_class_mappings(version: str) -> list[dict[str, Any]]:
    """v0.17: one device-counted resource per DeviceClass. v0.19: whole GPUs and shares by device,
    fractions and MIG placements together by the memory they consume."""
    if not counts_by_counter(version):
        return [
            {"name": name, "deviceClassNames": [device_class]} for name, device_class in DEVICE_CLASS_MAPPINGS.items()
        ]
    memory = {
        "counter": {
            "name": MEMORY_COUNTER,
            "driver": DRIVER_NAME,
            "deviceSelector": {"cel": {"expression": f"device.driver == '{DRIVER_NAME}'"}},
        }
    }
    return [
        {"name": WHOLE_GPUS, "deviceClassNames": [GPU_CLASS]},
        {"name": GPU_MEMORY, "deviceClassNames": [FRACTION_CLASS, MIG_CLASS], "sources": [memory]},
        {"name": SHARES, "deviceClassNames": [SHARE_CLASS]},
    ]


def configuration(common: dict[str, Any], version: str) -> dict[str, Any]:
    """Kueue's Configuration: `common` (what every add-on controller on loopback gets: its webhooks
    served with the cluster's certificate, no leader election, no metrics listener) and Kueue's own."""
    return {
        **common,
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": list(FRAMEWORKS)},
        "resources": {
            "excludeResourcePrefixes": [EXTENDER_MARKER],
            "deviceClassMappings": device_class_mappings(version),
        },
        "featureGates": dict(FEATURE_GATES_V019 if counts_by_counter(version) else FEATURE_GATES),
    }


def strategic_webhook_patch(document: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Kueue's webhook kustomization patches inline (a strategic merge keyed by webhook name, as
    kustomize applies it): each patched webhook gets the patch's fields. Returns a new document."""
    patched = {w["name"]: w for w in patch.get("webhooks") or []}
    webhooks = [{**webhook, **patched.get(webhook["name"], {})} for webhook in document.get("webhooks") or []]
    return {**document, "webhooks": webhooks}


def webhook_replacements(documents: list[dict[str, Any]], replacements: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """kustomize `replacements` of the form Kueue v0.19's webhook kustomization uses: a field of one
    webhook (`webhooks.[name=X].field`) copied to the same field of other webhooks (`create: true`).
    Any other form is refused, so a new upstream layout fails loudly instead of being half applied."""
    result = [{**d, "webhooks": [dict(w) for w in d.get("webhooks") or []]} for d in documents]

    def webhooks_of(select: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            webhook
            for d in result
            if (d["kind"], d["metadata"]["name"]) == (select["kind"], select["name"])
            for webhook in d["webhooks"]
        ]

    def parsed(path: str) -> tuple[str, str]:
        match = re.fullmatch(r"webhooks\.\[name=([^\]]+)\]\.(\w+)", path)
        if not match:
            raise ValueError(f"unsupported kustomize replacement field path {path!r}")
        return match.group(1), match.group(2)

    for replacement in replacements:
        source = replacement["source"]
        name, field = parsed(source["fieldPath"])
        (origin,) = [w for w in webhooks_of(source) if w["name"] == name]
        for target in replacement["targets"]:
            by_name = {w["name"]: w for w in webhooks_of(target["select"])}
            for path in target["fieldPaths"]:
                wanted, target_field = parsed(path)
                if wanted in by_name and field in origin:
                    by_name[wanted][target_field] = copy.deepcopy(origin[field])
    return result


def conversion_webhook(url: str, ca_bundle: str) -> dict[str, Any]:
    """`spec.conversion` of a Kueue CRD whose kustomization enables the conversion webhook
    (v1beta1 <-> v1beta2), calling the controller on loopback."""
    return {
        "strategy": "Webhook",
        "webhook": {
            "clientConfig": {"url": f"{url}/convert", "caBundle": ca_bundle},
            "conversionReviewVersions": ["v1"],
        },
    }


# -- objects a queue is made of ------------------------------------------------------------------


def resource_flavor(
    name: str, node_labels: dict[str, str] | None = None, topology: str | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if node_labels:
        spec["nodeLabels"] = node_labels
    if topology:
        spec["topologyName"] = topology
    return {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def topology(name: str, levels: list[str]) -> dict[str, Any]:
    """Kueue's Topology: node labels, widest first."""
    return {
        "apiVersion": API_VERSION,
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": [{"nodeLabel": level} for level in levels]},
    }


def flavor_quota(flavor: str, quotas: dict[str, str], borrowing: dict[str, str] | None = None) -> dict[str, Any]:
    resources = []
    for name, quota in quotas.items():
        entry = {"name": name, "nominalQuota": quota}
        if borrowing and name in borrowing:
            entry["borrowingLimit"] = borrowing[name]
        resources.append(entry)
    return {"name": flavor, "resources": resources}


def cluster_queue(
    name: str,
    groups: list[tuple[list[str], list[dict[str, Any]]]],
    *,
    cohort: str | None = None,
    preemption: dict[str, Any] | None = None,
    namespace_selector: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`groups`: (covered resources, flavor quotas) per resource group."""
    spec: dict[str, Any] = {
        "namespaceSelector": namespace_selector if namespace_selector is not None else {},
        "resourceGroups": [{"coveredResources": covered, "flavors": flavors} for covered, flavors in groups],
    }
    if cohort:
        spec["cohortName"] = cohort
    if preemption:
        spec["preemption"] = preemption
    return {"apiVersion": API_VERSION, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def local_queue(name: str, namespace: str, queue: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": queue},
    }
