"""The real kube-scheduler with the nativedra extender: topology domains are honoured, held capacity
survives an extender restart, and scores steer placement. (Gangs never deadlock half-placed where
the scheduler alone leaves one so: e2e/test_two_gangs.py.) On the session's plane, its scheduler
calling the extender for this module."""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from kubernetes import client

from dra_driver.discovery.simulated import load_profile, resolve_profile
from dra_driver.faults import xid_fault
from dra_driver.publishing.publish_config import PublishConfig
from dra_driver.publishing.publisher import SlicePublisher
from dra_driver.publishing.slices import UNHEALTHY_TAINT_KEY, build_slices
from extender.plan.config import RACK_LABEL
from nativedra.base.kube.names import GPU_CLASS
from nativedra.cluster import ControlPlane, create_fake_node, wait_for, wait_pod_scheduled
from nativedra.cluster.extender_wiring import call_extender
from nativedra.cluster.pki import renew_extender_tls, rotate_extender_ca
from nativedra.cluster.waits import unschedulable_message, wait_pod_unschedulable
from nativedra.objects import claim_template, gpu_pod, request
from testkit.extender_harness import ExtenderCluster, bound, extender_cluster, fresh_namespace, gang_pods

TEST_LABEL = "e2e.nativedra.dev/test"


@pytest.fixture(scope="module")
def extended(control_plane: ControlPlane) -> Iterator[ExtenderCluster]:
    root = Path(tempfile.mkdtemp(prefix="nd-ext-", dir="/tmp"))
    try:
        with extender_cluster(
            root,
            {
                "topologyLevels": ["topology.kubernetes.io/zone", RACK_LABEL, "kubernetes.io/hostname"],
                "planTimeoutSeconds": 600,
            },
            shared=control_plane,
        ) as harness:
            yield harness
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def ext(extended: ExtenderCluster) -> Iterator[ExtenderCluster]:
    """The extender cluster; nodes a test adds are removed afterwards."""
    yield extended
    extended.remove_nodes()


@pytest.fixture
def ext_namespace(extended: ExtenderCluster) -> Iterator[str]:
    with fresh_namespace(extended.api, "x") as name:
        yield name


def _settled(api: client.ApiClient, namespace: str, names: list[str], expected_bound: int) -> bool:
    """`expected_bound` pods are bound and every other one has the scheduler's verdict."""
    placed = bound(api, namespace, names)
    waiting = [n for n in names if n not in placed]
    return len(placed) == expected_bound and all(unschedulable_message(api, namespace, n) for n in waiting)


def _reasons(api: client.ApiClient, namespace: str, names: list[str]) -> str:
    return "\n".join(f"{name}: {unschedulable_message(api, namespace, name)}" for name in names)


def _racks(ext: ExtenderCluster, test: str, layout: dict[str, int]) -> dict[str, str]:
    """Node -> rack for a fresh set of 8-GPU nodes labelled into racks."""
    placement = {}
    for rack, count in layout.items():
        for node in ext.add_gpu_nodes(count, {TEST_LABEL: test, RACK_LABEL: rack}):
            placement[node] = rack
    return placement


def test_required_rack_lands_in_one_rack_or_waits_whole_and_preferred_packs_or_spreads(
    ext: ExtenderCluster, ext_namespace: str
) -> None:
    test = uuid.uuid4().hex[:6]
    rack_of = _racks(ext, test, {"rack-1": 3, "rack-2": 2, "rack-3": 1})
    selector = {TEST_LABEL: test}
    required = {"nativedra.dev/topology-required": RACK_LABEL}
    preferred = {"nativedra.dev/topology-preferred": RACK_LABEL}
    core = client.CoreV1Api(ext.api)

    first = gang_pods(ext.api, ext_namespace, "req-a", 3, 8, selector=selector, annotations=required)
    wait_for(lambda: len(bound(ext.api, ext_namespace, first)) == 3, 90, "gang req-a placed")
    assert {rack_of[n] for n in bound(ext.api, ext_namespace, first).values()} == {"rack-1"}

    second = gang_pods(ext.api, ext_namespace, "req-b", 3, 8, selector=selector, annotations=required)
    wait_for(lambda: _settled(ext.api, ext_namespace, second, 0), 90, "gang req-b judged")
    reason = unschedulable_message(ext.api, ext_namespace, "req-b-0") or ""
    assert f"in one {RACK_LABEL}" in reason and "has room for 2" in reason, reason
    for name in second:
        core.delete_namespaced_pod(name, ext_namespace, grace_period_seconds=0)

    packed = gang_pods(ext.api, ext_namespace, "pref-c", 2, 8, selector=selector, annotations=preferred)
    wait_for(lambda: len(bound(ext.api, ext_namespace, packed)) == 2, 90, "gang pref-c placed")
    assert {rack_of[n] for n in bound(ext.api, ext_namespace, packed).values()} == {"rack-2"}, (
        f"best fit: the 2-node rack; racks {rack_of}; the extender's plans:\n{_plans_logged(ext, 'pref-c')}"
    )
    for name in packed:
        core.delete_namespaced_pod(name, ext_namespace, grace_period_seconds=0)

    spread = gang_pods(ext.api, ext_namespace, "pref-d", 3, 8, selector=selector, annotations=preferred)
    wait_for(lambda: len(bound(ext.api, ext_namespace, spread)) == 3, 90, "gang pref-d placed across racks")
    assert {rack_of[n] for n in bound(ext.api, ext_namespace, spread).values()} == {"rack-2", "rack-3"}


