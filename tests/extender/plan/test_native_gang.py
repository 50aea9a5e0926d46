"""Native PodGroups (scheduling.k8s.io): identity, size as a minimum, topology, an absent API."""

from __future__ import annotations

from typing import Any

from extender.cluster.state import NATIVE_KINDS, ClusterState
from extender.plan.config import RACK_LABEL, ExtenderConfig
from extender.plan.decide import RETRY, Decider
from extender.pods.gang import GANG, GANG_SIZE, NativeGroup, gang_of, may_belong_to_gang
from testkit.builders import CREATED, DRIVER, allocated_claim, claim_template, gang_labels, pod, pod_group, racks, view
from tests.extender.plan.test_decide import SOON_AFTER

EIGHT = claim_template("eight", 8)


def native(group: str, index: int, **fields: Any) -> dict[str, Any]:
    """Member <group>-<index> of native PodGroup `group`, asking for 8 GPUs."""
    fields.setdefault("created", CREATED)
    return pod(f"{group}-{index}", group=group, template="eight", **fields)


def groups(*objects: dict[str, Any]) -> dict[tuple[str, str], NativeGroup]:
    return {(g["metadata"]["namespace"], g["metadata"]["name"]): NativeGroup.from_api(g) for g in objects}


def test_a_native_pod_group_is_a_gang_of_at_least_min_count_in_its_topology() -> None:
    ref = gang_of(native("train", 0), {}, {}, groups(pod_group("train", 4, RACK_LABEL)))
    assert ref is not None
    assert (ref.key, ref.source, ref.size, ref.minimum) == ("ns/native:train", "native", 4, True)
    assert (ref.required_topology, ref.error, ref.unseen) == (RACK_LABEL, None, None)


def test_the_native_group_decides_over_the_pods_own_gang_labels() -> None:
    """The native scheduler enforces the PodGroup: grouping the pod otherwise would contradict it."""
    labelled = native("train", 0, labels=gang_labels("other", 2))
    ref = gang_of(labelled, {}, {}, groups(pod_group("train", 4)))
    assert ref is not None and (ref.key, ref.size) == ("ns/native:train", 4)


def test_a_basic_pod_group_is_no_gang_and_the_pods_labels_decide() -> None:
    basic = groups(pod_group("loose"))
    assert gang_of(native("loose", 0), {}, {}, basic) is None
    ref = gang_of(native("loose", 0, labels=gang_labels("mine", 2)), {}, {}, basic)
    assert ref is not None and (ref.key, ref.size, ref.minimum) == ("ns/gang:mine", 2, False)


def test_without_the_native_api_the_scheduling_group_is_ignored() -> None:
    """GenericWorkload off or Kubernetes before 1.36: the extender works as it did without it."""
    assert gang_of(native("train", 0), {}, {}, None) is None
    ref = gang_of(native("train", 0, labels={GANG: "g", GANG_SIZE: "2"}), {}, {}, None)
    assert ref is not None and ref.key == "ns/gang:g"


def test_a_member_of_a_pod_group_not_seen_yet_is_retried_soon() -> None:
    ref = gang_of(native("train", 0), {}, {}, {})
    assert ref is not None and ref.unseen == "PodGroup ns/train"
    cluster = view(racks({"r": 2}), pods=[native("train", 0)], templates=[EIGHT], pod_groups=[])
    names = sorted(cluster.nodes)
    passing, failed, path = Decider(ExtenderConfig()).filter(cluster, native("train", 0), names, now=SOON_AFTER)
    assert (passing, path) == ([], RETRY)
    assert failed["r-0"] == "gang ns/native:train: waiting to see PodGroup ns/train"


def test_a_pod_with_a_scheduling_group_may_be_a_gang_member_without_any_label() -> None:
    assert may_belong_to_gang(pod(group="train"))
    assert not may_belong_to_gang(pod())


def test_a_pod_group_without_min_count_is_named_with_its_field() -> None:
    broken = pod_group("train", 4)
    del broken["spec"]["schedulingPolicy"]["gang"]["minCount"]
    group = NativeGroup.from_api(broken)
    assert group.error == "spec.schedulingPolicy.gang.minCount of PodGroup ns/train is missing"
    ref = gang_of(native("train", 0), {}, {}, groups(broken))
    assert ref is not None and ref.error == group.error


def test_of_two_native_gangs_the_older_is_planned_whole_and_the_other_told_why() -> None:
    """Two PodGroups of 4 pods x 8 GPUs on 6 nodes of 8: one gang runs, the other waits whole."""
    first = [native("a", i) for i in range(4)]
    second = [native("b", i, created="2026-11-29T00:00:01Z") for i in range(4)]
    cluster = view(
        racks({"r": 6}), pods=first + second, templates=[EIGHT], pod_groups=[pod_group("a", 4), pod_group("b", 4)]
    )
    decider, names = Decider(ExtenderConfig()), sorted(racks({"r": 6}))
    passing, _, path = decider.filter(cluster, first[0], names, now=SOON_AFTER)
    assert path == "gang" and len(passing) == 4
    passing, failed, path = decider.filter(cluster, second[0], names, now=SOON_AFTER)
    assert (passing, path) == ([], "gang-rejected")
    assert failed["r-0"].startswith("gang ns/native:b needs 4 more pod(s) x 8 device(s); "), failed["r-0"]


def test_a_rack_required_pod_group_gets_the_tightest_rack_that_fits() -> None:
    """Racks of 3, 2 and 1 nodes: a 2-pod group takes the rack of 2, so a 3-pod one still fits."""
    pods = [native("two", i) for i in range(2)]
    nodes = racks({"three": 3, "two": 2, "one": 1}, label=RACK_LABEL)
    cluster = view(nodes, pods=pods, templates=[EIGHT], pod_groups=[pod_group("two", 2, RACK_LABEL)])
    passing, failed, _ = Decider(ExtenderConfig()).filter(cluster, pods[0], sorted(nodes), now=SOON_AFTER)
    assert passing == ["two-0", "two-1"]
    assert failed["three-0"] == f"gang ns/native:two is planned onto {RACK_LABEL} two: two-0, two-1"


