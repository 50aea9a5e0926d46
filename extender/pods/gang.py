"""Which gang a pod belongs to, how many members the gang has, and its topology wishes.

Sources, in order: a native PodGroup (scheduling.k8s.io, Kubernetes 1.36+); nativedra.dev/gang;
scheduler-plugins PodGroup; Kueue plain-pod groups; JobSet; LeaderWorkerSet (one group of `size`
pods).

A native PodGroup comes first because kube-scheduler's own GangScheduling plugin enforces it: were
the extender to group the pod otherwise, the two would hold and place different sets of pods and
could each wait for the other. Its `gang.minCount` is a minimum (the scheduler admits a group once
that many fit, and places the rest where they fit too), so the gang's size is marked as one; its
one required topology key is a node label, as `nativedra.dev/topology-required` is. A PodGroup
with the `basic` policy is no gang natively, so the pod's own labels decide. Where the cluster does
not serve the API (`native_groups` is None: the `GenericWorkload` gate off, Kubernetes before 1.36)
`spec.schedulingGroup` is ignored and everything works as without it.

A JobSet is one gang: it runs only when all its replicated jobs run, so a driver placed without
its workers would hold GPUs for nothing. Its parts are its Jobs (`<replicated job>/<index>`, sizes
from the JobSet object). With JobSet's exclusive topology (annotation on the JobSet or on a
replicated job's template, copied to the pods) each Job gets a domain of its own at that level,
as JobSet's webhook enforces with pod affinity to its own job and anti-affinity to every other
(https://jobset.sigs.k8s.io/docs/concepts/ — exclusive placement); the gang is all its Jobs,
each alone in a domain, or nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from extender.pods.kueue import gated_by_kueue, pinned_by_kueue

GANG = "nativedra.dev/gang"
GANG_SIZE = "nativedra.dev/gang-size"
TOPOLOGY_REQUIRED = "nativedra.dev/topology-required"
TOPOLOGY_PREFERRED = "nativedra.dev/topology-preferred"
POD_GROUP = "scheduling.x-k8s.io/pod-group"
KUEUE_GROUP = "kueue.x-k8s.io/pod-group-name"
KUEUE_TOTAL = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOBSET_EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP = "leaderworkerset.sigs.k8s.io/group-index"
LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"
LWS_EXCLUSIVE = "leaderworkerset.sigs.k8s.io/exclusive-topology"
NATIVE = "native"  # the source name of native PodGroup gangs, in keys: "<namespace>/native:<group>"
# Without one of these labels (or a native scheduling group) `gang_of` finds no gang.
IDENTITY_LABELS = (GANG, POD_GROUP, KUEUE_GROUP, JOBSET_NAME, LWS_NAME)


@dataclass(frozen=True)
class Part:
    """A subset of a gang placed by its own rule: a JobSet's Job. `exclusive` is the topology
    level at which the part needs a domain of its own (None: it goes with the rest of the gang)."""

    key: str
    size: int
    exclusive: str | None = None


@dataclass(frozen=True)
class GangRef:
    key: str  # namespace/source:name, unique per gang
    size: int | None  # None: unknown, see `error`
    source: str
    required_topology: str | None = None
    preferred_topology: str | None = None
    exclusive: bool = False
    error: str | None = None
    part: str = ""  # which of `parts` this pod belongs to
    parts: tuple[Part, ...] = ()  # empty: one part, the whole gang
    unseen: str | None = None  # an object that sizes the gang, not delivered by the watches yet
    # `size` is a floor (a native PodGroup's minCount): more members may exist, and as many of them
    # as fit are planned with it, as the native scheduler places every member that fits.
    minimum: bool = False


@dataclass(frozen=True)
class JobSetShape:
    """What a JobSet object says about its gang: its Jobs, their pod counts, exclusive levels."""

    jobs: tuple[tuple[str, int, int, str | None], ...]  # (replicated job, replicas, pods per Job, exclusive)
    # Suspended (Kueue evicted it), being deleted, or ended: its pods are going and not coming back.
    stopping: bool = False

    @classmethod
    def from_api(cls, jobset: dict[str, Any]) -> JobSetShape:
        level = ((jobset.get("metadata") or {}).get("annotations") or {}).get(JOBSET_EXCLUSIVE)
        jobs = []
        for replicated in (jobset.get("spec") or {}).get("replicatedJobs") or []:
            template = replicated.get("template") or {}
            job_spec = template.get("spec") or {}
            parallelism = int(job_spec.get("parallelism") or 1)
            pods = min(parallelism, int(job_spec.get("completions") or parallelism))
            own = ((template.get("metadata") or {}).get("annotations") or {}).get(JOBSET_EXCLUSIVE)
            jobs.append((str(replicated.get("name")), int(replicated.get("replicas") or 1), pods, own or level))
        suspended = bool((jobset.get("spec") or {}).get("suspend"))
        deleted = bool((jobset.get("metadata") or {}).get("deletionTimestamp"))
        ended = bool((jobset.get("status") or {}).get("terminalState"))  # Completed or Failed for good
        return cls(tuple(jobs), suspended or deleted or ended)

    @property
    def parts(self) -> tuple[Part, ...]:
        return tuple(
            Part(f"{name}/{index}", pods, exclusive)
            for name, replicas, pods, exclusive in self.jobs
            for index in range(replicas)
        )


@dataclass(frozen=True)
class NativeGroup:
    """What a native PodGroup says about its pods: a gang of at least `min_count` pods (None: the
    `basic` policy, no gang) that must share one value of node label `topology`, if given."""

    min_count: int | None
    topology: str | None = None
    error: str | None = None

    @classmethod
    def from_api(cls, group: dict[str, Any]) -> NativeGroup:
        spec = group.get("spec") or {}
        constraints = (spec.get("schedulingConstraints") or {}).get("topology") or []
        topology = next((str(c["key"]) for c in constraints if c.get("key")), None)
        gang = (spec.get("schedulingPolicy") or {}).get("gang")
        if gang is None:
            return cls(None, topology)
        metadata = group.get("metadata") or {}
        where = f"spec.schedulingPolicy.gang.minCount of PodGroup {metadata.get('namespace')}/{metadata.get('name')}"
        value = gang.get("minCount")
        size, error = _size(None if value is None else str(value), where)
        if size is None and error is None:
            error = f"{where} is missing"
        return cls(size, topology, error)


def scheduling_group(pod: dict[str, Any]) -> str | None:
    """The native PodGroup the pod names in `spec.schedulingGroup.podGroupName`, if any."""
    group = ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
    return str(group) if group else None


def _size(value: str | None, where: str) -> tuple[int | None, str | None]:
    if value is None:
        return None, None
    try:
        size = int(value)
    except ValueError:
        return None, f"{where} is {value!r}, not a whole number"
    if size < 1:
        return None, f"{where} is {size}; a gang needs at least 1 member"
    return size, None


def may_belong_to_gang(pod: dict[str, Any]) -> bool:
    """A cheap test on labels alone, so the watch can drop pods that can never be gang members
    (most pods of a cluster) without knowing the gang's size sources."""
    labels = pod["metadata"].get("labels") or {}
    return any(label in labels for label in IDENTITY_LABELS) or scheduling_group(pod) is not None


