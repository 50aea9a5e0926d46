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
import urllib3
from kubernetes import client

from extender.cluster.reservation import Victim
from extender.plan.config import ExtenderConfig
from extender.plan.decide import Decider
from extender.preempt.leader import FENCE_S, LeaderLease
from extender.preempt.preemptor import Preemption
from nativedra.cluster import ControlPlane
from testkit.admission_webhooks import eviction_webhook, slow_leases
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


def test_a_renewal_the_slowed_api_answers_late_proves_nothing_and_a_proof_lasts_only_its_margin(
    api: client.ApiClient, control_plane: ControlPlane, namespace: str
) -> None:
    """On 424026c a fence trusted a renewal however long it took, and the write it allowed could
    run 10 s more: about a whole lease duration with no margin. Here the API server holds every
    Lease update for seconds (a webhook)."""
    name = f"slow-{uuid.uuid4().hex[:6]}"
    lead = LeaderLease(api, namespace, name, "first", duration_s=6)  # a proof: 4 s from its sending
    assert lead.holding()
    with slow_leases(control_plane, namespace) as slow:
        slow.delay_s = 1.0
        time.sleep(FENCE_S)  # past the last proof's window: the fence renews
        assert lead.fence()
        left = lead.time_left()
        assert 0 < left <= 3.0, "a third of the duration kept, and the renewal's second spent"
        assert lead.prove("a write", 10.0) <= 3.0, "a call's timeout is cut to what its proof has left"
        slow.delay_s = 3.5
        time.sleep(FENCE_S)
        started = time.monotonic()
        assert not lead.fence(), "renewed, but with 0.5 s of its proof left: nothing may be done under it"
        assert time.monotonic() - started >= 3.5
        assert lead.time_left() == 0
        slow.delay_s = 0.0
        assert lead.fence(), "it still holds the Lease: the next quick renewal proves it again"
    assert client.CoordinationV1Api(api).read_namespaced_lease(name, namespace).spec.holder_identity == "first"


def test_an_eviction_made_under_a_proof_gives_up_with_it_and_the_pod_stays(
    api: client.ApiClient, control_plane: ControlPlane, namespace: str
) -> None:
    """The API server holds the eviction (a webhook) past the proof it was sent under: the call
    gives up when the proof ends, and the API server drops the eviction with it."""
    core = client.CoreV1Api(api)
    spec = {"schedulerName": "nobody", "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
    victim = core.create_namespaced_pod(namespace, {"metadata": {"name": "victim"}, "spec": spec})
    lead = LeaderLease(api, namespace, f"evict-{uuid.uuid4().hex[:6]}", "first", duration_s=3)  # proofs of 2 s
    assert lead.holding()
    decider = Decider(ExtenderConfig())
    preemption = Preemption(api, None, decider.config, plans=decider.plans, namespace=namespace, leader=lead)  # type: ignore[arg-type]
    with eviction_webhook(control_plane, namespace, hold_first=True) as evictions:
        timeout = lead.prove("evicting victim", 10.0)
        assert timeout <= 2.0
        started = time.monotonic()
        with pytest.raises(urllib3.exceptions.HTTPError):
            preemption._eviction(Victim(f"{namespace}/victim", victim.metadata.uid), dry_run=False, timeout_s=timeout)
        assert time.monotonic() - started < timeout + 1.0
        assert evictions.held.is_set(), "the eviction reached the API server and was held there"
        evictions.release.set()
        time.sleep(3)
    pod = core.read_namespaced_pod("victim", namespace)
    assert pod.metadata.uid == victim.metadata.uid and pod.metadata.deletion_timestamp is None, "not evicted"
