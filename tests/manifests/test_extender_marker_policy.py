"""The policies that mark the pods the extender serves, one per way of wiring a scheduler: each match
condition, evaluated with CEL as the API server does, marks exactly the pods of its scheduler with
resource claims, those asking for a class by its implicit name and those the extender may count in a
gang, whatever extended resources they add (a pod could otherwise step around the extender's holds
with one more name); the marker each adds is the one its scheduler configuration manages and
ignores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cel
import pytest
import yaml

from extender.pods.gang import IDENTITY_LABELS, may_belong_to_gang
from nativedra.base.kube.names import CLASS_RESOURCES, EVERY_NODE_PROFILE, EXTENDER_MARKER, EXTENDER_MARKER_QUANTITY
from nativedra.base.kube.pods import CLASS_RESOURCE_PREFIX
from nativedra.cluster.extender_wiring import ROUTING_POLICY_NAME
from nativedra.cluster.scheduler_config import managed_resources

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
SECOND = MANIFESTS / "overlays" / "second-scheduler"
# Wiring -> (its marker policy, the scheduler whose pods it marks).
POLICIES = {
    "default scheduler": (MANIFESTS / "scheduler" / "extender-marker-policy.yaml", "default-scheduler"),
    "second scheduler": (SECOND / "extender-marker-policy.yaml", "nativedra-scheduler"),
}


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _policy(path: Path) -> dict[str, Any]:
    return next(d for d in _documents(path) if d["kind"] == "MutatingAdmissionPolicy")


def _marked(path: Path, pod: dict[str, Any]) -> bool:
    context = cel.Context()
    context.add_variable("object", pod)
    return all(bool(cel.evaluate(c["expression"], context)) for c in _policy(path)["spec"]["matchConditions"])


def _pod(labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "p", "namespace": "ns"}
    if labels is not None:
        metadata["labels"] = labels
    return {"metadata": metadata, "spec": {"containers": [{"name": "c"}], **spec}}


PODS = {
    "plain": _pod(),
    "other labels": _pod({"app": "web", "jobset.sigs.k8s.io/job-index": "0"}),
    "a claim": _pod(resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": "one"}]),
    "no claims listed": _pod(resourceClaims=[]),
    "native PodGroup member": _pod(schedulingGroup={"podGroupName": "train"}),
    "extended resource of our class": _pod(
        containers=[{"name": "c", "resources": {"limits": {"nativedra.dev/gpu": "2"}}}]
    ),
    "a class by its implicit name": _pod(
        initContainers=[
            {"name": "i", "resources": {"requests": {"deviceclass.resource.kubernetes.io/gpu.nativedra.dev": "1"}}}
        ]
    ),
    "a device plugin's resource": _pod(containers=[{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]),
    "a claim and a device plugin's resource": _pod(
        resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": "one"}],
        containers=[{"name": "c", "resources": {"requests": {"example.com/nic": "1"}}}],
    ),
    "a claim and a zero of any resource": _pod(
        resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": "one"}],
        containers=[{"name": "c", "resources": {"limits": {"example.com/x": "0"}}}],
    ),
    "a gang member with a device plugin's resource": _pod(
        {"jobset.sigs.k8s.io/jobset-name": "train"},
        containers=[{"name": "c", "resources": {"limits": {"example.com/x": "1"}}}],
    ),
    "a gang member with cpu only": _pod(
        {"nativedra.dev/gang": "g"}, containers=[{"name": "c", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]
    ),
    "empty scheduling group": _pod(schedulingGroup={}),
    **{f"gang label {label}": _pod({label: "x"}) for label in IDENTITY_LABELS},
}


def _class_resources() -> set[str]:
    """The extendedResourceNames of the shipped DeviceClasses, and each class's implicit name."""
    classes = _documents(MANIFESTS / "base" / "deviceclasses.yaml")
    named = {c["spec"]["extendedResourceName"] for c in classes if c["spec"].get("extendedResourceName")}
    return named | {CLASS_RESOURCE_PREFIX + c["metadata"]["name"] for c in classes}


