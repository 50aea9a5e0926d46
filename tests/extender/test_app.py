"""The extender's HTTP face: malformed bodies get a 400 naming the field, oversized ones a 413,
a full planning queue a 503; the fast path never waits behind planning, /healthz fails while
a request is stuck, and /metrics counts calls by the path they took."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI

from extender.app import RequestLimits, create_app
from extender.config import ExtenderConfig
from extender.decide import Decider
from extender.gang import GANG, GANG_SIZE
from extender.state import ClusterState
from kube.names import DRIVER_NAME

GANG_LABELS = {GANG: "g", GANG_SIZE: "2"}
CLAIMS = [{"name": "gpus", "resourceClaimTemplateName": "t"}]


def _pod(**parts: Any) -> dict[str, Any]:
    metadata = {"name": "p", "namespace": "ns", "uid": "u", **parts.pop("metadata", {})}
    return {"metadata": metadata, "spec": {"containers": [], **parts.pop("spec", {})}, **parts}


def _body(pod: Any, **rest: Any) -> bytes:
    return json.dumps({"Pod": pod, "NodeNames": ["n1", "n2"], **rest}).encode()


DEEP = b'{"Pod": ' + json.dumps(_pod()).encode() + b', "NodeNames": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
MALFORMED: dict[str, tuple[bytes, str]] = {
    "pod without metadata": (_body({"spec": {}}), "Pod.metadata"),
    "pod without namespace": (_body({"metadata": {"name": "p"}, "spec": {}}), "Pod.metadata.namespace"),
    "labels as a list": (_body(_pod(metadata={"labels": ["a"]})), "Pod.metadata.labels"),
    "resourceClaims as a dict": (_body(_pod(spec={"resourceClaims": {"gpus": {}}})), "Pod.spec.resourceClaims"),
    "bad Nodes items": (
        json.dumps({"Pod": _pod(), "Nodes": {"items": [{"metadata": {"name": "a"}}, {"metadata": {}}]}}).encode(),
        "Nodes.items.1.metadata.name",
    ),
    "lone surrogate in a node name": (_body(_pod(), NodeNames=["n1", "n\ud800"]), "NodeNames.1"),
    "a node name that is not a string": (_body(_pod(), NodeNames=["n1", 7]), "NodeNames.1"),
    "invalid UTF-8 in a node name": (_body(_pod(), NodeNames=["n1", "nX"]).replace(b"nX", b"n\xff"), "NodeNames.1"),
    "100k-deep nesting": (DEEP, "nests deeper than"),
    "gang pod in phase Failed": (
        _body(_pod(metadata={"labels": GANG_LABELS}, spec={"resourceClaims": CLAIMS}, status={"phase": "Failed"})),
        "Pod.status.phase",
    ),
}


def _state() -> ClusterState:
    state = ClusterState(DRIVER_NAME)
    for kind in ClusterState.KINDS:
        state.replace(kind, [])
    return state


@pytest.fixture
def state() -> ClusterState:
    return _state()


@dataclass(frozen=True)
class Answer:
    status_code: int
    text: str

    def json(self) -> Any:
        return json.loads(self.text)


@dataclass(frozen=True)
class Client:
    """Plain HTTP/1.1 to a real uvicorn server (what the scheduler speaks), one connection per call."""

    port: int

    def request(self, method: str, path: str, body: bytes | None = None) -> Answer:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request(method, path, body=body, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            return Answer(response.status, response.read().decode())
        finally:
            connection.close()

    def post(self, path: str, content: bytes) -> Answer:
        return self.request("POST", path, content)

    def get(self, path: str) -> Answer:
        return self.request("GET", path)


@contextlib.contextmanager
def serving(app: FastAPI) -> Iterator[Client]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield Client(port)
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture
def client(state: ClusterState) -> Iterator[Client]:
    with serving(create_app(state, Decider(ExtenderConfig()))) as test_client:
        yield test_client


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
@pytest.mark.parametrize("shape", sorted(MALFORMED))
def test_a_malformed_body_gets_a_400_that_names_the_field(client: Client, verb: str, shape: str) -> None:
    body, field = MALFORMED[shape]
    response = client.post(f"/{verb}", content=body)
    assert response.status_code == 400, response.text
    assert field in response.json()["Error"]


def test_a_body_over_the_cluster_derived_limit_gets_a_413_before_it_is_parsed(client: Client) -> None:
    names = [f"node-{index:07d}-{'x' * 100}" for index in range(20_000)]  # ~2.4 MB for an empty cluster
    response = client.post("/filter", content=_body(_pod(), NodeNames=names))
    assert response.status_code == 413 and "limit of 1048576" in response.json()["Error"]
    assert RequestLimits().body_limit(5000) == 5000 * 1024, "5,000 node names (~150 KB) fit with room to spare"


@pytest.fixture
def held(state: ClusterState) -> Iterator[threading.Event]:
    """Planning is stuck: the cluster state's lock is held (as by a long re-list) until released."""
    release = threading.Event()

    def hold() -> None:
        with state.lock:
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    yield release
    release.set()
    holder.join()


