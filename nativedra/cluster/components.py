"""Command-line flags of etcd, kube-apiserver, kube-scheduler and kube-controller-manager on
loopback. Pure: paths, ports and feature gates in, argument lists out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nativedra.cluster.pki import SERVICE_CIDR, Pki

PORT_NAMES = ("etcd", "etcd_peer", "apiserver", "scheduler", "kcm")


@dataclass(frozen=True)
class Features:
    """Feature gates and API groups beyond a release's defaults. Users run defaults, so the local
    cluster does too; a test that needs more says which gate and why, e.g. native gang scheduling:
    `Features({"GenericWorkload": True}, ("scheduling.k8s.io/v1beta1",), "native gang scheduling")`."""

    gates: Mapping[str, bool] = field(default_factory=dict)
    runtime_config: tuple[str, ...] = ()
    why: str = ""

    def flags(self) -> list[str]:
        """`--feature-gates` / `--runtime-config`, only when something differs from the defaults."""
        flags = []
        if self.gates:
            flags.append("--feature-gates=" + ",".join(f"{g}={str(v).lower()}" for g, v in sorted(self.gates.items())))
        return flags

    def apiserver_flags(self) -> list[str]:
        extra = [f"--runtime-config={','.join(f'{group}=true' for group in self.runtime_config)}"]
        return self.flags() + (extra if self.runtime_config else [])


DEFAULTS = Features()


def deep_merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Merge `extra` into `base`: nested mappings merge, everything else (lists too) replaces."""
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


@dataclass(frozen=True)
class Layout:
    """Where one control plane's files live, which ports it uses and what it runs beyond defaults."""

    state_dir: Path
    ports: Mapping[str, int]
    certs: Pki
    features: Features = DEFAULTS

    def kubeconfig(self, component: str) -> Path:
        return self.state_dir / f"{component}.kubeconfig"


def etcd_args(layout: Layout) -> list[str]:
    client_url = f"http://127.0.0.1:{layout.ports['etcd']}"
    peer_url = f"http://127.0.0.1:{layout.ports['etcd_peer']}"
    return [
        f"--data-dir={layout.state_dir / 'etcd'}",
        f"--listen-client-urls={client_url}",
        f"--advertise-client-urls={client_url}",
        f"--listen-peer-urls={peer_url}",
        f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=default={peer_url}",
        "--unsafe-no-fsync",  # throwaway test data: durability is not needed, speed is
        "--log-level=warn",
    ]


def apiserver_args(layout: Layout, token_file: Path) -> list[str]:
    certs = layout.certs
    return [
        f"--etcd-servers=http://127.0.0.1:{layout.ports['etcd']}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={layout.ports['apiserver']}",
        "--endpoint-reconciler-type=none",
        f"--cert-dir={layout.state_dir / 'pki'}",
        f"--tls-cert-file={certs.serving_cert}",
        f"--tls-private-key-file={certs.serving_key}",
        f"--client-ca-file={certs.ca_cert}",
        f"--token-auth-file={token_file}",
        f"--requestheader-client-ca-file={certs.front_proxy_ca}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={certs.front_proxy_client_cert}",
        f"--proxy-client-key-file={certs.front_proxy_client_key}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={certs.service_account_pub}",
        f"--service-account-signing-key-file={certs.service_account_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        f"--kubelet-client-certificate={certs.kubelet_client_cert}",
        f"--kubelet-client-key={certs.kubelet_client_key}",
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        "--authorization-mode=Node,RBAC",
        "--allow-privileged=true",
        *layout.features.apiserver_flags(),
    ]


def scheduler_config(layout: Layout, extra: Mapping[str, Any]) -> dict[str, Any]:
    """The KubeSchedulerConfiguration, with `extra` (e.g. extenders) merged in."""
    base = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(layout.kubeconfig("scheduler"))},
        "leaderElection": {"leaderElect": False},
    }
    return deep_merge(base, extra)


def scheduler_args(layout: Layout, config_path: Path) -> list[str]:
    kubeconfig = layout.kubeconfig("scheduler")
    return [
        f"--config={config_path}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={layout.ports['scheduler']}",
        f"--tls-cert-file={layout.certs.serving_cert}",
        f"--tls-private-key-file={layout.certs.serving_key}",
        *layout.features.flags(),
    ]


def controller_manager_args(layout: Layout) -> list[str]:
    certs, kubeconfig = layout.certs, layout.kubeconfig("controller-manager")
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={layout.ports['kcm']}",
        f"--tls-cert-file={certs.serving_cert}",
        f"--tls-private-key-file={certs.serving_key}",
        "--leader-elect=false",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={certs.service_account_key}",
        f"--root-ca-file={certs.ca_cert}",
        f"--cluster-signing-cert-file={certs.ca_cert}",
        f"--cluster-signing-key-file={certs.ca_key}",
        # No kubelet runs: the node-lifecycle controller would taint every fake node.
        "--controllers=*,-node-lifecycle-controller",
        *layout.features.flags(),
    ]