def _plans_logged(ext: ExtenderCluster, gang: str) -> str:
    return "\n".join(line for line in ext.log.read_text(errors="replace").splitlines() if gang in line)


def test_restarted_extender_keeps_the_held_capacity_and_the_gang_completes_in_its_domain(
    ext: ExtenderCluster, ext_namespace: str
) -> None:
    test = uuid.uuid4().hex[:6]
    rack_of = _racks(ext, test, {"rack-1": 4, "rack-2": 2})
    selector = {TEST_LABEL: test}
    required = {"nativedra.dev/topology-required": RACK_LABEL}
    first_half = gang_pods(
        ext.api, ext_namespace, "big", 4, 8, selector=selector, annotations=required, members=range(2)
    )
    wait_for(lambda: len(bound(ext.api, ext_namespace, first_half)) == 2, 90, "2 of 4 members bound")

    ext.kill_extender()
    ext.start_extender()  # rebuilt from the API alone
    others = []
    for index in range(3):
        claim_template(ext.api, ext_namespace, f"solo-{index}", [request("gpus", GPU_CLASS, count=8)])
        gpu_pod(ext.api, ext_namespace, f"solo-{index}", f"solo-{index}", node_selector=selector)
        others.append(f"solo-{index}")
    wait_for(
        lambda: _settled(ext.api, ext_namespace, others, 2),
        90,
        "2 solo pods placed, 1 waiting",
        lambda: _reasons(ext.api, ext_namespace, others),
    )
    assert {rack_of[n] for n in bound(ext.api, ext_namespace, others).values()} == {"rack-2"}
    waiting = next(n for n in others if n not in bound(ext.api, ext_namespace, others))
    assert "held for gang(s)" in (unschedulable_message(ext.api, ext_namespace, waiting) or "")

    second_half = gang_pods(
        ext.api, ext_namespace, "big", 4, 8, selector=selector, annotations=required, members=range(2, 4)
    )
    wait_for(lambda: len(bound(ext.api, ext_namespace, second_half)) == 2, 90, "the gang completes")
    assert {rack_of[n] for n in bound(ext.api, ext_namespace, first_half + second_half).values()} == {"rack-1"}