def gang_of(
    pod: dict[str, Any],
    jobsets: Mapping[tuple[str, str], JobSetShape],
    pod_group_min: Mapping[tuple[str, str], int],
    native_groups: Mapping[tuple[str, str], NativeGroup] | None = None,
) -> GangRef | None:
    """The pod's gang; `native_groups` are the native PodGroups, None where the API is not served.
    None for a pod Kueue still gates (not admitted, or its domain not written yet: it joins its gang
    once Kueue lets it go, with Kueue's domain in its nodeSelector) and for one Kueue's TAS pinned
    to a host (Kueue placed it; extender.pods.kueue)."""
    if gated_by_kueue(pod) or pinned_by_kueue(pod):
        return None
    metadata = pod["metadata"]
    labels: dict[str, str] = metadata.get("labels") or {}
    annotations: dict[str, str] = metadata.get("annotations") or {}
    namespace = metadata["namespace"]
    both = {**labels, **annotations}
    required = both.get(TOPOLOGY_REQUIRED) or annotations.get(KUEUE_REQUIRED)
    preferred = both.get(TOPOLOGY_PREFERRED) or annotations.get(KUEUE_PREFERRED)
    override, override_error = _size(both.get(GANG_SIZE), f"{GANG_SIZE} of pod {namespace}/{metadata['name']}")

    def ref(
        source: str, name: str, size: int | None, error: str | None = None, exclusive: str | None = None
    ) -> GangRef:
        return GangRef(
            key=f"{namespace}/{source}:{name}",
            size=override or size,
            source=source,
            required_topology=exclusive or required,
            preferred_topology=preferred,
            exclusive=exclusive is not None,
            error=override_error or (error if override is None else None),
        )

    if native_groups is not None and (group_name := scheduling_group(pod)) is not None:
        key = f"{namespace}/{NATIVE}:{group_name}"
        native = native_groups.get((namespace, group_name))
        if native is None:
            return GangRef(key, None, NATIVE, unseen=f"PodGroup {namespace}/{group_name}", minimum=True)
        if native.min_count is not None or native.error is not None:
            return GangRef(
                key=key,
                size=native.min_count,
                source=NATIVE,
                required_topology=native.topology or required,
                preferred_topology=preferred,
                error=native.error,
                minimum=True,
            )
    if GANG in labels:
        size_error = None if GANG_SIZE in both else f"pod {namespace}/{metadata['name']} has {GANG} but no {GANG_SIZE}"
        return ref("gang", labels[GANG], None, size_error)
    if POD_GROUP in labels:
        group = labels[POD_GROUP]
        return ref("podgroup", group, pod_group_min.get((namespace, group)))
    if KUEUE_GROUP in labels:
        size, error = _size(annotations.get(KUEUE_TOTAL), f"{KUEUE_TOTAL} of pod {namespace}/{metadata['name']}")
        return ref("kueue", labels[KUEUE_GROUP], size, error)
    if JOBSET_NAME in labels and JOBSET_REPLICATED_JOB in labels:
        name = labels[JOBSET_NAME]
        shape = jobsets.get((namespace, name))
        part = f"{labels[JOBSET_REPLICATED_JOB]}/{labels.get(JOBSET_JOB_INDEX, '0')}"
        if shape is None:
            return replace(ref("jobset", name, None), part=part, unseen=f"JobSet {namespace}/{name}")
        parts = shape.parts
        exclusive = any(p.exclusive for p in parts)
        return replace(ref("jobset", name, sum(p.size for p in parts)), part=part, parts=parts, exclusive=exclusive)
    if LWS_NAME in labels and LWS_GROUP in labels:
        size, error = _size(annotations.get(LWS_SIZE), f"{LWS_SIZE} of pod {namespace}/{metadata['name']}")
        return ref("lws", f"{labels[LWS_NAME]}/{labels[LWS_GROUP]}", size, error, both.get(LWS_EXCLUSIVE))
    return None
