"""The extender's informer against the real API server: a watch the server ends is resumed, not
re-listed (a re-list makes the next plan start from scratch, seconds at 5,000 nodes), and no
event is lost across the resumptions; a resourceVersion the server no longer has (410 Gone, after
etcd compacted it) is listed again, and the state ends as the API's."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

import pytest
from kubernetes import client

from extender.cluster import informer as informer_module
from extender.cluster.informer import run_informer
from extender.cluster.state import ClusterState
from nativedra.base.kube.names import DRIVER_NAME
from nativedra.cluster import ControlPlane, wait_for
from testkit.etcd import compact_and_restart


def _gang_pod(name: str) -> dict[str, object]:
    """A pod the state keeps (a gang member) that no node will take."""
    return {
        "metadata": {"name": name, "labels": {"nativedra.dev/gang": "g", "nativedra.dev/gang-size": "99"}},
        "spec": {
            "nodeSelector": {"nativedra.dev/no-such-node": "x"},
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
        },
    }


def test_watches_the_server_ends_are_resumed_without_a_relist(api: client.ApiClient, namespace: str) -> None:
    state = ClusterState(DRIVER_NAME)
    stop = threading.Event()
    informer = threading.Thread(target=run_informer, args=(api, state, "pods", stop, 1), daemon=True)
    informer.start()
    try:
        wait_for(lambda: "pods" not in state.missing(), 30, "the first list of pods")
        listed_at = state.version
        core = client.CoreV1Api(api)
        names = [f"m{i}" for i in range(8)]
        for name in names:  # one every 0.6 s: across several 1 s watches the server ends
            core.create_namespaced_pod(namespace, _gang_pod(name))
            time.sleep(0.6)
        core.delete_namespaced_pod(names[0], namespace, grace_period_seconds=0)
        expected = {(namespace, name) for name in names[1:]}
        wait_for(
            lambda: {k for k in state.objects["pods"] if k[0] == namespace} == expected,
            30,
            "every created pod, and not the deleted one, in the informer's state",
        )
        changes = state.changes(listed_at, state.version)
        # A re-list resets the journal: then the changes since the first list are unknown (None).
        assert changes is not None, "the informer listed pods again although no watch failed"
        assert {key for kind, key in changes if kind == "pods"} >= expected | {(namespace, names[0])}
    finally:
        stop.set()
        informer.join(timeout=10)


class _Gate:
    """Wraps the informer's lister: while closed, a watch call waits (parked) before it reaches
    the server, holding the resourceVersion it is about to resume from."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.open.set()
        self.parked = threading.Event()
        self.versions: list[str] = []

    def wrap(self, lister: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if kwargs.get("watch"):
                if not self.open.is_set():
                    self.versions.append(kwargs["resource_version"])
                    self.parked.set()
                self.open.wait()
            return lister(*args, **kwargs)

        return call


def _gone_for(api: client.ApiClient, namespace: str, version: str) -> bool:
    """A watch of pods from `version` is answered 410 Gone (not 429 while the cache re-lists)."""
    try:
        response = client.CoreV1Api(api).list_namespaced_pod(
            namespace, watch=True, resource_version=version, timeout_seconds=1, _preload_content=False
        )
    except client.ApiException:
        return False
    try:
        first = next(iter(response.read().splitlines()), b"")
    finally:
        response.release_conn()
    event = json.loads(first) if first else {}
    return bool(event.get("type") == "ERROR" and event["object"].get("code") == 410)


def test_a_version_etcd_compacted_away_is_listed_again_and_the_state_ends_as_the_apis(
    api: client.ApiClient,
    namespace: str,
    control_plane: ControlPlane,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The informer is parked between two watches while a pod is created, another deleted, and etcd
    compacted past the version it holds (and the API server restarted, so its cache starts from now):
    resuming, it is told 410, lists again, and holds exactly the pods the API has."""
    gate = _Gate()
    real_lister = informer_module.lister_of
    monkeypatch.setattr(informer_module, "lister_of", lambda *args: gate.wrap(real_lister(*args)))
    caplog.set_level(logging.INFO, logger=informer_module.__name__)
    state = ClusterState(DRIVER_NAME)
    stop = threading.Event()
    informer = threading.Thread(target=run_informer, args=(api, state, "pods", stop, 1), daemon=True)
    informer.start()
    core = client.CoreV1Api(api)
    try:
        wait_for(lambda: "pods" not in state.missing(), 30, "the first list of pods")
        core.create_namespaced_pod(namespace, _gang_pod("before"))
        wait_for(lambda: (namespace, "before") in state.objects["pods"], 30, "the first pod in the state")
        listed_at = state.version

        gate.open.clear()
        assert gate.parked.wait(10), "the informer's 1 s watch ended and it parked before the next"
        core.create_namespaced_pod(namespace, _gang_pod("during"))
        core.delete_namespaced_pod("before", namespace, grace_period_seconds=0)
        wait_for(
            lambda: [p.metadata.name for p in core.list_namespaced_pod(namespace).items] == ["during"],
            30,
            "the API to hold only the pod created while the informer was parked",
        )
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "later"}})  # a write after the pods'
        compact_and_restart(control_plane)
        parked_at = gate.versions[-1]
        wait_for(lambda: _gone_for(api, namespace, parked_at), 60, f"resourceVersion {parked_at} to be gone")
        gate.open.set()

        wait_for(
            lambda: {k for k in state.objects["pods"] if k[0] == namespace} == {(namespace, "during")},
            30,
            "the re-listed state to hold the new pod and not the deleted one",
        )
        gone = [r.getMessage() for r in caplog.records if "resourceVersion gone" in r.getMessage()]
        assert gone and gone[0].startswith("pods watch:"), caplog.text
        informer_log = [r for r in caplog.records if r.name == informer_module.__name__]
        other = [r.getMessage() for r in informer_log if r.levelno >= logging.WARNING]
        assert other == [], "re-listed through the 410 path only"
        assert state.changes(listed_at, state.version) is None, "a re-list resets the journal"
    finally:
        gate.open.set()
        stop.set()
        informer.join(timeout=10)
