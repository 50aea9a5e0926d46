"""charts/nativedra installed by the real helm (built from helm.sh/helm/v3) into a real control plane.

On a plain control plane (no kubelet, so no plugin pod runs): install creates every object the chart
renders, with the values given; an upgrade changes a value and keeps the generated certificates
(the renewal command renews them in place and a later upgrade keeps the renewed one); uninstall
leaves none of them. On the real node (the upstream kubelet on containerd, this tree's image): the
chart with the simulated backend runs the plugin DaemonSet, its slices appear and a pod gets a GPU,
the extender serves from the certificates Helm made, the renewal Job renews them under its own
Role; `helm upgrade` turning fractions off changes the published slices, and `helm uninstall`
leaves no slice behind (the kubelet wipes a gone driver's slices)."""

from __future__ import annotations

import base64
import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError

from dra_driver.discovery.simulated import load_profile, resolve_profile
from nativedra.base.kube.names import DRIVER_NAME, EXTENDER_MARKER, GPU_NODE_LABEL
from nativedra.base.kube.resources import RESOURCE_CLAIMS
from nativedra.cluster import ControlPlane, resolve, wait_for
from nativedra.cluster.extender_wiring import call_extender, stop_calling_extender
from nativedra.cluster.helm import CHART, Helm, build_helm
from nativedra.cluster.realnode import ContainersUnavailableError, RealNode
from nativedra.cluster.waits import describe_pod
from nativedra.objects import apply_documents, our_slices, published_devices
from testkit.extender_harness import bound, fresh_namespace, gang_pods
from testkit.extender_service import shipped_wiring_of
from testkit.manifests import containers_unavailable

RELEASE = "nativedra"
CLIENT_PAIR = "nativedra-scheduler-extender-client"  # the Secret extender.tls.generate makes for the scheduler
RELEASE_NAMESPACE = "kube-system"  # where docs/install.md's install keeps the release record (it holds the keys)
NAMESPACE = "nativedra-system"
PLUGIN_NAMESPACE = "nativedra-plugin"  # the plugin's own, the only privileged one
NODE = "real-0"
REPO = Path(__file__).resolve().parent.parent
PLUGIN_SELECTOR = "app.kubernetes.io/name=nativedra-plugin"
EXTENDER_SELECTOR = "app.kubernetes.io/name=nativedra-extender"

pytestmark = pytest.mark.timeout(900)


@dataclass
class Installed:
    plane: ControlPlane
    api: client.ApiClient
    helm: Helm

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)


def _helm(plane: ControlPlane, tmp: Path) -> Helm:
    return Helm(build_helm(), tmp, kubeconfig=plane.kubeconfig)


def live(api: client.ApiClient, document: dict[str, Any]) -> dict[str, Any] | None:
    """The object as the API server has it, or None."""
    resource = DynamicClient(api).resources.get(api_version=document["apiVersion"], kind=document["kind"])
    try:
        found = resource.get(name=document["metadata"]["name"], namespace=document["metadata"].get("namespace"))
    except NotFoundError:
        return None
    return dict(found.to_dict())


def secret_data(core: client.CoreV1Api, name: str) -> dict[str, str]:
    return dict(core.read_namespaced_secret(name, NAMESPACE).data)


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    """A control plane of its own: the shared one holds manifests/base, applied by other modules."""
    plane = ControlPlane(state_dir=Path(tmp_path_factory.mktemp("helm-cluster")), binaries=resolve())
    plane.start()
    try:
        yield Installed(plane, plane.api_client(), _helm(plane, tmp_path_factory.mktemp("helm-home")))
    finally:
        plane.stop()


