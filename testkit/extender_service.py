"""The extender as shipped (manifests/base/extender.yaml: its Deployment behind its Service, serving
HTTPS from the nativedra-extender-tls Secret) and kube-scheduler wired to it as
manifests/scheduler/kube-scheduler-config.yaml ships, for a cluster whose host reaches Service
ClusterIPs (a real node running kube-proxy).

The host has no cluster DNS, like a static-pod kube-scheduler on the host network: the shipped
urlPrefix names the Service's fixed ClusterIP, and its tlsConfig files are where a static pod's
hostPath mount puts them (/etc/kubernetes/nativedra-extender/), bound there for the scheduler
alone. Nothing of the shipped extender entry is changed."""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import client

from nativedra.cluster.pki import ExtenderTls

MANIFESTS = Path(__file__).resolve().parents[1] / "manifests"
NAMESPACE = "nativedra-system"
NAME = "nativedra-extender"
SELECTOR = "app.kubernetes.io/name=nativedra-extender"
SERVICE_DNS = f"{NAME}.{NAMESPACE}.svc"
SHIPPED_WIRING = MANIFESTS / "scheduler" / "kube-scheduler-config.yaml"


def shipped_cluster_ip() -> str:
    """The fixed ClusterIP of the shipped extender Service."""
    documents = yaml.safe_load_all((MANIFESTS / "base" / "extender.yaml").read_text())
    (service,) = [d for d in documents if d and d["kind"] == "Service" and d["metadata"]["name"] == NAME]
    return str(service["spec"]["clusterIP"])


def serving_pair(tls: ExtenderTls, dns_name: str, ip: str | None = None) -> tuple[bytes, bytes]:
    """A serving certificate for `dns_name` (and `ip`) signed by `tls`'s CA, and its key (PEM): what
    the openssl lines in manifests/base/extender.yaml (or cert-manager) make for the Service."""
    ca_key = serialization.load_pem_private_key(tls.ca_key.read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{tls.ca_key}: expected an EC key")
    ca_cert = x509.load_pem_x509_certificate(tls.ca_cert.read_bytes())
    names: list[x509.GeneralName] = [x509.DNSName(dns_name)]
    if ip is not None:
        names.append(x509.IPAddress(ipaddress.ip_address(ip)))
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, NAME)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def tls_secret(tls: ExtenderTls) -> dict[str, Any]:
    """The Secret the shipped Deployment mounts: a serving certificate for the Service's DNS name and
    fixed ClusterIP, and the CA that signed the scheduler's client certificate (`tls.client_cert`)."""
    cert, key = serving_pair(tls, SERVICE_DNS, shipped_cluster_ip())
    data = {"tls.crt": cert, "tls.key": key, "ca.crt": tls.ca_cert.read_bytes()}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "nativedra-extender-tls", "namespace": NAMESPACE},
        "data": {name: base64.b64encode(value).decode() for name, value in data.items()},
    }


def shipped_wiring(tls: ExtenderTls, files: Path) -> tuple[dict[str, Any], dict[Path, Path]]:
    """manifests/scheduler/kube-scheduler-config.yaml's profiles and extender entry as shipped, and
    the mount that puts the scheduler's client pair and CA from `tls` at the shipped directory."""
    material = {"ca.crt": tls.ca_cert, "tls.crt": tls.client_cert, "tls.key": tls.client_key}
    return shipped_wiring_of({name: path.read_bytes() for name, path in material.items()}, files)


def shipped_wiring_of(secret: dict[str, bytes], files: Path) -> tuple[dict[str, Any], dict[Path, Path]]:
    """The same from a client Secret's data (`ca.crt`, `tls.crt`, `tls.key`, as the chart makes
    nativedra-scheduler-extender-client), copied into `files` under the names the shipped tlsConfig
    uses."""
    shipped = yaml.safe_load(SHIPPED_WIRING.read_text())
    (extender,) = shipped["extenders"]
    keys = {"caFile": "ca.crt", "certFile": "tls.crt", "keyFile": "tls.key"}
    (directory,) = {Path(extender["tlsConfig"][field]).parent for field in keys}
    files.mkdir(parents=True, exist_ok=True)
    for field, key in keys.items():
        (files / Path(extender["tlsConfig"][field]).name).write_bytes(secret[key])
    return {"profiles": shipped["profiles"], "extenders": shipped["extenders"]}, {directory: files}


def extender_pods(api: client.ApiClient) -> list[Any]:
    return list(client.CoreV1Api(api).list_namespaced_pod(NAMESPACE, label_selector=SELECTOR).items)


def is_ready(pod: Any) -> bool:
    conditions = {c.type: c.status for c in pod.status.conditions or []}
    return pod.metadata.deletion_timestamp is None and conditions.get("Ready") == "True"


def ready_endpoints(api: client.ApiClient) -> list[str]:
    """Addresses of the Service's endpoints that are ready (what kube-proxy routes to)."""
    slices = client.DiscoveryV1Api(api).list_namespaced_endpoint_slice(
        NAMESPACE, label_selector=f"kubernetes.io/service-name={NAME}"
    )
    return [
        address
        for piece in slices.items
        for endpoint in piece.endpoints or []
        if endpoint.conditions and endpoint.conditions.ready
        for address in endpoint.addresses
    ]


def restart_rollout(api: client.ApiClient) -> None:
    """`kubectl rollout restart`: new pods, e.g. once the Secret the old ones waited for exists."""
    stamp = {"kubectl.kubernetes.io/restartedAt": dt.datetime.now(dt.UTC).isoformat()}
    body = {"spec": {"template": {"metadata": {"annotations": stamp}}}}
    client.AppsV1Api(api).patch_namespaced_deployment(NAME, NAMESPACE, body)


def rolled_out(api: client.ApiClient) -> bool:
    """Every replica updated and Ready, and no pod of an older template left."""
    deployment = client.AppsV1Api(api).read_namespaced_deployment(NAME, NAMESPACE)
    status, wanted = deployment.status, deployment.spec.replicas
    current = (
        status.observed_generation == deployment.metadata.generation
        and status.updated_replicas == wanted
        and status.ready_replicas == wanted
        and (status.replicas or 0) == wanted
    )
    return bool(current) and len(extender_pods(api)) == wanted