def _in_background(client: Client, path: str, body: bytes, answers: list[int]) -> threading.Thread:
    thread = threading.Thread(target=lambda: answers.append(client.post(path, content=body).status_code), daemon=True)
    thread.start()
    return thread


def test_the_fast_path_and_healthz_answer_while_planning_is_stuck(state: ClusterState, held: threading.Event) -> None:
    limits = RequestLimits(stuck_after_seconds=0.3)
    with serving(create_app(state, Decider(ExtenderConfig()), limits)) as client:
        answers: list[int] = []
        stuck = _in_background(client, "/filter", _body(_pod(spec={"resourceClaims": CLAIMS})), answers)
        time.sleep(0.1)
        started = time.perf_counter()
        fast = client.post("/filter", content=_body(_pod()))
        assert fast.status_code == 200 and fast.json()["NodeNames"] == ["n1", "n2"]
        assert time.perf_counter() - started < 1, "a pod without claims waited behind planning"
        assert client.get("/healthz").status_code == 200, "in flight for 0.1 s is not stuck"
        time.sleep(0.4)
        unhealthy = client.get("/healthz")
        assert unhealthy.status_code == 503 and "in flight" in unhealthy.text
        held.set()
        stuck.join(5)
        assert answers == [200] and client.get("/healthz").status_code == 200


def test_a_full_planning_queue_answers_503_at_once(state: ClusterState, held: threading.Event) -> None:
    with serving(create_app(state, Decider(ExtenderConfig()), RequestLimits(planning_queue=2))) as client:
        answers: list[int] = []
        body = _body(_pod(spec={"resourceClaims": CLAIMS}))
        waiting = [_in_background(client, "/prioritize", body, answers) for _ in range(2)]
        time.sleep(0.2)
        started = time.perf_counter()
        assert client.post("/prioritize", content=body).status_code == 503
        assert time.perf_counter() - started < 1
        held.set()
        for thread in waiting:
            thread.join(5)
        assert answers == [200, 200]


def test_an_answer_waiting_for_an_unseen_object_is_an_error_the_scheduler_retries(client: Client) -> None:
    """A rejection parks the pod until some cluster event (up to 5 minutes); an extender error is
    retried after a short backoff, which is what "not seen yet" needs."""
    pod = _pod(spec={"resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "not-yet"}]})
    response = client.post("/filter", content=_body(pod))
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["Error"] == "waiting to see ResourceClaimTemplate ns/not-yet"
    assert answer["NodeNames"] is None and answer["FailedNodes"] == {}


def _sample(text: str, name: str, **labels: str) -> float:
    """One sample's value from a Prometheus text exposition (0 when absent)."""
    wanted = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"{name}{{") and line.split("}")[0].removeprefix(f"{name}{{") == wanted:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_metrics_count_each_call_by_verb_and_path_and_each_refused_body(client: Client) -> None:
    """What an admin graphs: calls by the path they took, their time, and malformed bodies."""
    before = client.get("/metrics").text
    plain = _body(_pod())
    assert client.post("/filter", content=plain).status_code == 200
    assert client.post("/prioritize", content=plain).status_code == 200
    assert client.post("/filter", content=_body({"spec": {}})).status_code == 400
    waiting = _pod(spec={"resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "not-yet"}]})
    assert client.post("/filter", content=_body(waiting)).status_code == 200
    after = client.get("/metrics").text

    def grew(name: str, **labels: str) -> float:
        return _sample(after, name, **labels) - _sample(before, name, **labels)

    assert grew("nativedra_extender_requests_total", verb="filter", path="fast") == 1
    assert grew("nativedra_extender_requests_total", verb="filter", path="retry") == 1
    assert grew("nativedra_extender_bad_requests_total", verb="filter") == 1
    assert grew("nativedra_extender_request_seconds_count", verb="prioritize") == 1
    assert grew("nativedra_extender_rejected_nodes_total", path="retry") == 2, "both offered nodes refused"