def test_install_upgrade_uninstall_on_a_control_plane(plain: Installed) -> None:
    helm, api, core = plain.helm, plain.api, plain.core
    values = {
        "extender": {"replicas": 1, "tls": {"generate": True}},
        "plugin": {"fractions": {"enabled": False}, "driverRoot": "/run/nvidia/driver"},
        "secondScheduler": {"enabled": True},
    }
    rendered = helm.template(values)
    helm("install", RELEASE, str(CHART), "-n", RELEASE_NAMESPACE, *helm.values_args(values))
    assert helm("list", "-n", RELEASE_NAMESPACE, "-q").split() == [RELEASE]
    missing = [(d["kind"], d["metadata"]["name"]) for d in rendered if live(api, d) is None]
    assert missing == [], f"helm install created no {missing}"
    assert len(rendered) == 33 + 3 + 10  # the base, the generated Secrets, the second scheduler
    apps = client.AppsV1Api(api)
    plugin = apps.read_namespaced_daemon_set("nativedra-plugin", PLUGIN_NAMESPACE).spec.template.spec
    assert plugin.containers[0].args[-2:] == ["--fractions", "none"]
    assert {v.name: v.host_path.path for v in plugin.volumes if v.host_path}["driver-root"] == "/run/nvidia/driver"
    assert apps.read_namespaced_deployment("nativedra-extender", NAMESPACE).spec.replicas == 1
    enforced = {
        name: core.read_namespace(name).metadata.labels["pod-security.kubernetes.io/enforce"]
        for name in (NAMESPACE, PLUGIN_NAMESPACE)
    }
    assert enforced == {NAMESPACE: "restricted", PLUGIN_NAMESPACE: "privileged"}
    ca = secret_data(core, "nativedra-extender-ca")
    serving = secret_data(core, "nativedra-extender-tls")
    client_cert = secret_data(core, "nativedra-scheduler-extender-client")
    assert serving["ca.crt"] == client_cert["ca.crt"] == ca["ca.crt"]

    # Upgrade: a value changes, the certificates stay (looked up, not generated again).
    helm("upgrade", RELEASE, str(CHART), "-n", RELEASE_NAMESPACE, "--reuse-values", "--set", "extender.replicas=3")
    assert apps.read_namespaced_deployment("nativedra-extender", NAMESPACE).spec.replicas == 3
    assert secret_data(core, "nativedra-extender-ca") == ca
    assert secret_data(core, "nativedra-extender-tls") == serving
    assert secret_data(core, "nativedra-scheduler-extender-client") == client_cert

    # The renewal command (what the CronJob runs) renews Helm's serving certificate with Helm's CA,
    # and the next upgrade keeps the renewed one.
    renew = [
        *[sys.executable, "-m", "nativedra.cli", "extender-certs", "renew"],
        *["--kubeconfig", str(plain.plane.kubeconfig), "--renew-before-days=400", "--lifetime-days=500"],
    ]
    result = subprocess.run(renew, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    renewed = secret_data(core, "nativedra-extender-tls")
    assert renewed["tls.crt"] != serving["tls.crt"] and renewed["ca.crt"] == serving["ca.crt"]
    helm("upgrade", RELEASE, str(CHART), "-n", RELEASE_NAMESPACE, "--reuse-values", "--set", "extender.replicas=2")
    assert secret_data(core, "nativedra-extender-tls") == renewed

    # Uninstall: nothing the chart made is left (the namespace's deletion finishes asynchronously).
    helm("uninstall", RELEASE, "-n", RELEASE_NAMESPACE, "--wait", "--timeout", "2m")

    def left() -> list[tuple[str, str]]:
        return [(d["kind"], d["metadata"]["name"]) for d in rendered if live(api, d) is not None]

    wait_for(lambda: not left(), 120, "every object of the release deleted", lambda: str(left()))
    assert helm("list", "--all-namespaces", "--all", "-q").strip() == ""


# The real node ------------------------------------------------------------------------------------


@dataclass
class OnNode(Installed):
    node: RealNode


@pytest.fixture(scope="module")
def real_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OnNode]:
    reason = containers_unavailable()
    if reason:
        pytest.skip(reason)
    plane = ControlPlane(state_dir=Path(tmp_path_factory.mktemp("helm-real-node")), binaries=resolve())
    plane.start()
    node = RealNode(plane, NODE, labels={GPU_NODE_LABEL: "true"}, repo=REPO, kube_proxy=True)
    try:
        try:
            node.start()
        except ContainersUnavailableError as error:
            pytest.skip(str(error))
        yield OnNode(plane, plane.api_client(), _helm(plane, tmp_path_factory.mktemp("helm-home")), node)
    finally:
        node.stop()
        plane.stop()


