"""The extender's pure core: gang identity, planning, eligibility, CEL selectors, wire format."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dra_driver.discovery.simulated import load_profile, resolve_profile
from dra_driver.publish_config import PublishConfig
from dra_driver.slices import build_slices
from extender.capacity import Matcher
from extender.cel_eval import Selectors, device_view
from extender.config import ConfigError, load_config
from extender.demand import Demand, Request
from extender.eligibility import eligible
from extender.gang import gang_of
from extender.model import Node, Usage, nodes_from
from extender.planner import Gang, Member, plan_cluster
from extender.wire import ExtenderArgs, filter_result

DRIVER = "gpu.nativedra.dev"
GPU = "device.driver == 'gpu.nativedra.dev' && device.attributes['gpu.nativedra.dev'].type == 'gpu'"


def pod(
    labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None, name: str = "p"
) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "labels": labels or {}, "annotations": annotations or {}}}


# -- gang identity ------------------------------------------------------------------------------


def test_gang_sources_and_sizes() -> None:
    own = gang_of(pod({"nativedra.dev/gang": "a", "nativedra.dev/gang-size": "4"}), {}, {})
    assert own is not None and (own.key, own.size, own.error) == ("ns/gang:a", 4, None)
    group = gang_of(pod({"scheduling.x-k8s.io/pod-group": "pg"}), {}, {("ns", "pg"): 3})
    assert group is not None and (group.key, group.size) == ("ns/podgroup:pg", 3)
    kueue = gang_of(pod({"kueue.x-k8s.io/pod-group-name": "k"}, {"kueue.x-k8s.io/pod-group-total-count": "5"}), {}, {})
    assert kueue is not None and kueue.size == 5
    jobset_labels = {
        "jobset.sigs.k8s.io/jobset-name": "js",
        "jobset.sigs.k8s.io/replicatedjob-name": "workers",
        "jobset.sigs.k8s.io/replicatedjob-replicas": "3",
        "batch.kubernetes.io/job-name": "js-workers-0",
    }
    jobset = gang_of(
        pod(jobset_labels, {"alpha.jobset.sigs.k8s.io/exclusive-topology": "rack"}), {("ns", "js-workers-0"): 4}, {}
    )
    assert jobset is not None and (jobset.key, jobset.size, jobset.required_topology, jobset.exclusive) == (
        "ns/jobset:js/workers",
        12,
        "rack",
        True,
    )
    lws = gang_of(
        pod(
            {"leaderworkerset.sigs.k8s.io/name": "s", "leaderworkerset.sigs.k8s.io/group-index": "1"},
            {"leaderworkerset.sigs.k8s.io/size": "4"},
        ),
        {},
        {},
    )
    assert lws is not None and (lws.key, lws.size) == ("ns/lws:s/1", 4)
    assert gang_of(pod({"app": "web"}), {}, {}) is None


def test_gang_topology_annotations() -> None:
    kueue = gang_of(
        pod(
            {"nativedra.dev/gang": "a", "nativedra.dev/gang-size": "2"},
            {"kueue.x-k8s.io/podset-preferred-topology": "block"},
        ),
        {},
        {},
    )
    assert kueue is not None and (kueue.required_topology, kueue.preferred_topology) == (None, "block")
    own = gang_of(
        pod({"nativedra.dev/gang": "a", "nativedra.dev/gang-size": "2"}, {"nativedra.dev/topology-required": "rack"}),
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
    ref = gang_of(pod(labels, annotations), {}, {})
    assert ref is not None and ref.error is not None and message in ref.error and "ns/p" in ref.error


# -- planning -----------------------------------------------------------------------------------


def cluster(racks: dict[str, int]) -> dict[str, Node]:
    inventory = load_profile(resolve_profile("a100-8x"))
    node_objects, slices = [], []
    for rack, count in racks.items():
        for index in range(count):
            name = f"{rack}-{index}"
            node_objects.append({"metadata": {"name": name, "labels": {"rack": rack}}})
            for spec in build_slices(inventory, PublishConfig(fractions=()), name):
                spec["pool"]["generation"] = 1
                slices.append({"spec": spec})
    return nodes_from(node_objects, slices, DRIVER)


EIGHT = Demand((Request((GPU,), 8),))


def gang(
    name: str, size: int, created: float, required: str | None = None, bound: dict[str, str] | None = None
) -> Gang:
    labels = {"nativedra.dev/gang": name, "nativedra.dev/gang-size": str(size)}
    ref = gang_of(pod(labels, {"nativedra.dev/topology-required": required} if required else {}), {}, {})
    assert ref is not None
    members = [Member(f"ns/{name}-{i}", (bound or {}).get(f"{name}-{i}"), EIGHT, created + i) for i in range(size)]
    return Gang(ref, members)


def plan(
    nodes: dict[str, Node], gangs: list[Gang], now: float = 100.0, timeout: float = 300.0, full: tuple[str, ...] = ()
) -> Any:
    usage = {name: Usage(devices=set(nodes[name].devices) if name in full else set()) for name in nodes}
    return plan_cluster(nodes, usage, gangs, Matcher(Selectors(), DRIVER), now=now, timeout=timeout)


def test_best_fit_keeps_the_big_rack_whole() -> None:
    result = plan(cluster({"big": 4, "small": 2}), [gang("g", 2, 1.0, "rack")])
    assert set(result.plans["ns/gang:g"].slots) == {"small-0", "small-1"}


def test_older_gang_holds_and_the_younger_one_holds_nothing() -> None:
    nodes = cluster({"r": 6})
    result = plan(nodes, [gang("young", 4, 2.0), gang("old", 4, 1.0)])
    assert result.plans["ns/gang:old"].feasible and sum(result.plans["ns/gang:old"].slots.values()) == 4
    young = result.plans["ns/gang:young"]
    assert not young.feasible and young.slots == {}
    assert "needs 4 more pod(s) x 8 device(s)" in young.reason and "room for 2" in young.reason
    assert sum(len(h) for h in result.holders.values()) == 4


def test_bound_members_fix_the_domain() -> None:
    nodes = cluster({"a": 3, "b": 4})
    result = plan(nodes, [gang("g", 3, 1.0, "rack", bound={"g-0": "a-0"})], full=("a-0",))
    assert result.plans["ns/gang:g"].slots == {"a-1": 1, "a-2": 1}, "rack b has more room, but the gang is in rack a"


def test_an_expired_hold_waits_behind_others_for_one_timeout() -> None:
    nodes = cluster({"r": 6})
    stale, fresh = gang("stale", 4, 0.0), gang("fresh", 4, 350.0)
    expired = plan(nodes, [stale, fresh], now=400.0, timeout=300.0)
    assert expired.plans["ns/gang:stale"].expired and expired.plans["ns/gang:fresh"].feasible
    assert not expired.plans["ns/gang:stale"].feasible, "it backs off while the fresh gang holds"
    again = plan(nodes, [gang("stale", 4, 0.0)], now=700.0, timeout=300.0)
    assert not again.plans["ns/gang:stale"].expired and again.plans["ns/gang:stale"].feasible


# -- eligibility and selectors -----------------------------------------------------------------


def test_eligibility_follows_selector_and_required_affinity() -> None:
    spec = {
        "nodeSelector": {"gpu": "a100"},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1", "r2"]}]},
                        {"matchExpressions": [{"key": "spare", "operator": "Exists"}]},
                    ]
                }
            }
        },
    }
    assert eligible(spec, "n", {"gpu": "a100", "rack": "r2"})
    assert eligible(spec, "n", {"gpu": "a100", "spare": ""})
    assert not eligible(spec, "n", {"gpu": "a100", "rack": "r3"})
    assert not eligible(spec, "n", {"gpu": "h100", "rack": "r1"})
    assert eligible({"nodeName": "elsewhere"}, "n", {}), "a placed sibling's nodeName does not restrict others"


def test_cel_selectors_with_quantities_versions_and_missing_attributes() -> None:
    specs = build_slices(load_profile(resolve_profile("h100-8x")), PublishConfig(fractions=()), "n")
    device = next(spec for spec in specs if "devices" in spec)["devices"][0]
    view = device_view(DRIVER, device)
    selectors = Selectors()
    assert selectors.matches("device.capacity['gpu.nativedra.dev'].memory.compareTo(quantity('80Gi')) < 0", view)
    assert selectors.matches("device.capacity['gpu.nativedra.dev'].memory.compareTo(quantity('64Gi')) >= 0", view)
    assert selectors.matches(
        "device.attributes['gpu.nativedra.dev'].driverVersion.compareTo(semver('550.0.0')) >= 0", view
    )
    assert selectors.matches("device.attributes['resource.kubernetes.io'].pciBusID == '0000:18:00.0'", view)
    assert not selectors.matches("device.attributes['other.vendor.com'].type == 'gpu'", view), "runtime error: no match"
    assert selectors.matches("device.attributes['gpu.nativedra.dev'].?numaNode.orValue(0) == 0", view), (
        "syntax the library cannot parse matches (the scheduler's own DRA filter decides)"
    )


def test_filter_answers_in_the_form_the_scheduler_sent() -> None:
    by_names = ExtenderArgs.model_validate({"Pod": {}, "NodeNames": ["a", "b"]})
    assert filter_result(by_names, ["a"], {"b": "why"}).model_dump()["NodeNames"] == ["a"]
    nodes = {"kind": "NodeList", "items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]}
    full = filter_result(ExtenderArgs.model_validate({"Pod": {}, "Nodes": nodes}), ["b"], {"a": "why"}).model_dump()
    assert full["NodeNames"] is None and [n["metadata"]["name"] for n in full["Nodes"]["items"]] == ["b"]
    assert full["FailedNodes"] == {"a": "why"}


def test_invalid_extender_config_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "extender.yaml"
    path.write_text("planTimeoutSeconds: -3\n")
    with pytest.raises(ConfigError, match=r"planTimeoutSeconds"):
        load_config(path)
    path.write_text("topologyLevels: [rack]\nweights: {numa: 3}\n")
    assert load_config(path).weights.numa == 3


def test_a_gang_is_never_smaller_than_its_members() -> None:
    undercounted = gang("g", 2, 1.0)
    undercounted.members += [Member(f"ns/g-{i}", None, EIGHT, 5.0 + i) for i in (2, 3)]
    assert undercounted.size == 4
    result = plan(cluster({"r": 6}), [undercounted])
    assert sum(result.plans["ns/gang:g"].slots.values()) == 4


def test_a_domain_already_given_to_members_is_kept_while_feasible() -> None:
    nodes = cluster({"big": 4, "small": 2})
    usage = {name: Usage() for name in nodes}
    matcher = Matcher(Selectors(), DRIVER)
    fresh = plan_cluster(nodes, usage, [gang("g", 2, 1.0, "rack")], matcher, now=2.0, timeout=300.0)
    assert fresh.plans["ns/gang:g"].domain_value == "small", "best fit on first sight"
    kept = plan_cluster(
        nodes, usage, [gang("g", 2, 1.0, "rack")], matcher, now=2.0, timeout=300.0, sticky={"ns/gang:g": "big"}
    )
    assert set(kept.plans["ns/gang:g"].slots) <= {f"big-{i}" for i in range(4)}
    gone = plan_cluster(
        nodes, usage, [gang("g", 5, 1.0, "rack")], matcher, now=2.0, timeout=300.0, sticky={"ns/gang:g": "small"}
    )
    assert not gone.plans["ns/gang:g"].feasible, "a remembered domain never makes an impossible plan look possible"
