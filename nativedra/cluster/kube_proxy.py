"""The upstream kube-proxy (iptables mode) on the host of a local real node, so a Service's ClusterIP
reaches its pods from the host as on any node: the loopback kube-scheduler calls an extender behind
its Service.

It authenticates as kubeadm's kube-proxy does: the ServiceAccount kube-system/kube-proxy bound to the
bootstrap ClusterRole system:node-proxier. The `kubernetes` Service stays with the harness forwarder
(realnode.py): the apiserver listens on loopback only and publishes no endpoints for it
(--endpoint-reconciler-type=none), and kube-proxy would REJECT a Service without endpoints; the
standard `service.kubernetes.io/service-proxy-name` label hands that one Service to another proxy.
kube-proxy changes no sysctl here (no localhost NodePorts, conntrack limits left as they are); its
iptables chains are removed when the node stops (`cleanup`).
"""

from __future__ import annotations

import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client

from nativedra.cluster.credentials import write_kubeconfig

PROCESS = "kube-proxy"
NAMESPACE = "kube-system"
ACCOUNT = "kube-proxy"
ROLE = "system:node-proxier"  # bootstrap ClusterRole: services, endpointslices, nodes, events
PROXY_NAME_LABEL = "service.kubernetes.io/service-proxy-name"
FORWARDER = "nativedra-service-forwarder"
TOKEN_SECONDS = 24 * 3600  # a local node lives hours at most
KUBELET_FIREWALL = "KUBE-FIREWALL"


def kube_proxy_config(kubeconfig: Path, node_name: str, cluster_cidr: str, ports: dict[str, int]) -> dict[str, Any]:
    """KubeProxyConfiguration: iptables mode, health and metrics on loopback, pod traffic told apart
    by the pod CIDR (traffic from the host to a ClusterIP is masqueraded), no sysctl writes."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node_name,
        "clusterCIDR": cluster_cidr,
        "detectLocalMode": "ClusterCIDR",
        "healthzBindAddress": f"127.0.0.1:{ports['healthz']}",
        "metricsBindAddress": f"127.0.0.1:{ports['metrics']}",
        "oomScoreAdj": 0,  # a negative score needs CAP_SYS_RESOURCE, which root lacks on machines like CI's
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "iptables": {"localhostNodePorts": False, "minSyncPeriod": "1s", "syncPeriod": "30s"},
        "nodePortAddresses": ["primary"],
    }


def service_account_kubeconfig(api: client.ApiClient, path: Path, server: str, ca_cert: Path) -> Path:
    """kube-proxy's identity: kube-system/kube-proxy bound to system:node-proxier, with a token."""
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    binding = {
        "metadata": {"name": f"nativedra:{ACCOUNT}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}],
    }
    _create(lambda: core.create_namespaced_service_account(NAMESPACE, {"metadata": {"name": ACCOUNT}}))
    _create(lambda: rbac.create_cluster_role_binding(binding))
    request = {"spec": {"audiences": [], "expirationSeconds": TOKEN_SECONDS}}
    token = core.create_namespaced_service_account_token(ACCOUNT, NAMESPACE, request).status.token
    return write_kubeconfig(path, server, ca_cert, f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}", {"token": token})


def _create(create: Callable[[], object]) -> None:
    """Create an object; one that exists already (a node started again) is fine."""
    try:
        create()
    except client.ApiException as error:
        if error.status != 409:
            raise


def leave_kubernetes_service_to_forwarder(api: client.ApiClient) -> None:
    client.CoreV1Api(api).patch_namespaced_service(
        "kubernetes", "default", {"metadata": {"labels": {PROXY_NAME_LABEL: FORWARDER}}}
    )


def healthy(port: int) -> bool:
    """kube-proxy's /healthz answers 200 once its first sync of the rules is done."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def cleanup(binary: Path) -> subprocess.CompletedProcess[str]:
    """Remove every chain and rule kube-proxy made (iptables, ip6tables, nftables, IPVS), the
    kubelet's KUBE-FIREWALL chain included: `--cleanup` leaves that one to the kubelet, and here
    kube-proxy made it (the node's kubelet makes no chains: makeIPTablesUtilChains is false)."""
    cleaned = subprocess.run([str(binary), "--cleanup"], capture_output=True, text=True, check=False)
    remove_empty_chain(KUBELET_FIREWALL, ("INPUT", "OUTPUT"))
    return cleaned


def remove_empty_chain(chain: str, parents: tuple[str, ...]) -> None:
    """Unlink and delete a filter chain in both families where it holds no rule (kube-proxy writes
    none in KUBE-FIREWALL without localhost NodePorts); a chain with rules is someone else's."""
    for tool in ("iptables", "ip6tables"):
        listed = subprocess.run([tool, "-w", "-S", chain], capture_output=True, text=True, check=False)
        if listed.returncode != 0 or any(line.startswith("-A ") for line in listed.stdout.splitlines()):
            continue
        for parent in parents:
            deleted = 0
            while deleted < 100 and _quiet([tool, "-w", "-D", parent, "-j", chain]):
                deleted += 1
        _quiet([tool, "-w", "-X", chain])


def _quiet(args: list[str]) -> bool:
    return subprocess.run(args, capture_output=True, check=False).returncode == 0
