"""Kueue's one Configuration counts every shipped nativedra DeviceClass and leaves the extender marker
out; Kueue's inline webhook patches and conversion webhooks are applied as kustomize would, calling
the controller on loopback."""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from nativedra.base.kube.names import DRIVER_NAME, EXTENDER_MARKER, FRACTION_CLASS, MIG_CLASS
from nativedra.cluster.addons import KUEUE, controller_config, conversions, kueue_metrics_certificate
from nativedra.cluster.addons import webhook_configurations as configurations_of
from nativedra.cluster.controlplane import ControlPlaneError
from nativedra.cluster.kueue_config import (
    CONFIG_API_VERSION,
    DEVICE_CLASS_MAPPINGS,
    FEATURE_GATES,
    GPU_MEMORY,
    VERSIONS,
    WHOLE_GPUS,
    kueue_version,
    webhook_replacements,
)

REPO = Path(__file__).resolve().parents[3]


def _shipped_classes() -> set[str]:
    documents = yaml.safe_load_all((REPO / "manifests/base/deviceclasses.yaml").read_text())
    return {d["metadata"]["name"] for d in documents if d and d["kind"] == "DeviceClass"}


@pytest.mark.parametrize("version", VERSIONS)
def test_every_shipped_device_class_is_mapped_once_and_the_marker_left_out(version: str) -> None:
    """v0.17 counts each DeviceClass as devices of its own resource; v0.19 charges fractions and MIG
    placements the memory counter they consume, and its configuration names no gate it removed."""
    config = controller_config(dataclasses.replace(KUEUE, version=version), 9443, 8081, Path("/certs"))
    mappings = config["resources"]["deviceClassMappings"]
    classes = [name for mapping in mappings for name in mapping["deviceClassNames"]]
    assert sorted(classes) == sorted(_shipped_classes()), "every DeviceClass of manifests/base, once"
    assert len({m["name"] for m in mappings}) == len(mappings)
    assert config["resources"]["excludeResourcePrefixes"] == [EXTENDER_MARKER]
    if version == "v0.17.0":
        assert config["featureGates"] == FEATURE_GATES
        assert FEATURE_GATES["DynamicResourceAllocation"] is True, "without it claims are admitted for free"
        assert len(mappings) == len(DEVICE_CLASS_MAPPINGS) and not any("sources" in m for m in mappings)
    else:
        assert "DynamicResourceAllocation" not in config["featureGates"], "v0.19 refuses to start with it"
        by_name = {m["name"]: m for m in mappings}
        assert sorted(by_name[GPU_MEMORY]["deviceClassNames"]) == sorted([FRACTION_CLASS, MIG_CLASS])
        (source,) = by_name[GPU_MEMORY]["sources"]
        assert source["counter"]["name"] == "memory" and source["counter"]["driver"] == DRIVER_NAME
        assert "sources" not in by_name[WHOLE_GPUS], "a counted class refuses extended-resource pods"
    assert config["webhook"] == {"port": 9443, "host": "127.0.0.1", "certDir": "/certs"}
    assert config["apiVersion"] == CONFIG_API_VERSION and config["kind"] == "Configuration"
    assert config["leaderElection"] == {"leaderElect": False}


def test_an_unknown_kueue_version_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NATIVEDRA_KUEUE_VERSION", "v0.18.0")
    with pytest.raises(ValueError, match=r"v0\.17\.0 or v0\.19\.0"):
        kueue_version()
    monkeypatch.delenv("NATIVEDRA_KUEUE_VERSION")
    assert kueue_version() == "v0.19.0"


def test_replacements_copy_one_webhooks_selector_to_the_others() -> None:
    """Kueue v0.19's webhook kustomization: vpod's namespaceSelector copied to mpod and mjob (and to
    a named webhook that is absent: nothing); another replacement form is refused."""
    selector = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["x"]}]}
    validating: dict[str, Any] = {
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "v"},
        "webhooks": [{"name": "vpod.kb.io", "namespaceSelector": selector}, {"name": "vjob.kb.io"}],
    }
    mutating: dict[str, Any] = {
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "m"},
        "webhooks": [{"name": "mpod.kb.io"}],
    }
    replacement: dict[str, Any] = {
        "source": {
            "kind": "ValidatingWebhookConfiguration",
            "name": "v",
            "fieldPath": "webhooks.[name=vpod.kb.io].namespaceSelector",
        },
        "targets": [
            {
                "select": {"kind": "MutatingWebhookConfiguration", "name": "m"},
                "fieldPaths": [
                    "webhooks.[name=mpod.kb.io].namespaceSelector",
                    "webhooks.[name=mray.kb.io].namespaceSelector",
                ],
            },
            {
                "select": {"kind": "ValidatingWebhookConfiguration", "name": "v"},
                "fieldPaths": ["webhooks.[name=vjob.kb.io].namespaceSelector"],
            },
        ],
    }
    done_validating, done_mutating = webhook_replacements([validating, mutating], [replacement])
    assert done_mutating["webhooks"] == [{"name": "mpod.kb.io", "namespaceSelector": selector}]
    assert done_validating["webhooks"][1] == {"name": "vjob.kb.io", "namespaceSelector": selector}
    assert "namespaceSelector" not in validating["webhooks"][1], "the input is left as it was"
    odd = {**replacement, "source": {**replacement["source"], "fieldPath": "metadata.labels"}}
    with pytest.raises(ValueError, match="unsupported kustomize replacement"):
        webhook_replacements([validating, mutating], [odd])


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
