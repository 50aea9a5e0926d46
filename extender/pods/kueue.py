"""Where Kueue decides and the extender does not. Pure predicates on a pod's API dict.

Kueue admits workloads by quota (and, with Topology-Aware Scheduling, chooses their domain); the
extender places admitted pods. So:
- A pod still gated by Kueue (scheduling gate `kueue.x-k8s.io/admission`: its pod group is not
  admitted yet; `kueue.x-k8s.io/topology`: admitted, domain not written yet) is no gang member: it
  is in no plan and holds nothing. Once Kueue removes the gate, the TopologyUngater has already
  written the chosen domain into the pod's nodeSelector, which the extender's node selection obeys,
  so the gang is planned inside Kueue's domain only.
- A pod Kueue's TAS pinned to one host (its Topology ends at `kubernetes.io/hostname`, and the
  ungater wrote the host into the nodeSelector) is no gang member either: Kueue placed the whole
  podset, host by host, and a plan of the extender's could only disagree. The scheduler's DRA
  allocator still picks the devices on that host, and the extender still scores and filters the
  pod as any pod outside a gang. With a Topology that stops above the host (e.g. at racks) Kueue
  chooses a rack from the rack's summed capacity, blind to how it is split between nodes; the
  gang is then planned inside that rack and may not fit there (docs/kueue.md).
- The extender never preempts for a pod Kueue manages: which workload runs when quota is short is
  Kueue's decision (its own preemption, cohort reclaim, fair sharing), and a Kueue-admitted pod that
  waits for devices is waiting for the workload Kueue evicted to leave. Evicting other pods for it
  would undo decisions Kueue made for the same quota.
"""

from __future__ import annotations

from typing import Any

ADMISSION_GATE = "kueue.x-k8s.io/admission"
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
GATES = frozenset((ADMISSION_GATE, TOPOLOGY_GATE))

# Labels and annotations Kueue puts on the pods it manages (v0.17 sources: pkg/controller/constants,
# pkg/controller/jobs/pod/constants, pkg/constants, apis/kueue/v1beta2/topology_types.go).
QUEUE_NAME = "kueue.x-k8s.io/queue-name"  # a plain pod or pod group submitted to a LocalQueue
MANAGED = "kueue.x-k8s.io/managed"  # Kueue's pod integration manages the pod
PODSET = "kueue.x-k8s.io/podset"  # set on a job's pod template when Kueue starts it
CLUSTER_QUEUE = "kueue.x-k8s.io/cluster-queue-name"  # the ClusterQueue that admitted it
LOCAL_QUEUE = "kueue.x-k8s.io/local-queue-name"
WORKLOAD = "kueue.x-k8s.io/workload"  # annotation of pods of a TAS-admitted workload
MANAGED_LABELS = (QUEUE_NAME, MANAGED, PODSET, CLUSTER_QUEUE, LOCAL_QUEUE)
TOPOLOGY_ANNOTATIONS = (
    "kueue.x-k8s.io/podset-required-topology",
    "kueue.x-k8s.io/podset-preferred-topology",
    "kueue.x-k8s.io/podset-unconstrained-topology",
)
HOSTNAME = "kubernetes.io/hostname"


def gated_by_kueue(pod: dict[str, Any]) -> bool:
    """Kueue has not let the pod go to the scheduler yet."""
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(gate.get("name") in GATES for gate in gates)


def managed_by_kueue(pod: dict[str, Any]) -> bool:
    """Kueue admitted (or will admit) the pod's workload: preemption for it is Kueue's."""
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    if any(label in labels for label in MANAGED_LABELS):
        return True
    return WORKLOAD in (metadata.get("annotations") or {}) or gated_by_kueue(pod)


def pinned_by_kueue(pod: dict[str, Any]) -> bool:
    """Kueue's TAS chose this pod's host: a TAS pod of a Kueue workload whose nodeSelector names
    one host."""
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    if not any(key in annotations for key in TOPOLOGY_ANNOTATIONS) or not managed_by_kueue(pod):
        return False
    return HOSTNAME in ((pod.get("spec") or {}).get("nodeSelector") or {})
