"""Test-only helpers that read what the real scheduler allocated (builders live in `nativedra.objects`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes import client

from dra_driver.kubelet.opaque_config import API_VERSION
from nativedra.base.kube.names import CDI_CLASS, CDI_VENDOR, DRIVER_NAME, GPU_CLASS
from nativedra.base.kube.pods import pod_claim_names
from nativedra.base.kube.resources import RESOURCE_CLAIMS
from nativedra.cluster import wait_for
from nativedra.cluster.waits import describe_pod
from nativedra.objects import claim_template, gpu_pod, request
from testkit.node_plugin import NodePlugin


def pod_claim(api: client.ApiClient, namespace: str, pod: str) -> dict[str, Any] | None:
    """The ResourceClaim generated for the pod, once it exists."""
    raw = client.CoreV1Api(api).read_namespaced_pod(pod, namespace)
    for name in pod_claim_names(api.sanitize_for_serialization(raw)).values():
        if name:
            return RESOURCE_CLAIMS.get(api, name, namespace)
    return None


def allocated_claim(api: client.ApiClient, namespace: str, pod: str, timeout_s: float = 60) -> dict[str, Any]:
    """The pod's claim once the scheduler has allocated it."""

    def claim() -> dict[str, Any] | None:
        found = pod_claim(api, namespace, pod)
        return found if found and found.get("status", {}).get("allocation") else None

    return wait_for(
        claim, timeout_s, f"allocation of pod {namespace}/{pod}'s claim", lambda: describe_pod(api, namespace, pod)
    )


def allocated_results(api: client.ApiClient, namespace: str, pod: str, timeout_s: float = 60) -> list[dict[str, Any]]:
    """Wait for the pod's claim to be allocated and return its device results."""
    return list(allocated_claim(api, namespace, pod, timeout_s)["status"]["allocation"]["devices"]["results"])


def whole_gpu_claim(
    api: client.ApiClient, namespace: str, pod: str, node: str, index: int | None = None
) -> dict[str, Any]:
    """A pod on `node` with a claim for one whole GPU (GPU `index` if given), once allocated."""
    selector = f"device.attributes['{DRIVER_NAME}'].index == {index}" if index is not None else None
    template = f"{pod}-tpl"
    claim_template(api, namespace, template, [request("gpus", GPU_CLASS, selector)])
    gpu_pod(api, namespace, pod, template, node=node)
    return allocated_claim(api, namespace, pod)


CDI_PREFIX = f"{CDI_VENDOR}-{CDI_CLASS}_"  # a claim's spec file: <prefix><claim UID>.yaml


def spec_files(plugin: NodePlugin) -> list[Path]:
    """The per-claim CDI specs the plugin wrote."""
    return sorted(plugin.cdi_dir.glob(f"{CDI_PREFIX}*.yaml")) if plugin.cdi_dir.exists() else []


def bad_config_template(api: client.ApiClient, namespace: str, name: str = "bad-config") -> None:
    """A claim template whose opaque config the plugin must refuse (MPS at 300% of the threads)."""
    bad_config = {
        "driver": DRIVER_NAME,
        "parameters": {
            "apiVersion": API_VERSION,
            "kind": "GpuConfig",
            "sharing": {"strategy": "MPS", "mps": {"activeThreadPercentage": 300}},
        },
    }
    gpus = request("gpus", GPU_CLASS)
    claim_template(api, namespace, name, [gpus], config=[{"requests": ["gpus"], "opaque": bad_config}])
