"""TLS material for a loopback control plane: a cluster CA, the apiserver's serving certificate,
a front-proxy CA and client certificate, and the service-account signing key."""

from __future__ import annotations

import datetime as dt
import functools
import ipaddress
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from nativedra.base.certs.rotation import CA_KEY_USAGE, bundle, new_ca

_VALIDITY = dt.timedelta(days=365)


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    front_proxy_ca: Path
    front_proxy_client_cert: Path
    front_proxy_client_key: Path
    service_account_key: Path
    service_account_pub: Path
    kubelet_client_cert: Path
    kubelet_client_key: Path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        # Key identifiers let a verifier tell apart two CAs of one name (old and new, bundled
        # during a rotation): OpenSSL otherwise tries only the first CA whose name matches.
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(CA_KEY_USAGE, critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    common_name: str,
    usage: x509.ObjectIdentifier | list[x509.ObjectIdentifier],
    sans: list[x509.GeneralName] | None = None,
    organization: str | None = None,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    ca_cert, ca_key = ca
    usages = usage if isinstance(usage, list) else [usage]
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, organization))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def paths(directory: Path) -> Pki:
    """Where the material for a control plane in `directory` lives."""
    return Pki(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        front_proxy_ca=directory / "front-proxy-ca.crt",
        front_proxy_client_cert=directory / "front-proxy-client.crt",
        front_proxy_client_key=directory / "front-proxy-client.key",
        service_account_key=directory / "sa.key",
        service_account_pub=directory / "sa.pub",
        kubelet_client_cert=directory / "apiserver-kubelet-client.crt",
        kubelet_client_key=directory / "apiserver-kubelet-client.key",
    )


# kubeadm's and kind's default Service range: the shipped extender Service's fixed ClusterIP
# (10.96.0.88, manifests/base/extender.yaml) lies in it, as on the clusters admins run.
SERVICE_CIDR = "10.96.0.0/12"
KUBERNETES_SERVICE_IP = str(next(ipaddress.ip_network(SERVICE_CIDR).hosts()))  # the `kubernetes` Service


def create(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    pki = paths(directory)
    ca = _ca("nativedra-local-ca")
    _write_cert(pki.ca_cert, ca[0])
    _write_key(pki.ca_key, ca[1])
    sans: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address(KUBERNETES_SERVICE_IP)),
        x509.DNSName("localhost"),
        x509.DNSName("kubernetes"),
        x509.DNSName("kubernetes.default"),
        x509.DNSName("kubernetes.default.svc"),
    ]
    serving = _leaf(ca, "kube-apiserver", ExtendedKeyUsageOID.SERVER_AUTH, sans)
    _write_cert(pki.serving_cert, serving[0])
    _write_key(pki.serving_key, serving[1])
    # The apiserver's identity towards kubelets (logs, exec), for clusters with a real node.
    kubelet_client = _leaf(ca, "kube-apiserver-kubelet-client", ExtendedKeyUsageOID.CLIENT_AUTH)
    _write_cert(pki.kubelet_client_cert, kubelet_client[0])
    _write_key(pki.kubelet_client_key, kubelet_client[1])
    front_ca = _ca("nativedra-front-proxy-ca")
    _write_cert(pki.front_proxy_ca, front_ca[0])
    front_client = _leaf(front_ca, "front-proxy-client", ExtendedKeyUsageOID.CLIENT_AUTH)
    _write_cert(pki.front_proxy_client_cert, front_client[0])
    _write_key(pki.front_proxy_client_key, front_client[1])
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(pki.service_account_key, sa_key)
    pki.service_account_pub.write_bytes(
        sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return pki


def _load_ca(pki: Pki) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{pki.ca_key}: expected the EC key this module writes")
    return x509.load_pem_x509_certificate(pki.ca_cert.read_bytes()), key


def node_client(pki: Pki, node: str, directory: Path) -> tuple[Path, Path]:
    """A kubelet's client certificate (`system:node:<node>` in `system:nodes`, so the Node
    authorizer and NodeRestriction apply to it as on any cluster) and its key."""
    directory.mkdir(parents=True, exist_ok=True)
    user = f"system:node:{node}"
    cert, key = _leaf(_load_ca(pki), user, ExtendedKeyUsageOID.CLIENT_AUTH, organization="system:nodes")
    cert_path, key_path = directory / "kubelet-client.crt", directory / "kubelet-client.key"
    _write_cert(cert_path, cert)
    _write_key(key_path, key)
    return cert_path, key_path


@dataclass(frozen=True)
class ExtenderTls:
    """Mutual TLS between a local kube-scheduler and `nativedra extender`: the extender serves
    `serving_cert` and accepts clients signed by `ca_cert`; the scheduler trusts `ca_cert` and
    presents `client_cert`."""

    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    client_cert: Path
    client_key: Path
    ca_key: Path  # kept so that the leaves can be re-issued under the same CA (rotation tests)


def _extender_paths(directory: Path) -> ExtenderTls:
    return ExtenderTls(
        ca_cert=directory / "extender-ca.crt",
        serving_cert=directory / "extender.crt",
        serving_key=directory / "extender.key",
        client_cert=directory / "scheduler-client.crt",
        client_key=directory / "scheduler-client.key",
        ca_key=directory / "extender-ca.key",
    )


def _publish(tls: ExtenderTls, written: dict[Path, Callable[[Path], object]]) -> None:
    """The way the kubelet updates a mounted Secret: every file of a version in a new directory, then
    one rename of the `..data` link to it, so a reader sees the old set or the new one and never a
    certificate beside a key it does not match (kube-scheduler would fail its handshakes until its
    next read). Each file is a link through `..data`; files not in `written` carry over."""
    directory = tls.ca_cert.parent
    data = directory / "..data"
    version = directory / f"..{dt.datetime.now(dt.UTC):%Y%m%d%H%M%S%f}"
    version.mkdir(mode=0o700)
    for path in (tls.ca_cert, tls.ca_key, tls.serving_cert, tls.serving_key, tls.client_cert, tls.client_key):
        target = version / path.name
        if path in written:
            written[path](target)
        else:
            target.write_bytes(path.read_bytes())
            target.chmod(path.stat().st_mode & 0o777)
        if not path.is_symlink():
            path.symlink_to(Path("..data") / path.name)
    old = data.resolve() if data.is_symlink() else None
    link = directory / "..data_tmp"
    link.symlink_to(version.name)
    link.replace(data)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _leaves(
    tls: ExtenderTls, ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey]
) -> dict[Path, Callable[[Path], object]]:
    sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    serving = _leaf(ca, "nativedra-extender", ExtendedKeyUsageOID.SERVER_AUTH, sans)
    client = _leaf(ca, "kube-scheduler", ExtendedKeyUsageOID.CLIENT_AUTH)
    return {
        tls.serving_cert: functools.partial(_write_cert, cert=serving[0]),
        tls.serving_key: functools.partial(_write_key, key=serving[1]),
        tls.client_cert: functools.partial(_write_cert, cert=client[0]),
        tls.client_key: functools.partial(_write_key, key=client[1]),
    }


