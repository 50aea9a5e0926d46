"""Gang identity: which gang a pod belongs to, its size, its topology wishes, bad labels named."""

from __future__ import annotations

from typing import Any

import pytest

from extender.pods.gang import JobSetShape, gang_of, may_belong_to_gang
from testkit.builders import pod

JOBSET_LABELS = {
    "jobset.sigs.k8s.io/jobset-name": "js",
    "jobset.sigs.k8s.io/replicatedjob-name": "workers",
    "jobset.sigs.k8s.io/replicatedjob-replicas": "3",
    "jobset.sigs.k8s.io/job-index": "2",
    "batch.kubernetes.io/job-name": "js-workers-2",
}


def jobset_object(exclusive: str | None = None, rjob_exclusive: str | None = None) -> dict[str, Any]:
    """A JobSet as the API returns it: a driver Job of 1 pod and 3 worker Jobs of 4 pods."""

    def replicated(name: str, replicas: int, pods: int, level: str | None) -> dict[str, Any]:
        annotations = {"alpha.jobset.sigs.k8s.io/exclusive-topology": level} if level else {}
        spec = {"parallelism": pods, "completions": pods}
        return {
            "name": name,
            "replicas": replicas,
            "template": {"metadata": {"annotations": annotations}, "spec": spec},
        }

    annotations = {"alpha.jobset.sigs.k8s.io/exclusive-topology": exclusive} if exclusive else {}
    return {
        "metadata": {"name": "js", "namespace": "ns", "annotations": annotations},
        "spec": {"replicatedJobs": [replicated("driver", 1, 1, None), replicated("workers", 3, 4, rjob_exclusive)]},
    }


LWS_LABELS = {"leaderworkerset.sigs.k8s.io/name": "s", "leaderworkerset.sigs.k8s.io/group-index": "1"}


def test_gang_sources_and_sizes() -> None:
    own = gang_of(pod(labels={"nativedra.dev/gang": "a", "nativedra.dev/gang-size": "4"}), {}, {})
    assert own is not None and (own.key, own.size, own.error) == ("ns/gang:a", 4, None)
    group = gang_of(pod(labels={"scheduling.x-k8s.io/pod-group": "pg"}), {}, {("ns", "pg"): 3})
    assert group is not None and (group.key, group.size) == ("ns/podgroup:pg", 3)
    kueue = gang_of(
        pod(
            labels={"kueue.x-k8s.io/pod-group-name": "k"},
            annotations={"kueue.x-k8s.io/pod-group-total-count": "5"},
        ),
        {},
        {},
    )
    assert kueue is not None and kueue.size == 5
    jobset = gang_of(pod(labels=JOBSET_LABELS), {("ns", "js"): JobSetShape.from_api(jobset_object())}, {})
    assert jobset is not None and (jobset.key, jobset.size, jobset.part, jobset.exclusive) == (
        "ns/jobset:js",
        13,
        "workers/2",
        False,
    ), "the whole JobSet (driver and workers) is one gang"
    lws = gang_of(pod(labels=LWS_LABELS, annotations={"leaderworkerset.sigs.k8s.io/size": "4"}), {}, {})
    assert lws is not None and (lws.key, lws.size) == ("ns/lws:s/1", 4)
    assert gang_of(pod(labels={"app": "web"}), {}, {}) is None


@pytest.mark.parametrize(
    ("jobset_level", "rjob_level", "exclusive_parts"),
    [
        ("rack", None, {"driver/0", "workers/0", "workers/1", "workers/2"}),
        (None, "rack", {"workers/0", "workers/1", "workers/2"}),
    ],
)
def test_exclusive_jobset_gives_each_job_its_own_domain(
    jobset_level: str | None, rjob_level: str | None, exclusive_parts: set[str]
) -> None:
    shape = JobSetShape.from_api(jobset_object(jobset_level, rjob_level))
    ref = gang_of(pod(labels=JOBSET_LABELS), {("ns", "js"): shape}, {})
    assert ref is not None and ref.exclusive and ref.required_topology is None
    assert {(p.key, p.size) for p in ref.parts} == {
        ("driver/0", 1),
        ("workers/0", 4),
        ("workers/1", 4),
        ("workers/2", 4),
    }
    assert {p.key for p in ref.parts if p.exclusive == "rack"} == exclusive_parts


def test_a_jobset_pod_waits_until_its_jobset_is_seen() -> None:
    ref = gang_of(pod(labels=JOBSET_LABELS), {}, {})
    assert ref is not None and ref.unseen == "JobSet ns/js" and ref.size is None


def test_gang_topology_annotations() -> None:
    kueue = gang_of(
        pod(
            labels={"nativedra.dev/gang": "a", "nativedra.dev/gang-size": "2"},
            annotations={"kueue.x-k8s.io/podset-preferred-topology": "block"},
        ),
        {},
        {},
    )
    assert kueue is not None and (kueue.required_topology, kueue.preferred_topology) == (None, "block")
    own = gang_of(
        pod(
            labels={"nativedra.dev/gang": "a", "nativedra.dev/gang-size": "2"},
            annotations={"nativedra.dev/topology-required": "rack"},
        ),
        {},
        {},
    )
    assert own is not None and own.required_topology == "rack"


@pytest.mark.parametrize(
    ("labels", "annotations", "message"),
    [
        ({"nativedra.dev/gang": "a"}, {}, "has nativedra.dev/gang but no nativedra.dev/gang-size"),
        ({"nativedra.dev/gang": "a", "nativedra.dev/gang-size": "many"}, {}, "'many', not a whole number"),
        ({"kueue.x-k8s.io/pod-group-name": "k"}, {"kueue.x-k8s.io/pod-group-total-count": "0"}, "at least 1 member"),
    ],
)
def test_bad_gang_sizes_are_named(labels: dict[str, str], annotations: dict[str, str], message: str) -> None:
    ref = gang_of(pod(labels=labels, annotations=annotations), {}, {})
    assert ref is not None and ref.error is not None and message in ref.error and "ns/p" in ref.error


@pytest.mark.parametrize(
    "labels",
    [
        {"nativedra.dev/gang": "a"},
        {"scheduling.x-k8s.io/pod-group": "pg"},
        {"kueue.x-k8s.io/pod-group-name": "k"},
        JOBSET_LABELS,
        LWS_LABELS,
    ],
)
def test_every_gang_source_passes_the_cheap_label_test(labels: dict[str, str]) -> None:
    """The watch drops pods that fail `may_belong_to_gang`: a gang it missed would never be planned."""
    member = pod(labels=labels)
    assert gang_of(member, {}, {}) is not None
    assert may_belong_to_gang(member)


def test_pods_with_only_related_labels_are_not_gang_candidates() -> None:
    for labels in ({"app": "web"}, {"nativedra.dev/gang-size": "4"}, {"leaderworkerset.sigs.k8s.io/group-index": "0"}):
        assert not may_belong_to_gang(pod(labels=labels)), labels
