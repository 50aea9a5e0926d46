"""Gang identity: which gang a pod belongs to, its size, its topology wishes, bad labels named."""

from __future__ import annotations

import pytest

from extender.gang import gang_of, may_belong_to_gang
from tests.builders import pod

JOBSET_LABELS = {
    "jobset.sigs.k8s.io/jobset-name": "js",
    "jobset.sigs.k8s.io/replicatedjob-name": "workers",
    "jobset.sigs.k8s.io/replicatedjob-replicas": "3",
    "batch.kubernetes.io/job-name": "js-workers-0",
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
    jobset = gang_of(
        pod(labels=JOBSET_LABELS, annotations={"alpha.jobset.sigs.k8s.io/exclusive-topology": "rack"}),
        {("ns", "js-workers-0"): 4},
        {},
    )
    assert jobset is not None and (jobset.key, jobset.size, jobset.required_topology, jobset.exclusive) == (
        "ns/jobset:js/workers",
        12,
        "rack",
        True,
    )
    lws = gang_of(pod(labels=LWS_LABELS, annotations={"leaderworkerset.sigs.k8s.io/size": "4"}), {}, {})
    assert lws is not None and (lws.key, lws.size) == ("ns/lws:s/1", 4)
    assert gang_of(pod(labels={"app": "web"}), {}, {}) is None


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