def test_fast_path_and_malformed_calls(ext: ExtenderCluster, ext_namespace: str) -> None:
    pod = {"metadata": {"name": "web", "namespace": ext_namespace}, "spec": {"containers": [{"name": "c"}]}}
    status, answer = ext.post("filter", json.dumps({"Pod": pod, "NodeNames": ["a", "b", "c"]}).encode())
    assert status == 200 and answer["NodeNames"] == ["a", "b", "c"] and answer["FailedNodes"] == {}
    nodes = {"items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]}
    status, answer = ext.post("filter", json.dumps({"Pod": pod, "Nodes": nodes}).encode())
    assert status == 200 and [n["metadata"]["name"] for n in answer["Nodes"]["items"]] == ["a", "b"]

    status, answer = ext.post("filter", b"{not json")
    assert status == 400 and "not JSON" in answer["Error"]
    status, answer = ext.post("prioritize", json.dumps({"NodeNames": ["a"]}).encode())
    assert status == 400 and "'Pod'" in answer["Error"]
    assert ext.ready(), "the extender keeps serving after bad input"

    ext.add_gpu_nodes(1)
    client.CoreV1Api(ext.api).create_namespaced_pod(
        ext_namespace,
        {"metadata": {"name": "web"}, "spec": {"containers": [{"name": "c", "image": "registry.invalid/web"}]}},
    )
    assert wait_pod_scheduled(ext.api, ext_namespace, "web", 60)


def test_a_gang_that_tolerates_a_gpus_taint_is_planned_onto_it_and_one_that_does_not_waits(
    ext: ExtenderCluster, ext_namespace: str
) -> None:
    """The scheduler's DRA allocator gives a device with a NoSchedule taint to a request that
    tolerates it (DRADeviceTaints: GA and on by default since 1.37), e.g. diagnostics on a GPU the
    plugin marked unhealthy. The extender plans gangs with the same rule (issue 48: it ignored a
    claim's tolerations and so held such a gang off the node): 2 pods x 4 GPUs on a node of 7
    healthy GPUs and a failed one fit only if they tolerate the taint."""
    (node,) = ext.add_gpu_nodes(1)
    ext.fail_gpu(node, 3, xid_fault(79), effect="NoSchedule")
    here = {"kubernetes.io/hostname": node}
    plain = gang_pods(ext.api, ext_namespace, "plain", 2, 4, selector=here)
    for name in plain:
        assert "gang" in wait_pod_unschedulable(ext.api, ext_namespace, name, 60)
    assert not bound(ext.api, ext_namespace, plain), "7 healthy GPUs hold one member, not the gang"
    for name in plain:
        client.CoreV1Api(ext.api).delete_namespaced_pod(name, ext_namespace, grace_period_seconds=0)
    tolerating = [{"key": UNHEALTHY_TAINT_KEY, "operator": "Exists"}]
    claim_template(ext.api, ext_namespace, "diag-gpus", [request("gpus", GPU_CLASS, count=4, tolerations=tolerating)])
    diagnostics = gang_pods(ext.api, ext_namespace, "diag", 2, 4, selector=here)
    wait_for(
        lambda: len(bound(ext.api, ext_namespace, diagnostics)) == 2,
        60,
        "the tolerating gang placed on the node with the failed GPU",
        lambda: _reasons(ext.api, ext_namespace, diagnostics),
    )
    claims = client.CustomObjectsApi(ext.api).list_namespaced_custom_object(
        "resource.k8s.io", "v1", ext_namespace, "resourceclaims"
    )["items"]
    devices = {
        result["device"]
        for claim in claims
        if claim["metadata"]["name"].startswith("diag-")
        for result in claim["status"]["allocation"]["devices"]["results"]
    }
    assert len(devices) == 8 and "gpu-3" in devices, devices


def test_scores_prefer_one_numa_node_and_partly_used_nodes(
    ext: ExtenderCluster, ext_namespace: str, tmp_path: Path
) -> None:

    test = uuid.uuid4().hex[:6]
    document = yaml.safe_load(resolve_profile("l4-4x").read_text())
    l4s = list(document["gpus"])

    def node_with(numa: list[int], role: str) -> str:
        name = f"{role}-{uuid.uuid4().hex[:5]}"
        document["gpus"] = [{**l4s[i], "numaNode": n} for i, n in enumerate(numa)]
        profile = tmp_path / f"{name}.yaml"
        profile.write_text(yaml.safe_dump(document))
        create_fake_node(ext.api, name, {TEST_LABEL: test, "role": role})
        SlicePublisher(ext.api, name).reconcile(build_slices(load_profile(profile), PublishConfig(fractions=()), name))
        ext.nodes.append(name)
        return name

    split = node_with([0, 1], "numa")
    together = node_with([0, 0], "numa")
    claim_template(ext.api, ext_namespace, "two", [request("gpus", GPU_CLASS, count=2)])
    gpu_pod(ext.api, ext_namespace, "pair", "two", node_selector={TEST_LABEL: test, "role": "numa"})
    assert wait_pod_scheduled(ext.api, ext_namespace, "pair", 60) == together, f"not the split node {split}"

    partly_used = node_with([0, 0, 0, 0], "pack")
    node_with([0, 0, 0, 0], "pack")
    claim_template(ext.api, ext_namespace, "one", [request("gpus", GPU_CLASS, count=1)])
    gpu_pod(ext.api, ext_namespace, "first", "two", node=partly_used)
    assert wait_pod_scheduled(ext.api, ext_namespace, "first", 60) == partly_used
    gpu_pod(ext.api, ext_namespace, "single", "one", node_selector={TEST_LABEL: test, "role": "pack"})
    assert wait_pod_scheduled(ext.api, ext_namespace, "single", 60) == partly_used


def _serving_serial(ext: ExtenderCluster) -> int:
    """The serial of the certificate the extender serves a new handshake."""
    with (
        socket.create_connection(("127.0.0.1", ext.port), timeout=10) as raw,
        ext.client_context().wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_the_ca_rotates_under_load_and_no_pod_fails_for_tls(ext: ExtenderCluster, ext_namespace: str) -> None:
    """`rotate-ca`'s three steps on the running extender and the real kube-scheduler while 1-GPU pods
    keep coming: start (trust bundle old + new; the scheduler restarted, as it reads its caFile only
    at start), switch (both leaves from the new CA) and finish (the new CA alone; the scheduler
    restarted). Every pod is bound with no FailedScheduling about TLS; the extender serves a leaf of
    the new CA and refuses a client certificate of the old one."""
    api, ns = ext.api, ext_namespace
    test = uuid.uuid4().hex[:6]
    ext.add_gpu_nodes(4, {TEST_LABEL: test})
    claim_template(api, ns, "one", [request("gpu", GPU_CLASS, count=1)])
    old_ca = x509.load_pem_x509_certificate(ext.tls.ca_cert.read_bytes())
    old_client = (ext.tls.client_cert.read_bytes(), ext.tls.client_key.read_bytes())
    steps = {8: "start", 16: "switch", 24: "finish"}
    names = [f"r{index}" for index in range(32)]
    for index, name in enumerate(names):
        if index in steps:
            rotate_extender_ca(ext.tls, steps[index])
            if steps[index] != "switch":
                call_extender(ext.plane, ext.port, ext.tls)  # a new caFile takes a scheduler restart
        gpu_pod(api, ns, name, "one", node_selector={TEST_LABEL: test})
        time.sleep(0.2)
    wait_for(lambda: len(bound(api, ns, names)) == len(names), 180, "every pod bound", lambda: _reasons(api, ns, names))
    failures = [
        event.message
        for event in client.CoreV1Api(api).list_namespaced_event(ns, field_selector="reason=FailedScheduling").items
    ]
    assert not [m for m in failures if any(word in (m or "").lower() for word in ("tls", "x509", "certificate"))]
    (new_ca_cert,) = x509.load_pem_x509_certificates(ext.tls.ca_cert.read_bytes())
    assert new_ca_cert != old_ca
    wait_for(lambda: _serving_issuer_key(ext) == _key_id(new_ca_cert), 10, "the extender serving a leaf of the new CA")
    with tempfile.TemporaryDirectory() as scratch:
        cert, key = Path(scratch) / "old.crt", Path(scratch) / "old.key"
        cert.write_bytes(old_client[0])
        key.write_bytes(old_client[1])
        context = ssl.create_default_context(cafile=str(ext.tls.ca_cert))
        context.load_cert_chain(cert, key)
        with pytest.raises((ssl.SSLError, ConnectionError)):
            _handshake(ext, context)
    _handshake(ext, ext.client_context())  # the same handshake with the new client pair is served


def _key_id(ca: x509.Certificate) -> bytes:
    return ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest


def _serving_issuer_key(ext: ExtenderCluster) -> bytes | None:
    """The key identifier of the CA that signed the leaf the extender serves a new handshake."""
    with (
        socket.create_connection(("127.0.0.1", ext.port), timeout=10) as raw,
        ext.client_context().wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    leaf = x509.load_der_x509_certificate(der)
    return leaf.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value.key_identifier


def _handshake(ext: ExtenderCluster, context: ssl.SSLContext) -> None:
    """A TLS 1.3 server checks the client's certificate after the handshake: read, so a refusal shows."""
    with (
        socket.create_connection(("127.0.0.1", ext.port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        if not tls.recv(1):
            raise ConnectionError("closed by the extender")


def test_certificates_rotate_under_load_and_no_pod_fails_for_tls(ext: ExtenderCluster, ext_namespace: str) -> None:
    """1-GPU pods created throughout a renewal of the extender's serving certificate and the
    scheduler's client certificate (every file swapped at once, as a mounted Secret is): every pod
    is bound, none has a FailedScheduling about TLS, and new handshakes get the new certificate."""
    api, ns = ext.api, ext_namespace
    test = uuid.uuid4().hex[:6]
    ext.add_gpu_nodes(3, {TEST_LABEL: test})
    claim_template(api, ns, "one", [request("gpu", GPU_CLASS, count=1)])
    before = _serving_serial(ext)
    names = [f"p{index}" for index in range(20)]
    for index, name in enumerate(names):
        if index == len(names) // 2:
            renew_extender_tls(ext.tls)
        gpu_pod(api, ns, name, "one", node_selector={TEST_LABEL: test})
        time.sleep(0.2)
    wait_for(lambda: len(bound(api, ns, names)) == len(names), 120, "every pod bound", lambda: _reasons(api, ns, names))
    wait_for(lambda: _serving_serial(ext) != before, 10, "the extender serving its new certificate")
    failures = [
        event.message
        for event in client.CoreV1Api(api).list_namespaced_event(ns, field_selector="reason=FailedScheduling").items
    ]
    assert not [m for m in failures if any(word in (m or "").lower() for word in ("tls", "x509", "certificate"))]