def count_by_type(api: client.ApiClient) -> dict[str, int]:
    """Devices by type over the node's pool, once the pool is whole (every slice of one generation,
    as many as each says there are); {} while the plugin is between writes."""
    slices = our_slices(api, NODE)
    pools = {(s["spec"]["pool"]["generation"], s["spec"]["pool"]["resourceSliceCount"]) for s in slices}
    if len(pools) != 1 or next(iter(pools))[1] != len(slices):
        return {}
    counts: dict[str, int] = {}
    for piece in slices:
        for device in piece["spec"].get("devices") or []:
            kind = device["attributes"]["type"]["string"]
            counts[kind] = counts.get(kind, 0) + 1
    return counts


def rolled_out(env: OnNode) -> bool:
    """One plugin pod, of the DaemonSet's current template, and Ready (the surge pod's predecessor gone)."""
    daemonset = client.AppsV1Api(env.api).read_namespaced_daemon_set("nativedra-plugin", PLUGIN_NAMESPACE)
    status = daemonset.status
    pods = env.core.list_namespaced_pod(PLUGIN_NAMESPACE, label_selector=PLUGIN_SELECTOR).items
    return bool(
        status.observed_generation == daemonset.metadata.generation
        and status.updated_number_scheduled == 1
        and status.number_available == 1
        and len(pods) == 1
    )


def published_with(api: client.ApiClient, *, fractions: bool) -> dict[str, int] | None:
    """The device counts once whole GPUs are published with (or without) fractions, else None."""
    counts = count_by_type(api)
    return counts if counts.get("gpu") and ("fraction" in counts) == fractions else None


def describe_release(env: OnNode) -> str:
    daemonset = client.AppsV1Api(env.api).read_namespaced_daemon_set("nativedra-plugin", PLUGIN_NAMESPACE)
    status = daemonset.status
    lines = [
        f"daemonset generation={daemonset.metadata.generation} observed={status.observed_generation}"
        f" updated={status.updated_number_scheduled} available={status.number_available}"
        f" ready={status.number_ready} desired={status.desired_number_scheduled}"
    ]
    for pod in env.core.list_namespaced_pod(PLUGIN_NAMESPACE, label_selector=PLUGIN_SELECTOR).items:
        revision = (pod.metadata.labels or {}).get("controller-revision-hash")
        lines.append(f"plugin pod {pod.metadata.name} revision={revision} deleted={pod.metadata.deletion_timestamp}")
    for namespace, selector in ((PLUGIN_NAMESPACE, PLUGIN_SELECTOR), (NAMESPACE, EXTENDER_SELECTOR)):
        for pod in env.core.list_namespaced_pod(namespace, label_selector=selector).items:
            lines.append(describe_pod(env.api, namespace, pod.metadata.name))
            with contextlib.suppress(client.ApiException):
                lines.append(env.core.read_namespaced_pod_log(pod.metadata.name, namespace, tail_lines=20))
    return "\n".join(lines)


def gpu_pod(env: OnNode, namespace: str) -> str:
    """A pod with a claim for one whole GPU that lists the NVIDIA device nodes it was given."""
    image = env.node.image
    claim = {
        "apiVersion": RESOURCE_CLAIMS.api_version,
        "kind": "ResourceClaim",
        "metadata": {"name": "one-gpu", "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nativedra.dev"}}]}},
    }
    command = "ls /dev | grep nvidia; sleep 3600"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gpu", "namespace": namespace},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "one-gpu"}],
            "containers": [
                {
                    "name": "c",
                    "image": image,
                    "command": ["sh", "-c", command],
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
        },
    }
    apply_documents(env.api, [claim, pod], namespace)
    return "gpu"


