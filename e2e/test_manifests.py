"""Every manifest we ship is accepted by the real API server, and the scheduler configuration by
the real kube-scheduler. What the admission policies refuse: e2e/test_admission_policies.py."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from nativedra.base.kube.names import EVERY_NODE_PROFILE
from nativedra.cluster import ControlPlane, wait_for
from nativedra.objects import apply_documents
from testkit.manifests import kustomize

REPO = Path(__file__).resolve().parent.parent
MANIFESTS = REPO / "manifests"
CRDS = REPO / "e2e" / "crds"


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
    daemonset = apps.read_namespaced_daemon_set("nativedra-plugin", "nativedra-plugin")
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


def _pod_templates(documents: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each workload's pod template by workload name (the CronJob's through its jobTemplate)."""
    found = {}
    for document in documents:
        spec = document.get("spec", {})
        template = spec.get("jobTemplate", {}).get("spec", {}).get("template") or spec.get("template")
        if document["kind"] in {"Deployment", "DaemonSet", "CronJob"}:
            found[document["metadata"]["name"]] = {**template, "namespace": document["metadata"]["namespace"]}
    return found


def _create_pod(api: client.ApiClient, namespace: str, template: dict[str, Any]) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "psa-"}, "spec": template["spec"]}
    client.CoreV1Api(api).create_namespaced_pod(namespace, pod, dry_run="All")


def test_every_shipped_pod_passes_its_namespaces_pod_security(api: client.ApiClient, installed: Any) -> None:
    """nativedra-system enforces PSA restricted (the extender, its certificate renewal, the second
    scheduler); only the plugin's own namespace is privileged. Each shipped pod is admitted where it
    lives, and neither plugin (nvml, nor simulated with its hostPaths) would be in nativedra-system."""
    templates = _pod_templates(installed)
    simulated = _pod_templates(kustomize(MANIFESTS / "overlays" / "simulated-node"))["nativedra-plugin"]
    core = client.CoreV1Api(api)
    enforced = {
        name: core.read_namespace(name).metadata.labels["pod-security.kubernetes.io/enforce"]
        for name in ("nativedra-system", "nativedra-plugin")
    }
    assert enforced == {"nativedra-system": "restricted", "nativedra-plugin": "privileged"}
    assert {name: t["namespace"] for name, t in templates.items()} == {
        "nativedra-plugin": "nativedra-plugin",
        "nativedra-extender": "nativedra-system",
        "nativedra-extender-cert-renewal": "nativedra-system",
        "nativedra-scheduler": "nativedra-system",
    }
    for template in [*templates.values(), simulated]:
        _create_pod(api, template["namespace"], template)
    for plugin in (templates["nativedra-plugin"], simulated):
        # An account that exists there, so that Pod Security is the only reason left to refuse.
        moved = {**plugin, "spec": {**plugin["spec"], "serviceAccountName": "nativedra-extender"}}
        with pytest.raises(client.ApiException) as refused:
            _create_pod(api, "nativedra-system", moved)
        assert refused.value.status == 403 and "violates PodSecurity" in str(refused.value.body)


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