def rotate_extender_ca(tls: ExtenderTls, step: str) -> None:
    """One step of `nativedra extender-certs rotate-ca` (nativedra/base/certs/rotation.py) on these
    files, laid out as the kubelet syncs the Secrets: `start` makes a new CA (kept beside the files,
    `*-next.*`) and the trust bundle `ca_cert` old + new; `switch` signs with the new CA (`ca_key`,
    `ca_cert` new + old: the signer first) and swaps in leaves it signed; `finish` leaves the new CA
    alone in `ca_cert`. Each step's files change at once."""
    next_cert, next_key = tls.ca_cert.with_suffix(".next.crt"), tls.ca_key.with_suffix(".next.key")
    current = x509.load_pem_x509_certificates(tls.ca_cert.read_bytes())
    if step == "start":
        made = new_ca(current[0].subject, dt.datetime.now(dt.UTC))
        next_cert.write_bytes(made.cert_pem())
        _write_key(next_key, made.key)
        _publish(tls, {tls.ca_cert: lambda path: path.write_bytes(bundle(current[0], made.cert))})
        return
    upcoming = x509.load_pem_x509_certificate(next_cert.read_bytes())
    if step == "switch":
        key = serialization.load_pem_private_key(next_key.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise TypeError(f"{next_key}: expected the EC key `start` wrote")
        written: dict[Path, Callable[[Path], object]] = {
            tls.ca_cert: lambda path: path.write_bytes(bundle(upcoming, *current)),
            tls.ca_key: functools.partial(_write_key, key=key),
        }
        _publish(tls, {**written, **_leaves(tls, (upcoming, key))})
    elif step == "finish":
        _publish(tls, {tls.ca_cert: lambda path: path.write_bytes(bundle(upcoming))})
    else:
        raise ValueError(f"unknown rotation step {step!r}: start, switch or finish")


def extender_tls(directory: Path) -> ExtenderTls:
    """A CA of its own (so a test never needs the control plane's CA key) and the two leaves, laid
    out as a mounted Secret is (see `_publish`)."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    tls = _extender_paths(directory)
    ca = _ca("nativedra-extender-ca")
    written: dict[Path, Callable[[Path], object]] = {
        tls.ca_cert: functools.partial(_write_cert, cert=ca[0]),
        tls.ca_key: functools.partial(_write_key, key=ca[1]),
    }
    _publish(tls, {**written, **_leaves(tls, ca)})
    return tls


def renew_extender_tls(tls: ExtenderTls, new_ca: bool = False) -> None:
    """New serving and client leaves in place of the old ones, signed by the same CA or, with
    `new_ca`, by a new CA that replaces `ca_cert` and `ca_key`; every file changes at once."""
    written: dict[Path, Callable[[Path], object]] = {}
    if new_ca:
        ca = _ca("nativedra-extender-ca")
        written = {
            tls.ca_cert: functools.partial(_write_cert, cert=ca[0]),
            tls.ca_key: functools.partial(_write_key, key=ca[1]),
        }
    else:
        ca = _extender_ca(tls)
    _publish(tls, {**written, **_leaves(tls, ca)})


def _extender_ca(tls: ExtenderTls) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = serialization.load_pem_private_key(tls.ca_key.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{tls.ca_key}: expected the EC key this module writes")
    return x509.load_pem_x509_certificate(tls.ca_cert.read_bytes()), key


def extender_leaf(
    tls: ExtenderTls, directory: Path, common_name: str, usages: list[x509.ObjectIdentifier], dns: list[str]
) -> tuple[Path, Path]:
    """Another leaf of the extender's CA (certificate, key) in `directory`: what else a CA may sign,
    such as a serving certificate made by Helm's genSignedCert (serverAuth and clientAuth)."""
    cert, key = _leaf(_extender_ca(tls), common_name, usages, [x509.DNSName(name) for name in dns])
    cert_path, key_path = directory / f"{common_name}.crt", directory / f"{common_name}.key"
    _write_cert(cert_path, cert)
    _write_key(key_path, key)
    return cert_path, key_path
