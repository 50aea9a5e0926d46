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
- Nor does it evict a pod Kueue admitted, but that is proven, not read from labels any user can
  write: the pod must belong to a Workload whose status says Admitted (a status only Kueue writes).
  It belongs when one of the Workload's owners, in the pod's namespace, is the pod itself (Kueue's
  pod groups), the pod's controller (a Job), or the JobSet or LeaderWorkerSet its labels name.
  Without an admitted Workload a pod labelled as Kueue's is an ordinary victim.
"""

from __future__ import annotations

from collections.abc import Iterable
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
JOBSET_UID = "jobset.sigs.k8s.io/jobset-uid"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
# (namespace, identity): an owner by UID ("uid:<uid>") or by kind and name ("<Kind>/<name>").
Owner = tuple[str, str]


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


def workload_summary(workload: dict[str, Any]) -> dict[str, Any]:
    """What the proof reads of a Workload (its owners, whether admitted), so that the pod templates
    a Workload carries are not kept in memory."""
    metadata = workload.get("metadata") or {}
    conditions = (workload.get("status") or {}).get("conditions") or []
    admitted = any(c.get("type") == "Admitted" and c.get("status") == "True" for c in conditions)
    kept = {key: metadata[key] for key in ("name", "namespace", "uid", "ownerReferences") if key in metadata}
    return {"metadata": kept, "status": {"admitted": admitted}}


def admitted_owners(workloads: Iterable[dict[str, Any]]) -> frozenset[Owner]:
    """The owners, by UID and by kind and name, of the admitted Workloads (each as summarized)."""
    owners: set[Owner] = set()
    for workload in workloads:
        if not (workload.get("status") or {}).get("admitted"):
            continue
        metadata = workload.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "")
        for ref in metadata.get("ownerReferences") or []:
            owners.add((namespace, f"uid:{ref.get('uid')}"))
            owners.add((namespace, f"{ref.get('kind')}/{ref.get('name')}"))
    return frozenset(owners)


def _identities(pod: dict[str, Any]) -> list[str]:
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    found = [f"uid:{metadata.get('uid')}"]
    found += [f"uid:{ref.get('uid')}" for ref in metadata.get("ownerReferences") or [] if ref.get("controller")]
    if JOBSET_UID in labels:
        found.append(f"uid:{labels[JOBSET_UID]}")
    if JOBSET_NAME in labels:
        found.append(f"JobSet/{labels[JOBSET_NAME]}")
    if LWS_NAME in labels:
        found.append(f"LeaderWorkerSet/{labels[LWS_NAME]}")
    return found


def admitted_by_kueue(pod: dict[str, Any], admitted: frozenset[Owner]) -> bool:
    """The pod belongs to a Workload Kueue admitted (see the module docstring): never a victim."""
    namespace = str((pod.get("metadata") or {}).get("namespace") or "")
    return any((namespace, identity) in admitted for identity in _identities(pod))
