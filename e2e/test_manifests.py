"""Every manifest we ship is accepted by the real API server, the scheduler configuration by the
real kube-scheduler, and the admission policy keeps each plugin to its own node's slices."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from extender.cluster.reservation import LABEL
from nativedra.base.kube.names import DRIVER_NAME, EVERY_NODE_PROFILE
from nativedra.base.kube.resources import RESOURCE_CLAIMS, RESOURCE_SLICES
from nativedra.cluster import ControlPlane, wait_for
from nativedra.objects import apply_documents
from testkit.manifests import kustomize

REPO = Path(__file__).resolve().parent.parent
MANIFESTS = REPO / "manifests"
CRDS = REPO / "e2e" / "crds"
PLUGIN_USER = "system:serviceaccount:nativedra-system:nativedra-plugin"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


@pytest.fixture(scope="module")
def installed(api: client.ApiClient) -> list[dict[str, Any]]:
    documents = kustomize(MANIFESTS / "overlays" / "second-scheduler")
    apply_documents(api, documents)
    return documents


def test_base_and_overlay_are_accepted(api: client.ApiClient, installed: list[dict[str, Any]]) -> None:
    base = {(d["kind"], d["metadata"]["name"]) for d in kustomize(MANIFESTS / "base")}
    assert base <= {(d["kind"], d["metadata"]["name"]) for d in installed}
    assert ("ValidatingAdmissionPolicy", "nativedra-plugin-own-node-slices") in base
    assert {"DaemonSet", "Deployment", "Service", "DeviceClass", "ClusterRole"} <= {kind for kind, _ in base}
    apps = client.AppsV1Api(api)
    daemonset = apps.read_namespaced_daemon_set("nativedra-plugin", "nativedra-system")
    env = {
        e.name: e.value_from.field_ref.field_path
        for e in daemonset.spec.template.spec.containers[0].env
        if e.value_from
    }
    assert env == {"NATIVEDRA_NODE_NAME": "spec.nodeName", "NATIVEDRA_POD_UID": "metadata.uid"}
    assert apps.read_namespaced_deployment("nativedra-scheduler", "nativedra-system").spec.replicas == 1
    extender = apps.read_namespaced_deployment("nativedra-extender", "nativedra-system")
    assert extender.spec.replicas == 2, "two replicas behind the Service: losing one stops no scheduling"
    spread = extender.spec.template.spec.affinity.pod_anti_affinity.preferred_during_scheduling_ignored_during_execution
    assert [term.pod_affinity_term.topology_key for term in spread] == ["kubernetes.io/hostname"]
    budget = client.PolicyV1Api(api).read_namespaced_pod_disruption_budget("nativedra-extender", "nativedra-system")
    assert budget.spec.min_available == 1
    assert budget.spec.selector.match_labels == extender.spec.selector.match_labels


@pytest.mark.parametrize("example", sorted(p.name for p in (MANIFESTS / "examples").glob("*.yaml")))
def test_every_example_is_accepted(api: client.ApiClient, namespace: str, installed: Any, example: str) -> None:
    documents = [d for d in yaml.safe_load_all((MANIFESTS / "examples" / example).read_text()) if d]
    groups = {d["apiVersion"].split("/")[0] for d in documents}
    for crd in CRDS.glob("*.yaml"):
        definition = yaml.safe_load(crd.read_text())
        # A CRD installed by the real controller (an earlier module's add-on, still running with its
        # webhooks) is newer than the copy here: replacing it drops defaults its webhook relies on.
        if definition["spec"]["group"] in groups and not _served(api, definition["metadata"]["name"]):
            apply_documents(api, [definition])
            name = definition["metadata"]["name"]
            wait_for(lambda name=name: _established(api, name), 30, f"CRD {name}")  # type: ignore[misc]
    apply_documents(api, documents, namespace)


def _served(api: client.ApiClient, name: str) -> bool:
    try:
        client.ApiextensionsV1Api(api).read_custom_resource_definition(name)
    except client.ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


def _established(api: client.ApiClient, name: str) -> bool:
    crd = client.ApiextensionsV1Api(api).read_custom_resource_definition(name)
    return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])


@pytest.mark.parametrize(
    "path", [MANIFESTS / "scheduler" / "kube-scheduler-config.yaml", MANIFESTS / "overlays" / "second-scheduler"]
)
def test_scheduler_configuration_is_accepted_by_kube_scheduler(
    control_plane: ControlPlane, tmp_path: Path, path: Path
) -> None:
    own_scheduler = path.is_dir()
    if own_scheduler:  # the second scheduler's config lives in its ConfigMap
        config_map = next(
            d for d in kustomize(path) if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "nativedra-scheduler"
        )
        document = yaml.safe_load(config_map["data"]["config.yaml"])
    else:
        document = yaml.safe_load(path.read_text())
    # A real scheduler's file also names its own kubeconfig; only that is added here. The extender's
    # client certificate files are the admin's to install: real PEM files from the test cluster's
    # PKI stand in for them (kube-scheduler reads them at start).
    document["clientConnection"] = {"kubeconfig": str(control_plane.kubeconfig)}
    extender = document["extenders"][0]
    assert extender["urlPrefix"].startswith("https://") and extender["enableHTTPS"] is True
    certs = control_plane.layout.certs
    stand_ins = {"caFile": certs.ca_cert, "certFile": certs.serving_cert, "keyFile": certs.serving_key}
    assert set(extender["tlsConfig"]) == set(stand_ins), "the extender verifies the scheduler's client certificate"
    extender["tlsConfig"] = {key: str(value) for key, value in stand_ins.items()}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(document))
    written = tmp_path / "effective.yaml"
    result = subprocess.run(
        [
            str(control_plane.binaries.kube_scheduler),
            f"--config={path}",
            f"--kubeconfig={control_plane.kubeconfig}",
            f"--write-config-to={written}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    effective = yaml.safe_load(written.read_text())
    assert effective["extenders"][0]["nodeCacheCapable"] is True
    assert effective["extenders"][0]["enableHTTPS"] is True
    profiles = {p["schedulerName"]: p for p in effective["profiles"]}
    if own_scheduler:  # every pod it is chosen for is sent, and sees every node
        assert effective["percentageOfNodesToScore"] == 100
        return
    assert profiles[EVERY_NODE_PROFILE]["percentageOfNodesToScore"] == 100
    assert not profiles["default-scheduler"].get("percentageOfNodesToScore"), "the adaptive share for every other pod"


def _as_plugin_on(control_plane: ControlPlane, node: str | None) -> client.ApiClient:
    impersonating = config.new_client_from_config(config_file=str(control_plane.kubeconfig))
    impersonating.set_default_header("Impersonate-User", PLUGIN_USER)
    impersonating.set_default_header("Impersonate-Group", "system:serviceaccounts")
    if node:
        impersonating.set_default_header(f"Impersonate-Extra-{NODE_NAME_EXTRA.replace('/', '%2F')}", node)
    return impersonating


def _slice(node: str) -> dict[str, Any]:
    return {
        "apiVersion": RESOURCE_SLICES.api_version,
        "kind": RESOURCE_SLICES.kind,
        "metadata": {"generateName": f"{node}-vap-"},
        "spec": {
            "driver": DRIVER_NAME,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [],
        },
    }


def test_admission_policy_keeps_a_plugin_to_its_own_node(
    control_plane: ControlPlane, installed: Any, fake_nodes: Any
) -> None:
    own, other = fake_nodes("vap"), fake_nodes("vap")
    plugin = _as_plugin_on(control_plane, own)

    def create(node: str) -> dict[str, Any]:
        return RESOURCE_SLICES.create(plugin, _slice(node))

    def refused(node: str) -> client.ApiException | None:
        try:
            RESOURCE_SLICES.create(plugin, _slice(node), dry_run=True)
        except client.ApiException as error:
            return error
        return None

    # The policy takes effect some time after it is created: until it refuses, nothing is proven.
    denied = wait_for(lambda: refused(other), 30, "the policy to refuse another node's slice (policy sync)")
    assert denied.status in {403, 422}
    assert f"may only write ResourceSlices with spec.nodeName {own}, not {other}" in str(denied.body)
    created = wait_for(lambda: _try(lambda: create(own)), 30, "the plugin's own slice to be admitted")
    assert created["spec"]["nodeName"] == own
    nameless = _as_plugin_on(control_plane, None)
    with pytest.raises(client.ApiException) as no_node:
        RESOURCE_SLICES.create(nameless, _slice(own))
    assert "carries no node name" in str(no_node.value.body)
    foreign = {**_slice(own), "spec": {**_slice(own)["spec"], "driver": "nic.example.com"}}
    with pytest.raises(client.ApiException) as other_driver:
        RESOURCE_SLICES.create(plugin, foreign)
    assert "only write ResourceSlices of driver gpu.nativedra.dev, not nic.example.com" in str(other_driver.value.body)
    theirs = RESOURCE_SLICES.create(control_plane.api_client(), _slice(other))  # as the other node's plugin wrote it
    changed = {**theirs, "spec": {**theirs["spec"], "pool": {**theirs["spec"]["pool"], "generation": 2}}}
    with pytest.raises(client.ApiException) as take_over:  # (spec.nodeName itself is immutable)
        RESOURCE_SLICES.replace(plugin, theirs["metadata"]["name"], changed)
    assert f"may only write ResourceSlices with spec.nodeName {own}, not {other}" in str(take_over.value.body)


def _try(action: Any) -> Any:
    try:
        return action()
    except client.ApiException as error:
        if error.status in (403, 422):
            return None  # the policy may not have reached the admission plugin yet
        raise


def _as(control_plane: ControlPlane, user: str, group: str) -> client.ApiClient:
    impersonating = config.new_client_from_config(config_file=str(control_plane.kubeconfig))
    impersonating.set_default_header("Impersonate-User", user)
    impersonating.set_default_header("Impersonate-Group", group)
    return impersonating


def test_only_the_extender_writes_the_leases_it_acts_on(control_plane: ControlPlane, installed: Any) -> None:
    """On 424026c anyone with Lease write in nativedra-system (the second scheduler's Role had it)
    could create a Lease labelled nativedra.dev/preemption, and the leader evicted its victims.
    Here an intruder with every RBAC right (system:masters) is refused at admission; the extender's
    own service account is admitted (dry run)."""
    planted = {
        "metadata": {"generateName": "preempt-", "labels": {LABEL: "true"}},
        "spec": {"holderIdentity": "intruder"},
    }
    intruder = client.CoordinationV1Api(_as(control_plane, "system:serviceaccount:team-b:default", "system:masters"))
    extender = client.CoordinationV1Api(
        _as(control_plane, "system:serviceaccount:nativedra-system:nativedra-extender", "system:serviceaccounts")
    )

    def refused() -> bool:
        try:
            intruder.create_namespaced_lease("nativedra-system", planted, dry_run="All")
        except client.ApiException as error:
            return error.status in (403, 422) and "only the nativedra extender writes" in str(error.body)
        return False

    wait_for(refused, 30, "the Lease policy to refuse the intruder (policy sync)")
    unlabelled = {"metadata": {"generateName": "return-"}, "spec": {}}
    with pytest.raises(client.ApiException):
        intruder.create_namespaced_lease("nativedra-system", unlabelled, dry_run="All")
    elsewhere = intruder.create_namespaced_lease("default", planted, dry_run="All")
    assert elsewhere.metadata.labels == {LABEL: "true"}, "another namespace's Leases are not the extender's"
    assert extender.create_namespaced_lease("nativedra-system", planted, dry_run="All").metadata.name


def test_the_extenders_evictions_are_refused_in_protected_namespaces(
    control_plane: ControlPlane, installed: Any, namespace: str
) -> None:
    """On 424026c the extender's ClusterRole let it evict any pod, kube-system's included; only its
    code held it back. Its own service account's eviction (a dry run, as each decision starts) of a
    kube-system pod is refused at admission; one in a team's namespace is allowed."""
    api = control_plane.api_client()
    core = client.CoreV1Api(api)
    spec = {"schedulerName": "nobody", "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
    protected = core.create_namespaced_pod("kube-system", {"metadata": {"generateName": "victim-"}, "spec": spec})
    team = core.create_namespaced_pod(namespace, {"metadata": {"generateName": "victim-"}, "spec": spec})
    extender = client.CoreV1Api(
        _as(control_plane, "system:serviceaccount:nativedra-system:nativedra-extender", "system:serviceaccounts")
    )

    def evict(pod: client.V1Pod) -> None:
        name, where = pod.metadata.name, pod.metadata.namespace
        body = {"metadata": {"name": name, "namespace": where}, "deleteOptions": {"dryRun": ["All"]}}
        extender.create_namespaced_pod_eviction(name, where, body, dry_run="All")

    try:

        def refused() -> bool:
            try:
                evict(protected)
            except client.ApiException as error:
                return error.status in (403, 422) and "may not evict pods in namespace kube-system" in str(error.body)
            return False

        wait_for(refused, 30, "the eviction policy to refuse kube-system (policy sync)")
        evict(team)
    finally:
        core.delete_namespaced_pod(protected.metadata.name, "kube-system", grace_period_seconds=0)


def _allocated_claim(api: client.ApiClient, namespace: str, node: str) -> dict[str, Any]:
    """A claim the scheduler allocated on `node` (one of our devices there), reserved for the pod that
    uses it (a real one: the claim controller drops reservations for pods that do not exist)."""
    request = {"name": "gpus", "exactly": {"deviceClassName": f"gpu.{DRIVER_NAME}", "count": 1}}
    claim = RESOURCE_CLAIMS.create(
        api, {"metadata": {"generateName": "vap-"}, "spec": {"devices": {"requests": [request]}}}, namespace
    )
    name = claim["metadata"]["name"]
    spec = {
        "schedulerName": "nobody",
        "containers": [
            {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"claims": [{"name": "gpus"}]}}
        ],
        "resourceClaims": [{"name": "gpus", "resourceClaimName": name}],
    }
    user = client.CoreV1Api(api).create_namespaced_pod(namespace, {"metadata": {"name": f"{name}-user"}, "spec": spec})
    result = {"request": "gpus", "driver": DRIVER_NAME, "pool": node, "device": "gpu-0"}
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    claim["status"] = {
        "allocation": {"devices": {"results": [result]}, "nodeSelector": {"nodeSelectorTerms": [term]}},
        "reservedFor": [{"resource": "pods", "name": user.metadata.name, "uid": user.metadata.uid}],
    }
    return RESOURCE_CLAIMS.replace_status(api, name, claim, namespace)


def test_a_plugin_writes_only_its_own_devices_in_claims_allocated_on_its_node(
    control_plane: ControlPlane, installed: Any, fake_nodes: Any, namespace: str
) -> None:
    """On 424026c, on 1.34 and 1.35, the plugin's token could patch any claim's status (RBAC alone
    stood in the way): emptying reservedFor or allocation hands the device to a second pod. Run on
    1.37 here (its own checks refuse the same) and on 1.34 with `make test-matrix`."""
    own, other = fake_nodes("vap"), fake_nodes("vap")
    admin = control_plane.api_client()
    here, there = _allocated_claim(admin, namespace, own), _allocated_claim(admin, namespace, other)
    plugin = _as_plugin_on(control_plane, own)
    manager = f"{DRIVER_NAME}/{own}"

    def apply(claim: dict[str, Any], status: dict[str, Any], dry_run: bool = False) -> client.ApiException | None:
        """Server-side apply of `status` as the plugin does it (a dry run: nothing is written)."""
        name = claim["metadata"]["name"]
        body = {
            "apiVersion": RESOURCE_CLAIMS.api_version,
            "kind": RESOURCE_CLAIMS.kind,
            "metadata": {"name": name, "namespace": namespace},
            "status": status,
        }
        extra = {"dry_run": "All"} if dry_run else {}
        try:
            client.CustomObjectsApi(plugin).patch_namespaced_custom_object_status(
                "resource.k8s.io",
                RESOURCE_CLAIMS.version,
                namespace,
                "resourceclaims",
                name,
                body,
                field_manager=manager,
                force=True,
                _content_type="application/apply-patch+yaml",
                **extra,
            )
        except client.ApiException as error:
            return error
        return None

    def entry(node: str) -> dict[str, Any]:
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "Prepared",
            "message": "",
            "lastTransitionTime": "2026-12-07T00:00:00Z",
        }
        return {"driver": DRIVER_NAME, "pool": node, "device": "gpu-0", "conditions": [ready]}

    def merge(claim: dict[str, Any], status: dict[str, Any]) -> client.ApiException | None:
        """A merge patch of the claim's status with the plugin's token, as a dry run."""
        name = claim["metadata"]["name"]
        try:
            client.CustomObjectsApi(plugin).patch_namespaced_custom_object_status(
                "resource.k8s.io",
                RESOURCE_CLAIMS.version,
                namespace,
                "resourceclaims",
                name,
                {"status": status},
                dry_run="All",
                _content_type="application/merge-patch+json",
            )
        except client.ApiException as error:
            return error
        return None

    def emptying_refused() -> client.ApiException | None:
        refused = merge(here, {"reservedFor": None})
        return refused if refused is not None and "reservedFor" in str(refused.body) else None

    # Refused by this policy on every version; from 1.36 the API's own checks refuse these too
    # (reservedFor and allocation need resourceclaims/binding, devices the driver's associated-node).
    emptied = wait_for(emptying_refused, 30, "emptying reservedFor to be refused (policy sync)")
    assert emptied.status in (403, 422)
    dropped = merge(here, {"allocation": None, "reservedFor": None, "devices": None})
    assert dropped is not None and "allocation" in str(dropped.body), "nor may it drop the allocation"
    forged = merge(here, {"devices": [entry(own), {**entry(own), "driver": "nic.example.com", "device": "nic-0"}]})
    assert forged is not None and forged.status in (403, 422), "nor write another driver's entries"
    # Another node's claim: refused by this policy, and on 1.36+ by the API's own per-node check too.
    refused = apply(there, {"devices": [entry(other)]})
    assert refused is not None and refused.status in (403, 422)
    assert "allocated on" in str(refused.body) or "status.devices" in str(refused.body)
    assert apply(here, {"devices": [entry(own)]}) is None, "its own devices in its own node's claim"
    read = RESOURCE_CLAIMS.get(admin, here["metadata"]["name"], namespace)
    assert read["status"]["reservedFor"] == here["status"]["reservedFor"]
