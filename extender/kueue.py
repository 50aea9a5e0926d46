"""Where Kueue decides and the extender does not. Pure predicates on a pod's API dict.

Kueue admits workloads by quota (and, with Topology-Aware Scheduling, chooses their domain); the
extender places admitted pods. So:
- A pod still gated by Kueue (scheduling gate `kueue.x-k8s.io/admission`: its pod group is not
  admitted yet; `kueue.x-k8s.io/topology`: admitted, domain not written yet) is no gang member: it
  is in no plan and holds nothing. Once Kueue removes the gate, the TopologyUngater has already
  written the chosen domain into the pod's nodeSelector, which the extender's node selection obeys,
  so the gang is planned inside Kueue's domain only.
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