def test_members_past_min_count_are_planned_with_the_rest_when_all_fit() -> None:
    """The native scheduler places every member that fits once minCount do: so does the plan."""
    pods = [native("wide", i) for i in range(5)]
    cluster = view(racks({"r": 6}), pods=pods, templates=[EIGHT], pod_groups=[pod_group("wide", 2)])
    passing, _, _ = Decider(ExtenderConfig()).filter(cluster, pods[0], sorted(racks({"r": 6})), now=SOON_AFTER)
    assert len(passing) == 5


def test_a_pod_group_with_more_members_than_fit_is_planned_with_as_many_as_fit() -> None:
    """Planning all 7 would refuse a group the native scheduler admits (at least 2 of 7 fit), and
    planning only 2 would leave a member pending that it places: 3 fit, 3 are planned."""
    pods = [native("wide", i) for i in range(7)]
    cluster = view(racks({"r": 3}), pods=pods, templates=[EIGHT], pod_groups=[pod_group("wide", 2)])
    passing, failed, path = Decider(ExtenderConfig()).filter(cluster, pods[0], ["r-0", "r-1", "r-2"], SOON_AFTER)
    assert (passing, path) == (["r-0", "r-1", "r-2"], "gang"), failed


def test_a_pod_group_that_cannot_reach_min_count_holds_nothing() -> None:
    pods = [native("wide", i) for i in range(7)]
    cluster = view(racks({"r": 3}), pods=pods, templates=[EIGHT], pod_groups=[pod_group("wide", 4)])
    passing, failed, path = Decider(ExtenderConfig()).filter(cluster, pods[0], ["r-0", "r-1", "r-2"], SOON_AFTER)
    assert (passing, path) == ([], "gang-rejected")
    assert failed["r-0"] == (
        "gang ns/native:wide needs at least 4 pods of 8 device(s) each; this cluster could ever hold at most 3 of them"
    )


def test_after_min_count_are_placed_a_member_that_fits_is_planned_where_it_fits() -> None:
    """Two of four placed (minCount 2), room for one more: it is planned there, the last waits."""
    full = [f"gpu-{d}" for d in range(8)]
    claims = [allocated_claim(f"wide-{i}-gpus", f"r-{i}", full, reserved_for=f"wide-{i}") for i in range(2)]
    placed = [native("wide", i, node=f"r-{i}", claim=f"wide-{i}-gpus") for i in range(2)]
    extra = [native("wide", i) for i in (2, 3)]
    cluster = view(
        racks({"r": 3}), pods=placed + extra, templates=[EIGHT], claims=claims, pod_groups=[pod_group("wide", 2)]
    )
    assert Decider(ExtenderConfig()).filter(cluster, extra[0], ["r-2"], now=SOON_AFTER) == (["r-2"], {}, "gang")


def test_the_state_reads_pod_groups_of_either_version_and_none_when_neither_is_served() -> None:
    state = ClusterState(DRIVER)
    assert state.view().native_groups == {}, "not listed yet: counted as served, so members are retried"
    assert all(state.absent(kind) for kind in NATIVE_KINDS), "each absence is new the first time"
    assert not state.absent("nativepodgroups"), "and said once"
    assert state.view().native_groups is None
    state.replace("nativepodgroups", [pod_group("train", 4, RACK_LABEL)])
    assert state.view().native_groups == {("ns", "train"): NativeGroup(4, RACK_LABEL)}
    state.apply("MODIFIED", "nativepodgroups", pod_group("train", 6, RACK_LABEL))
    assert state.view().native_groups == {("ns", "train"): NativeGroup(6, RACK_LABEL)}
    state.apply("DELETED", "nativepodgroups", pod_group("train", 6))
    assert state.view().native_groups == {}
    assert state.absent("nativepodgroups"), "absent again after being served: said again"


def test_the_state_keeps_native_members_without_claims_or_labels() -> None:
    state = ClusterState(DRIVER)
    state.replace("pods", [pod("plain"), pod("member", group="train")])
    assert sorted(state.view().pods) == [("ns", "member")]


def test_an_elastic_group_grows_only_inside_its_required_rack() -> None:
    """minCount 2 placed in rack a: the members beyond it go on rack a's nodes as room frees there,
    never into rack b, even when rack b has room and rack a has none."""
    full = [f"gpu-{d}" for d in range(8)]
    claims = [allocated_claim(f"wide-{i}-gpus", f"a-{i}", full, reserved_for=f"wide-{i}") for i in range(2)]
    placed = [native("wide", i, node=f"a-{i}", claim=f"wide-{i}-gpus") for i in range(2)]
    extra = [native("wide", i) for i in (2, 3)]
    for rack_a, offered, passing in ((3, ["a-2", "b-0"], ["a-2"]), (2, ["b-0", "b-1"], [])):
        nodes = racks({"a": rack_a, "b": 2}, label=RACK_LABEL)
        group = pod_group("wide", 2, RACK_LABEL)
        cluster = view(nodes, pods=placed + extra, templates=[EIGHT], claims=claims, pod_groups=[group])
        found, failed, path = Decider(ExtenderConfig()).filter(cluster, extra[0], offered, now=SOON_AFTER)
        assert (found, path) == (passing, "gang"), failed
        assert (
            failed.get("b-0")
            == f"gang ns/native:wide has its minimum placed in {RACK_LABEL} a: more members go there only"
        )
