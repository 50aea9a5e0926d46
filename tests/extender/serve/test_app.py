"""The extender's HTTP face: malformed bodies get a 400 naming the field, oversized ones a 413,
a full planning queue a 503; the fast path never waits behind planning, /healthz fails while
a request is stuck, and /metrics counts calls by the path they took."""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import uvicorn
from starlette.types import ASGIApp

from extender.cluster.state import ClusterState
from extender.plan.config import ExtenderConfig
from extender.plan.decide import Decider
from extender.serve.app import RequestLimits, create_app
from nativedra.base.kube.names import DRIVER_NAME
from testkit.extender_requests import CLAIMS, MALFORMED, request_body, request_pod
from testkit.uvicorn_thread import loopback_port, running


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
def serving(app: ASGIApp) -> Iterator[Client]:
    port = loopback_port()
    with running(uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))):
        yield Client(port)


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
    response = client.post("/filter", content=request_body(request_pod(), NodeNames=names))
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
        stuck = _in_background(client, "/filter", request_body(request_pod(spec={"resourceClaims": CLAIMS})), answers)
        time.sleep(0.1)
        started = time.perf_counter()
        fast = client.post("/filter", content=request_body(request_pod()))
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
        body = request_body(request_pod(spec={"resourceClaims": CLAIMS}))
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
    pod = request_pod(spec={"resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "not-yet"}]})
    response = client.post("/filter", content=request_body(pod))
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


def test_metrics_count_each_call_by_verb_and_path_and_each_refusedrequest_body(client: Client) -> None:
    """What an admin graphs: calls by the path they took, their time, and malformed bodies."""
    before = client.get("/metrics").text
    plain = request_body(request_pod())
    assert client.post("/filter", content=plain).status_code == 200
    assert client.post("/prioritize", content=plain).status_code == 200
    assert client.post("/filter", content=request_body({"spec": {}})).status_code == 400
    waiting = request_pod(spec={"resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "not-yet"}]})
    assert client.post("/filter", content=request_body(waiting)).status_code == 200
    after = client.get("/metrics").text

    def grew(name: str, **labels: str) -> float:
        return _sample(after, name, **labels) - _sample(before, name, **labels)

    assert grew("nativedra_extender_requests_total", verb="filter", path="fast") == 1
    assert grew("nativedra_extender_requests_total", verb="filter", path="retry") == 1
    assert grew("nativedra_extender_bad_requests_total", verb="filter") == 1
    assert grew("nativedra_extender_request_seconds_count", verb="prioritize") == 1
    assert grew("nativedra_extender_rejected_nodes_total", path="retry") == 2, "both offered nodes refused"


def test_readyz_waits_for_every_first_list_then_for_the_first_plan() -> None:
    """A replica reports ready only once its first view and plan are made, so the scheduler's first
    call to it never pays for them (1.6 s at 10,000 nodes)."""
    state = ClusterState(DRIVER_NAME)
    decider = Decider(ExtenderConfig())
    with serving(create_app(state, decider)) as client:
        waiting = client.get("/readyz")
        assert waiting.status_code == 503 and "first list" in waiting.text
        for kind in ClusterState.KINDS:
            state.replace(kind, [])
        deadline = time.monotonic() + 10
        while (answer := client.get("/readyz")).status_code != 200:
            assert time.monotonic() < deadline, answer.text
            time.sleep(0.02)
        assert decider.warm.is_set() and decider.plans.snapshot is not None, "planned before ready"


def test_the_verbs_answer_ahead_of_the_app_and_the_app_keeps_the_rest(client: Client) -> None:
    """POSTs of the verbs are answered before FastAPI's stack; any other method or path is the app's."""
    answered = client.post("/filter", request_body(request_pod()))
    assert answered.status_code == 200 and "NodeNames" in answered.json()
    assert client.get("/filter").status_code == 405, "a verb is POSTed only, as before"
    assert client.post("/nothing", b"{}").status_code == 404
    assert client.get("/healthz").status_code == 200