def gang_through_the_shipped_wiring(env: OnNode, files: Path) -> float:
    """kube-scheduler wired as manifests/scheduler/ ships (its certificate directory filled from the
    chart's client Secret, bound where a static pod's hostPath puts it), a two-pod GPU gang bound
    whole through the chart's extender at its fixed ClusterIP, and the scheduler unwired again.
    Returns the seconds from the gang's creation to both bound."""
    secret = {key: base64.b64decode(value) for key, value in secret_data(env.core, CLIENT_PAIR).items()}
    wiring, mounts = shipped_wiring_of(secret, files)
    call_extender(env.plane, 0, extra=wiring, mounts=mounts)  # `extra` replaces the loopback entry
    try:
        with fresh_namespace(env.api, "gang") as namespace:
            started = time.monotonic()
            names = gang_pods(env.api, namespace, "pair", 2, 1)
            wait_for(lambda: bound(env.api, namespace, names), 120, "the gang bound through the shipped wiring")
            seconds = time.monotonic() - started
            for name in names:
                limits = env.core.read_namespaced_pod(name, namespace).spec.containers[0].resources.limits
                assert EXTENDER_MARKER in (limits or {}), f"{name} was not marked: any scheduler could place it"
            return seconds
    finally:
        stop_calling_extender(env.plane)


