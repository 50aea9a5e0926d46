"""The upstream webhook configurations, patched as kustomize would and pointed at loopback."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from nativedra.cluster.addons import JOBSET, LWS, Addon, json_patch, webhook_configurations


def test_json_patch_replace_add_remove_on_lists_and_maps() -> None:
    document: dict[str, Any] = {"webhooks": [{"name": "a"}, {"name": "b"}], "metadata": {"name": "x", "drop": 1}}
    patched = json_patch(
        document,
        [
            {"op": "replace", "path": "/webhooks/1", "value": {"name": "B", "objectSelector": {}}},
            {"op": "add", "path": "/webhooks/-", "value": {"name": "c"}},
            {"op": "remove", "path": "/metadata/drop"},
            {"op": "add", "path": "/metadata/labels", "value": {"k/v": "1"}},
        ],
    )
    assert patched == {
        "webhooks": [{"name": "a"}, {"name": "B", "objectSelector": {}}, {"name": "c"}],
        "metadata": {"name": "x", "labels": {"k/v": "1"}},
    }
    assert document["webhooks"][1] == {"name": "b"}, "the input is left as it was"
    with pytest.raises(ValueError, match="unsupported JSON patch op 'move'"):
        json_patch(document, [{"op": "move", "path": "/webhooks/0"}])


def _module(root: Path, webhook_dir: str) -> Path:
    directory = root / webhook_dir
    directory.mkdir(parents=True)
    pod_hook = {
        "name": "mpod.kb.io",
        "clientConfig": {"service": {"name": "webhook-service", "namespace": "system", "path": "/mutate--v1-pod"}},
    }
    manifests = [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "mutating-webhook-configuration"},
            "webhooks": [
                {"name": "m.kb.io", "clientConfig": {"service": {"name": "s", "namespace": "system", "path": "/m"}}},
                pod_hook,
            ],
        }
    ]
    (directory / "manifests.yaml").write_text(yaml.safe_dump_all(manifests))
    patched_hook = {**pod_hook, "objectSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}}
    (directory / "patch.yaml").write_text(
        yaml.safe_dump([{"op": "replace", "path": "/webhooks/1", "value": patched_hook}])
    )
    kustomization = {
        "resources": ["manifests.yaml"],
        "patches": [
            {
                "path": "patch.yaml",
                "target": {"kind": "MutatingWebhookConfiguration", "name": "mutating-webhook-configuration"},
            }
        ],
    }
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return root


@pytest.mark.parametrize("addon", [JOBSET, LWS], ids=lambda a: a.name)
def test_webhooks_call_loopback_with_the_cluster_ca_and_keep_upstream_patches(tmp_path: Path, addon: Addon) -> None:
    root = _module(tmp_path, addon.webhook_dir)
    (configuration,) = webhook_configurations(addon, root, "https://127.0.0.1:9443", b"CA PEM")
    assert configuration["metadata"]["name"] == f"nativedra-{addon.name}-mutating-webhook-configuration"
    first, pods = configuration["webhooks"]
    assert first["clientConfig"] == {
        "url": "https://127.0.0.1:9443/m",
        "caBundle": base64.b64encode(b"CA PEM").decode(),
    }
    assert pods["clientConfig"]["url"] == "https://127.0.0.1:9443/mutate--v1-pod"
    assert pods["objectSelector"] == {"matchExpressions": [{"key": "app", "operator": "Exists"}]}
