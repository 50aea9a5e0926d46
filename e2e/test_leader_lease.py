"""The preemption leader Lease against the real API server: one holder at a time, a takeover only
after the holder stopped renewing for a whole lease duration (timed on the taker's own clock), and
of replicas racing for a free Lease exactly one wins."""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from extender.preempt.leader import LeaderLease
from testkit.extender_harness import fresh_namespace


@pytest.fixture
def namespace(api: client.ApiClient) -> Iterator[str]:
    with fresh_namespace(api, "leader") as name:
        yield name


def test_one_holder_and_a_takeover_only_after_a_whole_duration_without_renewal(
    api: client.ApiClient, namespace: str
) -> None:
    name = f"lead-{uuid.uuid4().hex[:6]}"
    first = LeaderLease(api, namespace, name, "first", duration_s=2)
    second = LeaderLease(api, namespace, name, "second", duration_s=2)
    assert first.holding()
    assert not second.holding()
    for _ in range(3):  # the holder renews: the other never takes over
        time.sleep(1)
        assert first.holding()
        assert not second.holding()
    leases = client.CoordinationV1Api(api)
    last_renewal = leases.read_namespaced_lease(name, namespace).spec.renew_time  # `first` stops here
    while not second.holding():
        time.sleep(0.2)
    waited = (dt.datetime.now(dt.UTC) - last_renewal).total_seconds()
    assert waited >= 2.0, f"taken over {waited:.1f} s after the last renewal, under the 2 s duration"
    lease = leases.read_namespaced_lease(name, namespace)
    assert lease.spec.holder_identity == "second"
    assert lease.spec.lease_transitions == 1
    time.sleep(1)  # what `first` believed of itself has run out: it asks the API again
    assert not first.holding()


def test_of_replicas_racing_for_a_free_lease_exactly_one_wins(api: client.ApiClient, namespace: str) -> None:
    name = f"race-{uuid.uuid4().hex[:6]}"
    leases = [LeaderLease(api, namespace, name, f"replica-{index}", duration_s=30) for index in range(6)]
    results: dict[str, bool] = {}
    gate = threading.Barrier(len(leases))

    def race(lease: LeaderLease) -> None:
        gate.wait()
        results[lease.identity] = lease.holding()

    threads = [threading.Thread(target=race, args=(lease,)) for lease in leases]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [identity for identity, won in results.items() if won]
    assert len(winners) == 1, results
    holder = client.CoordinationV1Api(api).read_namespaced_lease(name, namespace).spec.holder_identity
    assert holder == winners[0]


def test_a_holder_that_stalled_past_a_takeover_fails_its_fence_and_writes_nothing(
    api: client.ApiClient, namespace: str
) -> None:
    """What a paused process finds on waking: its Lease was taken meanwhile. Its fence (a renewal
    guarded by the resourceVersion of its own last write) is refused, and the new holder keeps it."""
    name = f"fence-{uuid.uuid4().hex[:6]}"
    first = LeaderLease(api, namespace, name, "first", duration_s=2)
    second = LeaderLease(api, namespace, name, "second", duration_s=2)
    assert first.holding()
    time.sleep(1.1)  # past the fence's own window: the next fence writes
    assert first.fence(), "the holder proves it leads"
    while not second.holding():  # `first` stalls: no renewal from here on
        time.sleep(0.2)
    leases = client.CoordinationV1Api(api)
    taken = leases.read_namespaced_lease(name, namespace)
    assert not first.fence()
    after = leases.read_namespaced_lease(name, namespace)
    assert after.spec.holder_identity == "second"
    assert after.metadata.resource_version == taken.metadata.resource_version, "the refused fence wrote nothing"
    assert not first.fence(), "and it stays refused: no resourceVersion left to write with"
    assert second.fence()