def test_chart_on_the_real_node(real_node: OnNode, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    env, helm, api, core = real_node, real_node.helm, real_node.api, real_node.core
    assert env.node.image
    repository, tag = env.node.image.rsplit(":", 1)
    values = {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "plugin": {"backend": "simulated"},
        "extender": {"replicas": 1, "tls": {"generate": True}},
    }
    seconds: dict[str, float] = {}
    started = time.monotonic()
    helm("install", RELEASE, str(CHART), "-n", RELEASE_NAMESPACE, *helm.values_args(values))
    seconds["helm install"] = time.monotonic() - started
    before = wait_for(
        lambda: published_with(api, fractions=True),
        240,
        "the chart's plugin publishing the node's GPUs and fractions",
        lambda: describe_release(env),
    )
    seconds["install to slices"] = time.monotonic() - started
    whole = [gpu for gpu in load_profile(resolve_profile("h100-8x")).gpus if not gpu.mig_enabled]
    assert before["gpu"] == len(whole) and before["fraction"] == len(whole) * (2 + 4 + 8), before

    with fresh_namespace(api, "helm") as namespace:
        pod = gpu_pod(env, namespace)

        def running() -> str | None:
            if core.read_namespaced_pod(pod, namespace).status.phase != "Running":
                return None
            return core.read_namespaced_pod_log(pod, namespace) or None

        log = wait_for(running, 120, "the GPU pod running", lambda: describe_pod(api, namespace, pod))
        seconds["install to a GPU pod running"] = time.monotonic() - started
        allocated = RESOURCE_CLAIMS.get(api, "one-gpu", namespace)["status"]["allocation"]["devices"]["results"]
        assert [r["driver"] for r in allocated] == [DRIVER_NAME]
        index = published_devices(api, NODE)[allocated[0]["device"]]["attributes"]["index"]["int"]
        assert set(log.split()) == {f"nvidia{index}", "nvidiactl"}, log

        # The extender serves with Helm's certificates (it loads them at start: Ready means loaded).
        def extender_ready() -> bool:
            status = client.AppsV1Api(api).read_namespaced_deployment("nativedra-extender", NAMESPACE).status
            return bool(status.ready_replicas == 1)

        wait_for(extender_ready, 180, "the extender Ready with Helm's certificates", lambda: describe_release(env))
        seconds["gang through the shipped wiring"] = gang_through_the_shipped_wiring(env, tmp_path / "files")

        # The renewal Job, as the CronJob would start it, under the chart's Role.
        serving = secret_data(core, "nativedra-extender-tls")
        renew_job(env)
        renewed = secret_data(core, "nativedra-extender-tls")
        assert renewed["tls.crt"] != serving["tls.crt"] and renewed["ca.crt"] == serving["ca.crt"]

        # Upgrade: fractions off. The DaemonSet rolls and the new plugin pod publishes no fraction.
        upgraded = time.monotonic()
        helm(
            "upgrade",
            RELEASE,
            str(CHART),
            "-n",
            RELEASE_NAMESPACE,
            "--reuse-values",
            "--set",
            "plugin.fractions.enabled=false",
        )
        wait_for(lambda: rolled_out(env), 240, "the plugin DaemonSet rolled out", lambda: describe_release(env))
        after = wait_for(
            lambda: published_with(api, fractions=False),
            240,
            "the upgraded plugin publishing no fractions",
            lambda: f"{count_by_type(api)}\n{describe_release(env)}",
        )
        seconds["upgrade to slices without fractions"] = time.monotonic() - upgraded
        assert after == {k: v for k, v in before.items() if k != "fraction"}, (before, after)
        assert secret_data(core, "nativedra-extender-tls") == renewed, "the upgrade kept the renewed certificate"
        assert core.read_namespaced_pod(pod, namespace).status.phase == "Running"
        core.delete_namespaced_pod(pod, namespace, grace_period_seconds=0)
        wait_for(lambda: not core.list_namespaced_pod(namespace).items, 60, "the GPU pod gone")

    # Uninstall: the plugin pod ends; the kubelet wipes the slices of a driver gone for 30 s.
    uninstalled = time.monotonic()
    helm("uninstall", RELEASE, "-n", RELEASE_NAMESPACE, "--wait", "--timeout", "3m")
    wait_for(
        lambda: not published_devices(api, NODE), 120, "no slice of our driver left", lambda: str(count_by_type(api))
    )
    seconds["uninstall to no slices"] = time.monotonic() - uninstalled
    for name in (NAMESPACE, PLUGIN_NAMESPACE):
        wait_for(lambda name=name: not _namespace_exists(core, name), 120, f"namespace {name} deleted")  # type: ignore[misc]
    with capsys.disabled():
        print(f"\nhelm on the real node, seconds: { {k: round(v, 1) for k, v in seconds.items()} }")
        print(f"devices published: {before} -> after the upgrade {after}")


def _namespace_exists(core: client.CoreV1Api, name: str) -> bool:
    try:
        core.read_namespace(name)
    except client.ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


def renew_job(env: OnNode) -> None:
    """A Job from the chart's CronJob template (as `kubectl create job --from=cronjob/...`), told to
    renew now (a window longer than the certificate's 365 days); waits for it to succeed."""
    batch = client.BatchV1Api(env.api)
    cronjob = batch.read_namespaced_cron_job("nativedra-extender-cert-renewal", NAMESPACE)
    template = env.api.sanitize_for_serialization(cronjob.spec.job_template)
    template["spec"]["template"]["spec"]["containers"][0]["args"] += ["--renew-before-days=400", "--lifetime-days=500"]
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "renew-now"}, "spec": template["spec"]}
    batch.create_namespaced_job(NAMESPACE, job)

    def done() -> bool:
        status = batch.read_namespaced_job("renew-now", NAMESPACE).status
        if status.failed:
            pods = env.core.list_namespaced_pod(NAMESPACE, label_selector="job-name=renew-now").items
            logs = [env.core.read_namespaced_pod_log(p.metadata.name, NAMESPACE) for p in pods]
            raise AssertionError(f"the renewal Job failed: {logs}")
        return bool(status.succeeded)

    wait_for(done, 120, "the renewal Job to succeed")
    data = base64.b64decode(env.core.read_namespaced_secret("nativedra-extender-tls", NAMESPACE).data["tls.crt"])
    assert b"BEGIN CERTIFICATE" in data
