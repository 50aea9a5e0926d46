"""Kueue's one Configuration counts every shipped nativedra DeviceClass and leaves the extender marker
out; Kueue's inline webhook patches and conversion webhooks are applied as kustomize would, calling
the controller on loopback."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from nativedra.base.kube.names import EXTENDER_MARKER
from nativedra.cluster.addons import KUEUE, controller_config, conversions, kueue_metrics_certificate
from nativedra.cluster.addons import webhook_configurations as configurations_of
from nativedra.cluster.controlplane import ControlPlaneError
from nativedra.cluster.kueue_config import CONFIG_API_VERSION, DEVICE_CLASS_MAPPINGS, FEATURE_GATES

REPO = Path(__file__).resolve().parents[3]


def _shipped_classes() -> set[str]:
    documents = yaml.safe_load_all((REPO / "manifests/base/deviceclasses.yaml").read_text())
    return {d["metadata"]["name"] for d in documents if d and d["kind"] == "DeviceClass"}


def test_every_shipped_device_class_is_mapped_to_its_own_quota_resource() -> None:
    config = controller_config(KUEUE, 9443, 8081, Path("/certs"))
    mappings = config["resources"]["deviceClassMappings"]
    classes = [name for mapping in mappings for name in mapping["deviceClassNames"]]
    assert sorted(classes) == sorted(_shipped_classes()), "one mapping per DeviceClass of manifests/base"
    assert len({m["name"] for m in mappings}) == len(mappings) == len(DEVICE_CLASS_MAPPINGS)
    assert config["resources"]["excludeResourcePrefixes"] == [EXTENDER_MARKER]
    assert config["featureGates"] == FEATURE_GATES
    assert FEATURE_GATES["DynamicResourceAllocation"] is True, "without it claims are admitted for free"
    assert config["webhook"] == {"port": 9443, "host": "127.0.0.1", "certDir": "/certs"}
    assert config["apiVersion"] == CONFIG_API_VERSION and config["kind"] == "Configuration"
    assert config["leaderElection"] == {"leaderElect": False}


def _kueue_module(root: Path) -> Path:
    """The shape of Kueue's config/components: webhooks patched inline, CRDs with conversion."""
    hooks = root / KUEUE.webhook_dir
    hooks.mkdir(parents=True)
    pod = {"name": "mpod.kb.io", "clientConfig": {"service": {"name": "s", "namespace": "system", "path": "/p"}}}
    other = {"name": "mjob.kb.io", "clientConfig": {"service": {"name": "s", "namespace": "system", "path": "/j"}}}
    manifests = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "mutating-webhook-configuration"},
        "webhooks": [pod, other],
    }
    (hooks / "manifests.yaml").write_text(yaml.safe_dump(manifests))
    selector = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["x"]}]}
    patch = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "mutating-webhook-configuration"},
        "webhooks": [{"name": "mpod.kb.io", "namespaceSelector": selector}],
    }
    kustomization = {"resources": ["manifests.yaml"], "patches": [{"patch": yaml.safe_dump(patch)}]}
    (hooks / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    crds = root / KUEUE.crd_dirs[0]
    crds.mkdir(parents=True)
    for name in ("workloads.kueue.x-k8s.io", "topologies.kueue.x-k8s.io"):
        crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition"}
        (crds / f"{name}.yaml").write_text(yaml.safe_dump({**crd, "metadata": {"name": name}, "spec": {}}))
    return root


def test_kueue_webhooks_keep_the_inline_patch_and_call_loopback(tmp_path: Path) -> None:
    root = _kueue_module(tmp_path)
    (configuration_,) = configurations_of(KUEUE, root, "https://127.0.0.1:9443", b"CA")
    assert configuration_["metadata"]["name"] == "nativedra-kueue-mutating-webhook-configuration"
    pod, job = configuration_["webhooks"]
    assert pod["namespaceSelector"]["matchExpressions"][0]["values"] == ["x"]
    assert "namespaceSelector" not in job, "only the webhook the patch names"
    assert pod["clientConfig"] == {"url": "https://127.0.0.1:9443/p", "caBundle": base64.b64encode(b"CA").decode()}


def test_conversion_webhooks_only_where_kueue_turns_them_on(tmp_path: Path) -> None:
    root = _kueue_module(tmp_path)
    (workloads,) = conversions(KUEUE, root, "https://127.0.0.1:9443", b"CA")
    assert workloads["metadata"]["name"] == "workloads.kueue.x-k8s.io"
    webhook = workloads["spec"]["conversion"]["webhook"]
    assert workloads["spec"]["conversion"]["strategy"] == "Webhook"
    assert webhook["clientConfig"]["url"] == "https://127.0.0.1:9443/convert"


def test_the_metrics_certificate_kueue_insists_on_is_written_once(tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_text("CERT")
    key.write_text("KEY")
    target = tmp_path / "etc" / "kueue" / "metrics" / "certs"
    kueue_metrics_certificate(cert, key, target)
    assert (target / "tls.crt").read_text() == "CERT" and (target / "tls.key").read_text() == "KEY"
    cert.write_text("OTHER")
    kueue_metrics_certificate(cert, key, target)
    assert (target / "tls.crt").read_text() == "CERT", "another cluster's pair is kept"
    blocked = tmp_path / "file"
    blocked.write_text("")
    with pytest.raises(ControlPlaneError, match="create it once as root"):
        kueue_metrics_certificate(cert, key, blocked / "certs")
