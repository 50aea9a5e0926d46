"""Prepare failures become Warning events on the claim and its pods, once per failure and window."""

from __future__ import annotations

import uuid
from typing import Any

from dra_driver.background import MAX_QUEUED
from dra_driver.errors import PrepareError
from dra_driver.kubelet.claim import ClaimRef
from dra_driver.kubelet.events import MAX_REMEMBERED, FailureEvents


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def failure(reason: str = "bad_config", pods: tuple[str, ...] = ("trainer-0",)) -> PrepareError:
    error = PrepareError(reason, "claim ns/train (u): status.allocation.devices.config[0]: sharing.mps is wrong")
    error.reserved_for = [{"resource": "pods", "name": pod, "uid": f"uid-{pod}"} for pod in pods]
    error.reserved_for.append({"apiGroup": "batch", "resource": "jobs", "name": "job", "uid": "j"})  # not a pod
    return error


def recorder() -> tuple[FailureEvents, list[tuple[str, dict[str, Any]]], Clock]:
    posted: list[tuple[str, dict[str, Any]]] = []
    clock = Clock()
    events = FailureEvents(lambda namespace, body: posted.append((namespace, body)), "node-a", clock, 600)
    return events, posted, clock


def test_a_failure_is_reported_on_the_claim_and_each_reserving_pod() -> None:
    events, posted, _ = recorder()
    ref = ClaimRef("ns", str(uuid.uuid4()), "train")
    events.prepare_failed(ref, failure(pods=("trainer-0", "trainer-1")))
    events.drain()
    assert [namespace for namespace, _ in posted] == ["ns"] * 3
    involved = [(body["involvedObject"]["kind"], body["involvedObject"]["name"]) for _, body in posted]
    assert involved == [("ResourceClaim", "train"), ("Pod", "trainer-0"), ("Pod", "trainer-1")]
    claim_event = posted[0][1]
    assert claim_event["involvedObject"] == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "name": "train",
        "uid": ref.uid,
        "namespace": "ns",
    }
    assert claim_event["type"] == "Warning" and claim_event["reason"] == "bad_config"
    assert "claim ns/train" in claim_event["message"] and "sharing.mps" in claim_event["message"]
    assert claim_event["source"]["host"] == "node-a"


def test_a_retry_loop_is_reported_once_per_window_and_a_new_reason_at_once() -> None:
    events, posted, clock = recorder()
    ref = ClaimRef("ns", str(uuid.uuid4()), "train")
    for _ in range(50):
        events.prepare_failed(ref, failure(pods=()))
        clock.now += 1
    events.drain()
    assert len(posted) == 1
    events.prepare_failed(ref, failure("api_error", pods=()))
    clock.now += 600
    events.prepare_failed(ref, failure(pods=()))
    events.drain()
    assert [body["reason"] for _, body in posted] == ["bad_config", "api_error", "bad_config"]


def test_memory_and_queue_stay_bounded() -> None:
    events, posted, _ = recorder()
    for _ in range(MAX_REMEMBERED + MAX_QUEUED):
        events.prepare_failed(ClaimRef("ns", str(uuid.uuid4()), "train"), failure(pods=()))
    assert len(events._reported) == MAX_REMEMBERED
    events.drain()
    assert len(posted) == MAX_QUEUED, "what does not fit the queue is dropped, prepare never waits"
