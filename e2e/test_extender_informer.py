"""The extender's informer against the real API server: a watch the server ends is resumed, not
re-listed (a re-list makes the next plan start from scratch, seconds at 5,000 nodes), and no
event is lost across the resumptions."""

from __future__ import annotations

import threading
import time

from kubernetes import client

from extender.informer import run_informer
from extender.state import ClusterState
from kube.names import DRIVER_NAME
from nativedra.cluster import wait_for


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
