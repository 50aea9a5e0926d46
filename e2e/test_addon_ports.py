"""A component whose port another socket took before it could bind is started again on new ports
instead of failing the cluster's start, which returns only once pods are accepted: etcd (the control
plane's components take their ports as flags, so they are picked before the start), and an add-on
controller (CI saw JobSet's webhook port taken while free ports came from the ephemeral range;
another process can still take one)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from kubernetes import client

from nativedra.base.kube.resources import LEADER_WORKER_SETS
from nativedra.cluster import ControlPlane, addons, controlplane, resolve, wait_for
from nativedra.cluster.addons import LWS, start_addon
from nativedra.cluster.controlplane import free_port


def test_a_component_whose_port_was_taken_starts_again_on_new_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    plane = ControlPlane(state_dir=tmp_path / "cluster", binaries=resolve())
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken, monkeypatch.context() as patch:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        first = iter([taken.getsockname()[1]])  # the first port handed out (etcd's) is taken
        patch.setattr(controlplane, "free_port", lambda: next(first, 0) or free_port())
        plane.start()
        assert plane.layout.ports["etcd"] != taken.getsockname()[1]
    retried = [r.getMessage() for r in caplog.records if "again on new ports" in r.getMessage()]
    assert len(retried) == 1 and "etcd exited during start-up" in retried[0], caplog.text
    try:
        api = plane.api_client()
        # A pod created the moment the plane is up is accepted: the start waited for the default
        # ServiceAccount (before, `cluster up` returned first and such a pod was refused).
        pod = {"metadata": {"name": "first"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
        client.CoreV1Api(api).create_namespaced_pod("default", pod)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            ports = iter([taken.getsockname()[1]])  # the first port handed out (the webhook's) is taken
            monkeypatch.setattr(addons, "free_port", lambda: next(ports, 0) or free_port())
            start_addon(plane, api, LWS)
        log = Path(plane.supervisor.named(f"{LWS.name}-controller").log).read_text()
        assert "address already in use" in log, "the first start did not meet the taken port"
        assert len([p for p in plane.supervisor.processes if p.name == f"{LWS.name}-controller"]) == 1
        # The webhooks of the second start answer: a LeaderWorkerSet passes them.
        lws = {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": "probe", "namespace": "default"},
            "spec": {
                "replicas": 1,
                "leaderWorkerTemplate": {
                    "size": 1,
                    "workerTemplate": {"spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}},
                },
            },
        }

        def created() -> bool:
            try:
                LEADER_WORKER_SETS.create(api, lws, "default")
            except client.ApiException as error:
                if error.status == 404:  # the CRD is not served yet
                    return False
                raise  # a webhook that does not answer fails the create with a 500
            return True

        wait_for(created, 30, "a LeaderWorkerSet created through the webhooks")
    finally:
        plane.stop()
