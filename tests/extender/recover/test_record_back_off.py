"""A return record its Lease cannot hold is never sent, and its gang backs off: on 424026c the
record was built, refused by the API and searched for again every second, for ever."""

from __future__ import annotations

import functools

from kubernetes import client

from extender.cluster.reservation import Reserved
from extender.devices.node_usage import Usage
from extender.plan.config import ExtenderConfig
from extender.plan.decide import Decider
from extender.preempt.leader import LeaderLease
from extender.recover.records import record
from extender.recover.returns import BACK_OFF_MAX_S, RecordTooLargeError, Returns
from tests.extender.plan.test_planner import gang as make_gang


def _returns() -> Returns:
    decider = Decider(ExtenderConfig())
    api = client.ApiClient()  # no server behind it: a record too large is refused before it is asked anything
    leader = LeaderLease(api, "ns", "lead", "replica-0")
    return Returns(api, None, decider.config, plans=decider.plans, namespace="ns", leader=leader)  # type: ignore[arg-type]


def test_a_record_too_large_for_its_lease_backs_its_gang_off_and_never_reaches_the_api() -> None:
    gang = make_gang("g", 1, 1.0, None)
    # 1,000 nodes of 120 devices named apart per node (no two nodes' lists alike to compress).
    nodes = {
        f"n-{n}": Reserved(1, Usage({f"gpu.nativedra.dev/n-{n}/dev-{n * 7919 + d}" for d in range(120)}))
        for n in range(1000)
    }
    big = record(gang, nodes, priority=0, now=0.0, hold=300)
    returns = _returns()
    tries: list[float] = []

    def write(at: float) -> None:
        tries.append(at)
        returns._write(big, None)

    for at in (0.0, 1.0, BACK_OFF_MAX_S - 1, BACK_OFF_MAX_S + 1):
        returns._each(gang.ref.key, at, functools.partial(write, at))
    assert tries == [0.0, BACK_OFF_MAX_S + 1], "tried once, then only after the back-off"
    try:
        returns._write(big, None)
    except RecordTooLargeError as error:
        assert "KiB, over the 256 KiB a Lease's annotations may hold" in str(error)
    else:
        raise AssertionError("a record too large was not refused")
