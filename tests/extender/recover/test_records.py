"""Return records: written while a gang runs whole (keeping nothing), vacated when it loses members
(keeping only nodes still fit for it), read back from their Lease alike, and let go when the object
that would recreate the gang is gone."""

from __future__ import annotations

import dataclasses

from extender.cluster.reservation import Reserved, from_lease, lease_body
from extender.cluster.view import ClusterView
from extender.devices.node_usage import Node, Usage
from extender.pods.gang import JobSetShape
from extender.pods.model import Gang
from extender.recover.records import Step, expects_return, lost_members, next_step, outcome, record, vacated
from testkit.builders import racks
from tests.extender.plan.test_planner import gang as make_gang


def _running(nodes: dict[str, Node]) -> Gang:
    return make_gang("g", 3, 1.0, "rack", bound={"g-0": "a-0", "g-1": "a-1", "g-2": "a-2"})


def _placed(nodes: dict[str, Node], names: list[str]) -> dict[str, Reserved]:
    return {name: Reserved(1, Usage(devices=set(nodes[name].devices))) for name in names}


def _tainted(node: Node, device: str) -> Node:
    devices = {**node.devices, device: dataclasses.replace(node.devices[device], tainted=True)}
    return dataclasses.replace(node, devices=devices)


def _view(**fields: object) -> ClusterView:
    return ClusterView(version=1, nodes={}, usage={}, pods={}, claims={}, templates={}, classes={}, **fields)  # type: ignore[arg-type]


def test_a_record_keeps_nothing_until_vacated_and_reads_back_from_its_lease() -> None:
    nodes = racks({"a": 4})
    running = record(_running(nodes), _placed(nodes, ["a-0", "a-1", "a-2"]), priority=100, now=10.5, hold=60)
    assert running.returning and not running.holds and running.priority == 100
    read = from_lease(
        {**lease_body(running, "me"), "metadata": {**lease_body(running, "me")["metadata"], "namespace": "n"}}
    )
    assert (read.returning, read.vacated, read.holds, set(read.nodes)) == (True, None, False, {"a-0", "a-1", "a-2"})
    gone = vacated(running, {**nodes, "a-1": _tainted(nodes["a-1"], next(iter(nodes["a-1"].devices)))}, 20.5, 60)
    assert gone is not None and set(gone.nodes) == {"a-0", "a-2"}, "the node with a tainted device is not kept"
    assert gone.holds and gone.vacated == 20.5 and gone.expires == 80.5
    body = lease_body(gone, "me")
    again = from_lease({**body, "metadata": {**body["metadata"], "namespace": "n"}})
    assert again.holds and again.vacated == 20.5 and again.expires == 80.5 and set(again.nodes) == {"a-0", "a-2"}
    assert vacated(running, {}, 20.0, 60) is None, "no node left: nothing to keep"


def test_members_finished_are_not_lost_and_a_gang_with_no_pods_is() -> None:
    nodes = racks({"a": 4})
    gang = _running(nodes)
    running = record(gang, _placed(nodes, ["a-0", "a-1", "a-2"]), priority=0, now=10.0, hold=60)
    assert not lost_members(running, gang)
    done = Gang(gang.ref, [dataclasses.replace(gang.members[0], done=True), *gang.members[1:]])
    assert not lost_members(running, done)
    evicted = Gang(gang.ref, gang.members[1:])
    assert lost_members(running, evicted) and lost_members(running, None)


def test_only_a_gang_whose_owner_still_exists_expects_its_pods_back() -> None:
    shape = JobSetShape((("workers", 1, 4, "rack"),))
    assert expects_return(_view(jobsets={("ns", "train"): shape}), "ns/jobset:train") is True
    assert (
        expects_return(_view(jobsets={("ns", "train"): dataclasses.replace(shape, stopping=True)}), "ns/jobset:train")
        is False
    )
    assert expects_return(_view(), "ns/jobset:train") is False, "deleted by its user"
    deleting = {"metadata": {"deletionTimestamp": "2026-12-04T00:00:00Z"}, "spec": {"replicatedJobs": []}}
    assert JobSetShape.from_api(deleting).stopping and JobSetShape.from_api({"spec": {"suspend": True}}).stopping
    assert expects_return(_view(pod_group_min={("ns", "pg"): 2}), "ns/podgroup:pg") is True
    assert expects_return(_view(), "ns/lws:serve/0") is None, "asked of the API"
    assert expects_return(_view(), "ns/gang:g") is False, "no object recreates labelled pods"


