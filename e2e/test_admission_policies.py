"""The shipped admission policies against the real API server, on every release the plugin
supports (`make test-matrix` runs this module on 1.34 to 1.38): each plugin writes only its own
node's slices and claim status, only the extender writes the Leases it acts on, and the extender's
evictions stay out of protected namespaces. The base manifests alone are applied (the
second-scheduler overlay's MutatingAdmissionPolicy is served from 1.36 only)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client, config

from extender.cluster.reservation import LABEL
from nativedra.base.kube.names import DRIVER_NAME
from nativedra.base.kube.resources import RESOURCE_CLAIMS, RESOURCE_SLICES
from nativedra.cluster import ControlPlane, wait_for
from nativedra.objects import apply_documents
from testkit.manifests import MANIFESTS, kustomize

PLUGIN_USER = "system:serviceaccount:nativedra-plugin:nativedra-plugin"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


@pytest.fixture(scope="module")
def installed(api: client.ApiClient) -> list[dict[str, Any]]:
    # Not the Service: its fixed ClusterIP cannot replace the address the second-scheduler overlay's
    # left it, where e2e/test_manifests.py applied that first on the shared control plane.
    documents = [d for d in kustomize(MANIFESTS / "base") if d["kind"] != "Service"]
    apply_documents(api, documents)
    return documents


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
