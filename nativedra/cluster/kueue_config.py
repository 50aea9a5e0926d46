"""The one Kueue Configuration the local cluster, the e2e tests and the demo run Kueue v0.17.0 with,
and the ClusterQueue quota shapes that count nativedra's devices. Pure.

Gates (Configuration `featureGates`, Kueue's own, not Kubernetes'):
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

from pathlib import Path
from typing import Any

from nativedra.base.kube.names import EXTENDER_MARKER, FRACTION_CLASS, GPU_CLASS, MIG_CLASS, SHARE_CLASS

CONFIG_API_VERSION = "config.kueue.x-k8s.io/v1beta2"
API_VERSION = "kueue.x-k8s.io/v1beta2"

# Logical resources a ClusterQueue's nominalQuota names, one per nativedra DeviceClass. The whole-GPU
# name is the DeviceClass's extendedResourceName, so a pod asking `nativedra.dev/gpu: N` in its
# limits and one with an N-GPU claim template are counted against the same quota.
WHOLE_GPUS = "nativedra.dev/gpu"
FRACTIONS = "nativedra.dev/gpu-fraction"
MIG_PARTITIONS = "nativedra.dev/gpu-mig"
SHARES = "nativedra.dev/gpu-share"
DEVICE_CLASS_MAPPINGS = {
    WHOLE_GPUS: GPU_CLASS,
    FRACTIONS: FRACTION_CLASS,
    MIG_PARTITIONS: MIG_CLASS,
    SHARES: SHARE_CLASS,
}

# Kueue's integrations this cluster serves: JobSet (and the Jobs it owns), LeaderWorkerSet and plain
# pods (LWS groups are admitted through Kueue's pod-group machinery, which needs "pod").
FRAMEWORKS = ("batch/job", "jobset.x-k8s.io/jobset", "pod", "leaderworkerset.x-k8s.io/leaderworkerset")
FEATURE_GATES = {"DynamicResourceAllocation": True, "VisibilityOnDemand": False}

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# Where Kueue v0.17 reads its metrics certificate when internalCertManagement is off (hard-coded).
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")


def configuration(common: dict[str, Any]) -> dict[str, Any]:
    """Kueue's Configuration: `common` (what every add-on controller on loopback gets: its webhooks
    served with the cluster's certificate, no leader election, no metrics listener) and Kueue's own."""
    return {
        **common,
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": list(FRAMEWORKS)},
        "resources": {
            "excludeResourcePrefixes": [EXTENDER_MARKER],
            "deviceClassMappings": [
                {"name": name, "deviceClassNames": [device_class]}
                for name, device_class in DEVICE_CLASS_MAPPINGS.items()
            ],
        },
        "featureGates": dict(FEATURE_GATES),
    }


def strategic_webhook_patch(document: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Kueue's webhook kustomization patches inline (a strategic merge keyed by webhook name, as
    kustomize applies it): each patched webhook gets the patch's fields. Returns a new document."""
    patched = {w["name"]: w for w in patch.get("webhooks") or []}
    webhooks = [{**webhook, **patched.get(webhook["name"], {})} for webhook in document.get("webhooks") or []]
    return {**document, "webhooks": webhooks}


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
