"""A control plane whose real kube-scheduler calls a real `nativedra extender` process."""

from __future__ import annotations

import contextlib
import json
import re
import ssl
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

from dra_driver.discovery.simulated import load_profile, resolve_profile
from dra_driver.inventory import Fault
from dra_driver.publishing.publish_config import PublishConfig
from dra_driver.publishing.publisher import SlicePublisher
from dra_driver.publishing.slices import build_slices
from nativedra.base.kube.names import GPU_CLASS
from nativedra.base.kube.resources import RESOURCE_CLAIMS
from nativedra.cluster import ControlPlane, commands, create_fake_node, resolve, wait_for
from nativedra.cluster.components import DEFAULTS, Features
from nativedra.cluster.controlplane import free_port
from nativedra.cluster.extender_wiring import call_extender, stop_calling_extender
from nativedra.cluster.pki import ExtenderTls, extender_tls
from nativedra.cluster.waits import http_ok, unschedulable_message
from nativedra.objects import apply_file, claim_template, device_classes, gpu_pod, native_pod_group, request
from testkit.tcp_balancer import TcpBalancer

BOUND = re.compile(r"extender serving on [^\s:]+:(\d+)")  # its first address is its own, then the probes'


@dataclass
class ExtenderCluster:
    """The real scheduler calls the extender over mutual TLS, as in a cluster (`tls`'s client
    certificate is the scheduler's); probes use the plain-HTTP probe port. `port` 0: the extender
    binds a port the kernel picks and says which in its log, read into `port` at the first start;
    a restart binds that port again, as a Service keeps its address."""

    plane: ControlPlane
    api: client.ApiClient
    port: int
    probe_port: int
    tls: ExtenderTls
    config_file: Path
    log: Path
    process: subprocess.Popen[bytes] | None = None
    nodes: list[str] = field(default_factory=list)
    # The extender's own namespace (its preemption Leases), one per harness so tests sharing a
    # plane never see each other's; "" leaves the extender's default.
    namespace: str = ""

    def start_extender(self) -> None:
        tls_flags = [
            f"--tls-cert-file={self.tls.serving_cert}",
            f"--tls-key-file={self.tls.serving_key}",
            f"--client-ca-file={self.tls.ca_cert}",
            f"--probe-port={self.probe_port}",
            *([f"--namespace={self.namespace}"] if self.namespace else []),
        ]
        with self.log.open("ab") as log:
            offset = log.tell()
            self.process = subprocess.Popen(
                commands.extender(self.plane.kubeconfig, self.port, "--config", str(self.config_file), *tls_flags),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_for(self.ready, 60, "the extender's /readyz", self.log.read_text)
        if self.port == 0:
            self.port = wait_for(
                lambda: self._bound_port(offset), 10, "the extender's port in its log", self.log.read_text
            )

    def _bound_port(self, offset: int) -> int | None:
        """The port the extender started at `offset` of its log says it serves on, once it says so."""
        with self.log.open("rb") as log:
            log.seek(offset)
            found = BOUND.search(log.read().decode(errors="replace"))
        return int(found.group(1)) if found else None

    def ready(self) -> bool:
        return http_ok(f"http://127.0.0.1:{self.probe_port}/readyz")

    def metrics(self) -> str:
        """The extender's Prometheus text, from its probe port."""
        url = f"http://127.0.0.1:{self.probe_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            return str(response.read().decode())

    def client_context(self) -> ssl.SSLContext:
        """TLS as the scheduler speaks it: trusts the extender's CA, presents the client certificate."""
        context = ssl.create_default_context(cafile=str(self.tls.ca_cert))
        context.load_cert_chain(self.tls.client_cert, self.tls.client_key)
        return context

    def post(self, verb: str, body: bytes) -> tuple[int, Any]:
        """POST an extender verb as the scheduler would; (status, decoded JSON answer)."""
        request = urllib.request.Request(
            f"https://127.0.0.1:{self.port}/{verb}", data=body, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=10, context=self.client_context()) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    @contextlib.contextmanager
    def scheduler_alone(self) -> Iterator[None]:
        """The scheduler restarted without this extender (its own plugins only) for the block, and
        with it again afterwards; the extender process keeps running, uncalled."""
        stop_calling_extender(self.plane)
        try:
            yield
        finally:
            call_extender(self.plane, self.port, self.tls)

    def kill_extender(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def add_gpu_nodes(self, count: int, labels: dict[str, str] | None = None, profile: str = "a100-8x") -> list[str]:
        """Nodes of 8 whole GPUs (fractions off), published directly with the plugin's builder."""
        inventory = load_profile(resolve_profile(profile))
        names = []
        for _ in range(count):
            name = f"gpu-{uuid.uuid4().hex[:6]}"
            create_fake_node(self.api, name, labels)
            SlicePublisher(self.api, name).reconcile(build_slices(inventory, PublishConfig(fractions=()), name))
            names.append(name)
        self.nodes.extend(names)
        return names

    def fail_gpu(
        self, node: str, index: int, fault: Fault, effect: str = "NoExecute", profile: str = "a100-8x"
    ) -> None:
        """The node's slices as its plugin publishes them once GPU `index` has `fault`, built by the
        plugin's own builder like every node of this harness (the plugin turning a fault file into
        these is e2e/test_gpu_faults.py's)."""
        inventory = load_profile(resolve_profile(profile))
        gpus = tuple(gpu.with_fault(fault) if gpu.index == index else gpu for gpu in inventory.gpus)
        config = PublishConfig(fractions=(), fatal_fault_effect=effect)
        SlicePublisher(self.api, node).reconcile(
            build_slices(inventory.model_copy(update={"gpus": gpus}), config, node)
        )

    def remove_nodes(self) -> None:
        core = client.CoreV1Api(self.api)
        for name in self.nodes:
            with contextlib.suppress(client.ApiException):
                core.delete_node(name)
        self.nodes.clear()


@contextlib.contextmanager
def _extender_plane(
    root: Path, extender_config: dict[str, Any], features: Features = DEFAULTS, shared: ControlPlane | None = None
) -> Iterator[tuple[Callable[[str], ExtenderCluster], Callable[[int], None]]]:
    """A control plane with the DeviceClasses applied. Yields a factory of extender processes (not
    started; each binds a port the kernel picks, and has its own probe port and log; all share the
    TLS material and config, as a Deployment's replicas share a Secret and a ConfigMap), and
    `call(port)`, which restarts the scheduler calling https://127.0.0.1:`port`. `features`: gates
    beyond the defaults, for a test that says why.

    `shared`: a running plane (one of the e2e session's) to use instead of starting one (`features`
    is then the plane's); its scheduler is restarted with the configuration it had afterwards."""
    tls = extender_tls(root / "extender-tls")
    if shared is None:
        plane = ControlPlane(state_dir=root / "cluster", binaries=resolve(), features=features)
        plane.start()
        restore: Mapping[str, Any] | None = None
    else:
        plane, restore = shared, shared.scheduler_config_extra
    config_file = root / "extender.yaml"
    config_file.write_text(yaml.safe_dump(extender_config))
    api = config.new_client_from_config(config_file=str(plane.kubeconfig))

    namespace = f"nativedra-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})

    def extender(name: str) -> ExtenderCluster:
        log = root / f"{name}.log"
        return ExtenderCluster(plane, api, 0, free_port(), tls, config_file, log, namespace=namespace)

    def call(port: int) -> None:
        call_extender(plane, port, tls)

    try:
        apply_file(api, device_classes())
        yield extender, call
    finally:
        if restore is None:
            plane.stop()
        else:
            stop_calling_extender(plane, restore)
            with contextlib.suppress(client.ApiException):
                client.CoreV1Api(api).delete_namespace(namespace)


@contextlib.contextmanager
def extender_cluster(
    root: Path, extender_config: dict[str, Any], features: Features = DEFAULTS, shared: ControlPlane | None = None
) -> Iterator[ExtenderCluster]:
    with _extender_plane(root, extender_config, features, shared) as (extender, call):
        harness = extender("extender")
        try:
            harness.start_extender()
            call(harness.port)
            yield harness
        finally:
            harness.kill_extender()


@dataclass
class ReplicatedExtenders:
    """Extender processes as a Deployment's replicas, behind a balancer standing for their Service:
    the scheduler's urlPrefix is the balancer's port. Any replica adds and removes the test's nodes."""

    replicas: list[ExtenderCluster]
    balancer: TcpBalancer

    @property
    def first(self) -> ExtenderCluster:
        return self.replicas[0]

    def start_stopped(self) -> None:
        """Start again the replicas a test killed, as the Deployment's controller would."""
        for replica in self.replicas:
            if replica.process is None or replica.process.poll() is not None:
                replica.start_extender()


@contextlib.contextmanager
def replicated_extender_cluster(
    root: Path, extender_config: dict[str, Any], count: int = 2, shared: ControlPlane | None = None
) -> Iterator[ReplicatedExtenders]:
    with (
        TcpBalancer() as balancer,  # on a port the kernel picks: no other process can hold it
        _extender_plane(root, extender_config, shared=shared) as (extender, call),
    ):
        replicas = [extender(f"extender-{index}") for index in range(count)]
        try:
            for replica in replicas:
                replica.start_extender()
            balancer.set_backends([replica.port for replica in replicas])
            call(balancer.port)
            yield ReplicatedExtenders(replicas, balancer)
        finally:
            for replica in replicas:
                replica.kill_extender()


@contextlib.contextmanager
def fresh_namespace(api: client.ApiClient, prefix: str) -> Iterator[str]:
    """A new namespace once its default ServiceAccount exists (pods are refused before), deleted after."""
    core = client.CoreV1Api(api)
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    try:
        wait_for(lambda: core.list_namespaced_service_account(name).items, 30, "default ServiceAccount")
        yield name
    finally:
        # Pods first, at once: a pod left pending in a namespace that is still ending can be bound
        # yet, and would take a later test's fresh nodes.
        with contextlib.suppress(client.ApiException):
            core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
        with contextlib.suppress(client.ApiException):
            core.delete_namespace(name)


def gang_pods(
    api: client.ApiClient,
    namespace: str,
    gang: str,
    size: int,
    gpus: int,
    *,
    extra_labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    selector: dict[str, str] | None = None,
    members: range | None = None,
    scheduler: str | None = None,
    priority_class: str | None = None,
) -> list[str]:
    """Pods of one gang, each asking for `gpus` whole GPUs; returns their names."""
    template = f"{gang}-gpus"
    with contextlib.suppress(client.ApiException):
        claim_template(api, namespace, template, [request("gpus", GPU_CLASS, count=gpus)])
    names = []
    for index in members if members is not None else range(size):
        name = f"{gang}-{index}"
        labels = {"nativedra.dev/gang": gang, "nativedra.dev/gang-size": str(size), **(extra_labels or {})}
        gpu_pod(
            api,
            namespace,
            name,
            template,
            node_selector=selector,
            labels=labels,
            annotations=annotations,
            scheduler=scheduler,
            priority_class=priority_class,
        )
        names.append(name)
    return names


def native_gang_pods(
    api: client.ApiClient,
    namespace: str,
    group: str,
    size: int,
    gpus: int,
    *,
    topology: str | None = None,
    selector: dict[str, str] | None = None,
    members: range | None = None,
    min_count: int | None = None,
) -> list[str]:
    """Pods of one native PodGroup (created with the first of them), each asking for `gpus` whole
    GPUs; the group's minCount is `size` unless given; returns the pods' names."""
    template = f"{group}-gpus"
    if members is None or members.start == 0:
        claim_template(api, namespace, template, [request("gpus", GPU_CLASS, count=gpus)])
        native_pod_group(api, namespace, group, size if min_count is None else min_count, topology)
    names = []
    for index in members if members is not None else range(size):
        name = f"{group}-{index}"
        gpu_pod(api, namespace, name, template, node_selector=selector, pod_group=group)
        names.append(name)
    return names


def bound(api: client.ApiClient, namespace: str, names: list[str]) -> dict[str, str]:
    """Pod -> node for those of `names` that are bound."""
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace).items
    return {p.metadata.name: p.spec.node_name for p in pods if p.metadata.name in names and p.spec.node_name}


def judged(api: client.ApiClient, namespace: str, names: list[str]) -> dict[str, str] | None:
    """Pod -> node once every pod of `names` is bound or has the scheduler's verdict; else None."""
    placed = bound(api, namespace, names)
    if all(name in placed or unschedulable_message(api, namespace, name) for name in names):
        return placed
    return None


def scheduling_failures(api: client.ApiClient, namespace: str, pod: str) -> int:
    """How often the scheduler has reported it could not place `pod`: its FailedScheduling events,
    each with its series count (the scheduler's event recorder folds a repeat into the first event)."""
    events = client.CoreV1Api(api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.kind=Pod,involvedObject.name={pod},reason=FailedScheduling"
    )
    return sum(e.series.count if e.series and e.series.count else e.count or 1 for e in events.items)


def wait_judged_unschedulable(api: client.ApiClient, namespace: str, names: list[str], timeout_s: float = 120) -> None:
    """Until the scheduler has tried each pod of `names` and failed twice: a check that they stay
    unbound is then the scheduler's settled answer, not a look before it decided.

    A pod the scheduler failed is retried on a cluster event that might let it fit; between the two
    attempts this adds and removes a bare node (no devices, so no pod can fit it), an event every
    waiting pod is retried on. Two, because the scheduler folds later repeats of an event into its
    series only every 30 minutes."""

    def failures() -> dict[str, int]:
        return {name: scheduling_failures(api, namespace, name) for name in names}

    wait_for(lambda: min(failures().values()) >= 1, timeout_s, f"a first verdict on {len(names)} pod(s)")
    if min(failures().values()) >= 2:
        return
    poke = f"poke-{uuid.uuid4().hex[:6]}"
    create_fake_node(api, poke)
    try:
        wait_for(
            lambda: min(failures().values()) >= 2,
            timeout_s,
            f"a second verdict on {len(names)} pod(s)",
            lambda: str(failures()),
        )
    finally:
        with contextlib.suppress(client.ApiException):
            client.CoreV1Api(api).delete_node(poke)


def settled_placement(api: client.ApiClient, namespace: str, names: list[str], timeout_s: float = 60) -> dict[str, str]:
    """The placement of `names` once the scheduler has judged them all and it holds for a second:
    a pod judged unschedulable is retried on every cluster event, so one look is not enough."""

    def stable() -> dict[str, str] | None:
        first = judged(api, namespace, names)
        if first is None:
            return None
        time.sleep(1)
        return first if judged(api, namespace, names) == first else None

    return wait_for(stable, timeout_s, f"the scheduler to judge {len(names)} pods")


def delete_pods(api: client.ApiClient, namespace: str, names: list[str], timeout_s: float = 60) -> None:
    """Delete pods now, the waiting ones first (so none takes what a bound one frees), and wait
    until they and the claims generated for them are gone: their devices are free again. Other
    pods of the namespace keep theirs."""
    core = client.CoreV1Api(api)
    placed = bound(api, namespace, names)
    for name in sorted(names, key=lambda n: n in placed):
        with contextlib.suppress(client.ApiException):
            core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)

    def theirs(claim: dict[str, Any]) -> bool:
        owners = claim["metadata"].get("ownerReferences") or []
        return claim["metadata"]["namespace"] == namespace and any(
            owner.get("kind") == "Pod" and owner.get("name") in names for owner in owners
        )

    def gone() -> bool:
        pods = {p.metadata.name for p in core.list_namespaced_pod(namespace).items}
        claims = RESOURCE_CLAIMS.list(api).get("items") or []
        return not pods & set(names) and not any(theirs(claim) for claim in claims)

    wait_for(gone, timeout_s, f"{len(names)} pods and their claims to go")