@pytest.mark.parametrize("wiring", sorted(POLICIES))
def test_pods_asking_our_classes_as_extended_resources_are_sent(wiring: str) -> None:
    """Marked beside a claim whatever class resource they ask (the marker is a zero request, which
    kube-scheduler's DRA plugin skips); an implicit class name marks on its own (the scheduler
    refuses kubernetes.io names in managedResources); our classes' extendedResourceNames are also
    in managedResources, counted by the DRA plugin (not ignored)."""
    path, scheduler = POLICIES[wiring]
    managed = {r["name"]: r["ignoredByScheduler"] for r in _extender_of(wiring)["managedResources"]}
    assert {r for r in _class_resources() if not r.startswith(CLASS_RESOURCE_PREFIX)} == set(CLASS_RESOURCES)
    for resource in _class_resources():
        pod = _pod(resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": "one"}])
        pod["spec"]["containers"] = [{"name": "c", "resources": {"limits": {resource: "1"}}}]
        assert _marked(path, _scheduled_by(pod, scheduler)), resource
        alone = _pod(containers=[{"name": "c", "resources": {"limits": {resource: "1"}}}])
        if resource.startswith(CLASS_RESOURCE_PREFIX):
            assert _marked(path, _scheduled_by(alone, scheduler)), resource
        else:
            assert managed[resource] is False, "counted by the DRA plugin, not ignored"
    assert managed[EXTENDER_MARKER] is True


def _resources(container: dict[str, Any]) -> list[str]:
    resources = container.get("resources") or {}
    return [*(resources.get("limits") or {}), *(resources.get("requests") or {})]


def _scheduled_by(pod: dict[str, Any], scheduler: str) -> dict[str, Any]:
    return {**pod, "spec": {**pod["spec"], "schedulerName": scheduler}}


@pytest.mark.parametrize("wiring", sorted(POLICIES))
@pytest.mark.parametrize("name", sorted(PODS))
def test_a_policy_marks_exactly_the_pods_the_extender_serves(wiring: str, name: str) -> None:
    path, scheduler = POLICIES[wiring]
    pod = _scheduled_by(PODS[name], scheduler)
    asks = [r for c in (*pod["spec"]["containers"], *pod["spec"].get("initContainers", [])) for r in _resources(c)]
    by_class = any(r.startswith(CLASS_RESOURCE_PREFIX) for r in asks)
    served = bool(pod["spec"].get("resourceClaims")) or may_belong_to_gang(pod) or by_class
    assert _marked(path, pod) == served


@pytest.mark.parametrize("wiring", sorted(POLICIES))
def test_pods_of_another_scheduler_are_never_marked(wiring: str) -> None:
    """Their scheduler does not ignore the marker: a marked pod would never fit a node there."""
    path, scheduler = POLICIES[wiring]
    assert _marked(path, _scheduled_by(PODS["a claim"], scheduler))
    assert not _marked(path, _scheduled_by(PODS["a claim"], "other-scheduler"))


def _extender_of(wiring: str) -> dict[str, Any]:
    if wiring == "default scheduler":
        return dict(_documents(MANIFESTS / "scheduler" / "kube-scheduler-config.yaml")[0]["extenders"][0])
    config_map = next(d for d in _documents(SECOND / "second-scheduler.yaml") if d["kind"] == "ConfigMap")
    return dict(yaml.safe_load(config_map["data"]["config.yaml"])["extenders"][0])


@pytest.mark.parametrize("wiring", sorted(POLICIES))
def test_the_marker_is_added_on_create_and_is_what_its_scheduler_manages_and_ignores(wiring: str) -> None:
    path, _ = POLICIES[wiring]
    spec = _policy(path)["spec"]
    assert spec["matchConstraints"]["resourceRules"][0]["operations"] == ["CREATE"]
    marker = f'"{EXTENDER_MARKER}": "{EXTENDER_MARKER_QUANTITY}"'
    assert marker in spec["mutations"][0]["applyConfiguration"]["expression"]
    binding = next(d for d in _documents(path) if d["kind"] == "MutatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == _policy(path)["metadata"]["name"]
    assert binding["metadata"]["name"] == _policy(path)["metadata"]["name"], "withdrawn by one name"
    assert _extender_of(wiring)["managedResources"] == managed_resources()


def test_the_default_schedulers_policy_goes_with_its_wiring_not_with_the_base() -> None:
    """Marked pods fit no node for a scheduler that is not told to ignore the marker: the policy is
    applied with the scheduler configuration, and the overlay brings its own."""
    base = yaml.safe_load((MANIFESTS / "base" / "kustomization.yaml").read_text())["resources"]
    assert not any("marker" in resource for resource in base)
    assert "extender-marker-policy.yaml" in yaml.safe_load((SECOND / "kustomization.yaml").read_text())["resources"]


DEFAULT_WIRING = POLICIES["default scheduler"][0]


def _routing_policy() -> dict[str, Any]:
    return next(
        d
        for d in _documents(DEFAULT_WIRING)
        if d["kind"] == "MutatingAdmissionPolicy" and d["metadata"]["name"] == ROUTING_POLICY_NAME
    )


def _routed(pod: dict[str, Any]) -> bool:
    context = cel.Context()
    context.add_variable("object", pod)
    return all(bool(cel.evaluate(c["expression"], context)) for c in _routing_policy()["spec"]["matchConditions"])


def _moved(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod after the routing policy's mutation, when it matches."""
    return _scheduled_by(pod, EVERY_NODE_PROFILE) if _routed(pod) else pod


@pytest.mark.parametrize("name", sorted(PODS))
def test_the_pods_the_extender_serves_are_moved_to_the_profile_that_looks_at_every_node(name: str) -> None:
    """Marked pods and those asking for our classes' extended resources (sent by managedResources)
    move; every other pod keeps the default profile's adaptive share of nodes."""
    pod = _scheduled_by(PODS[name], "default-scheduler")
    asks = [r for c in (*pod["spec"]["containers"], *pod["spec"].get("initContainers", [])) for r in _resources(c)]
    sent = _marked(DEFAULT_WIRING, pod) or any(r in CLASS_RESOURCES for r in asks)
    assert _routed(pod) == sent
    assert _routed(PODS[name]) == sent, "no schedulerName is the default scheduler's"
    assert not _routed(_scheduled_by(PODS[name], "other-scheduler"))


def _with_marker(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod after the marker policy's mutation, when it matches."""
    if not _marked(DEFAULT_WIRING, pod):
        return pod
    first, *others = pod["spec"]["containers"]
    resources = first.get("resources") or {}
    limits = {**(resources.get("limits") or {}), EXTENDER_MARKER: EXTENDER_MARKER_QUANTITY}
    marked = {**first, "resources": {**resources, "limits": limits}}
    return {**pod, "spec": {**pod["spec"], "containers": [marked, *others]}}


@pytest.mark.parametrize("name", sorted(PODS))
def test_a_pod_is_marked_and_moved_whichever_policy_the_api_server_runs_first(name: str) -> None:
    """The API server runs the two policies in an order of its own (a 5,000-node benchmark saw the
    marker first, which the routing policy then took for a device plugin's resource)."""
    pod = _scheduled_by(PODS[name], "default-scheduler")
    assert _marked(DEFAULT_WIRING, _moved(pod)) == _marked(DEFAULT_WIRING, pod)
    assert _routed(_with_marker(pod)) == _routed(pod)


def test_the_routing_policy_names_our_classes_extended_resources_and_the_profile() -> None:
    spec = _routing_policy()["spec"]
    conditions = " ".join(c["expression"] for c in spec["matchConditions"])
    for resource in CLASS_RESOURCES:
        assert f'"{resource}"' in conditions
    assert spec["matchConstraints"]["resourceRules"][0]["operations"] == ["CREATE"]
    assert f'schedulerName: "{EVERY_NODE_PROFILE}"' in spec["mutations"][0]["applyConfiguration"]["expression"]
    bindings = [d for d in _documents(DEFAULT_WIRING) if d["kind"] == "MutatingAdmissionPolicyBinding"]
    assert {b["metadata"]["name"] for b in bindings} == {b["spec"]["policyName"] for b in bindings}
    assert ROUTING_POLICY_NAME in {b["metadata"]["name"] for b in bindings}
