"""The local real node's kube-proxy configuration: iptables mode, loopback-only endpoints, and no
setting that would write a sysctl or need a capability root lacks on machines like CI's."""

from __future__ import annotations

from pathlib import Path

from nativedra.cluster.kube_proxy import kube_proxy_config


def test_kube_proxy_stays_on_loopback_and_changes_no_kernel_setting() -> None:
    config = kube_proxy_config(Path("/k/kubeconfig"), "node-a", "10.244.0.0/24", {"healthz": 101, "metrics": 102})
    assert (config["apiVersion"], config["kind"], config["mode"]) == (
        "kubeproxy.config.k8s.io/v1alpha1",
        "KubeProxyConfiguration",
        "iptables",
    )
    assert config["clientConnection"] == {"kubeconfig": "/k/kubeconfig"}
    assert config["hostnameOverride"] == "node-a"
    assert (config["clusterCIDR"], config["detectLocalMode"]) == ("10.244.0.0/24", "ClusterCIDR")
    assert config["healthzBindAddress"] == "127.0.0.1:101" and config["metricsBindAddress"] == "127.0.0.1:102"
    # Zero conntrack limits and timeouts leave the kernel's values alone; a negative OOM score
    # would need CAP_SYS_RESOURCE; localhost NodePorts would set route_localnet.
    assert config["conntrack"] == {
        "maxPerCore": 0,
        "min": 0,
        "tcpEstablishedTimeout": "0s",
        "tcpCloseWaitTimeout": "0s",
    }
    assert config["oomScoreAdj"] == 0
    assert config["iptables"]["localhostNodePorts"] is False