def test_the_outcome_says_which_kept_nodes_were_taken_again_and_whether_the_rack_is_the_same() -> None:
    nodes = racks({"a": 4, "b": 4})
    kept = record(_running(nodes), _placed(nodes, ["a-0", "a-2"]), priority=0, now=10.0, hold=60)
    assert outcome(kept, {"a-0", "a-2", "a-3"}, nodes, ("rack",)).label == "same_nodes"
    assert outcome(kept, {"a-0", "a-1", "a-3"}, nodes, ("rack",)).label == "same_domain"
    assert outcome(kept, {"b-0", "b-1", "b-2"}, nodes, ("rack",)).label == "elsewhere"


def test_each_state_of_a_record_leads_to_its_next_step() -> None:
    nodes = racks({"a": 4})
    gang = _running(nodes)
    running = record(gang, _placed(nodes, ["a-0", "a-1", "a-2"]), priority=0, now=10.0, hold=60)
    kept = vacated(running, nodes, 20.0, 60)
    assert kept is not None
    lost = Gang(gang.ref, gang.members[1:])
    done = Gang(gang.ref, [dataclasses.replace(m, done=True) for m in gang.members])
    cases = [
        (running, gang, True, 11.0, Step.RECORD),  # whole: says where (written only if it moved)
        (running, lost, True, 11.0, Step.VACATE),
        (running, lost, None, 11.0, Step.VACATE),  # the caller asks the API about an LWS first
        (running, lost, False, 11.0, Step.GONE),  # its JobSet deleted or suspended
        (running, done, True, 11.0, Step.FINISHED),
        (kept, None, True, 30.0, Step.NOTHING),  # held while its pods are recreated
        (kept, lost, True, 30.0, Step.NOTHING),
        (kept, gang, True, 30.0, Step.RETURNED),  # back whole, even on exactly the kept nodes
        (kept, None, False, 30.0, Step.GONE),
        (kept, lost, True, 80.0, Step.EXPIRED),
    ]
    for record_now, members, owner_expected, now, step in cases:
        assert next_step(record_now, members, owner_expected, now) is step, (members, owner_expected, now)
    # Recreated whole between two looks of the leader: other pods, so a return, not a re-record.
    seen = dataclasses.replace(running, members="before")
    assert next_step(seen, gang, True, 11.0, "before") is Step.RECORD
    assert next_step(seen, gang, True, 11.0, "after") is Step.RETURNED
    body = lease_body(seen, "me")
    assert from_lease({**body, "metadata": {**body["metadata"], "namespace": "n"}}).members == "before"


def test_a_gang_with_a_finished_member_is_whole_and_an_elastic_one_shrinking_to_its_minimum_is_not_lost() -> None:
    nodes = racks({"a": 4})
    gang = _running(nodes)
    kept = vacated(record(gang, _placed(nodes, ["a-0", "a-1", "a-2"]), priority=0, now=10.0, hold=60), nodes, 20.0, 60)
    assert kept is not None
    one_done = Gang(gang.ref, [dataclasses.replace(gang.members[0], done=True), *gang.members[1:]])
    assert next_step(kept, one_done, True, 30.0) is Step.RETURNED, "back whole, one member finished meanwhile"
    elastic = Gang(dataclasses.replace(gang.ref, size=2, minimum=True), gang.members)
    running = record(elastic, _placed(nodes, ["a-0", "a-1", "a-2"]), priority=0, now=10.0, hold=60)
    assert not lost_members(running, Gang(elastic.ref, elastic.members[:2])), "scaled down to its minimum"
    assert lost_members(running, Gang(elastic.ref, elastic.members[:1]))
