"""The demo's kubelet step: prepare the claims of bound pods over each plugin's real socket."""

from __future__ import annotations

import sys

from kubernetes import client

from dra_driver.kubelet_paths import dra_socket
from nativedra.base.kube.pods import pod_claim_names
from nativedra.base.kube.resources import RESOURCE_CLAIMS
from nativedra.cluster.commands import NodeDirs
from nativedra.kubelet_client import prepare
from nativedra.objects import claim_key


def play_kubelet(api: client.ApiClient, namespace: str, dirs: dict[str, NodeDirs]) -> int:
    """Call NodePrepareResources for every claim of every bound pod in `namespace`, as the kubelet
    would; returns how many claims were prepared."""
    prepared = 0
    for pod in client.CoreV1Api(api).list_namespaced_pod(namespace).items:
        node_dirs = dirs.get(pod.spec.node_name)
        if node_dirs is None:
            continue
        for claim_name in filter(None, pod_claim_names(api.sanitize_for_serialization(pod)).values()):
            key = claim_key(RESOURCE_CLAIMS.get(api, claim_name, namespace))
            error = prepare(dra_socket(node_dirs.plugins), "v1", [key]).claims[key[1]].error
            if error:
                print(f"prepare {pod.metadata.name}: {error}", file=sys.stderr, flush=True)
            else:
                prepared += 1
    return prepared
