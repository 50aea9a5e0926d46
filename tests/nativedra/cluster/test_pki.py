"""The local control plane's TLS material: every certificate is signed by the CA it is meant to
chain to, names what clients will dial, is usable for its one purpose, and every key is
readable by the owner only."""

from __future__ import annotations

import datetime as dt
import ssl
import stat
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from nativedra.cluster import pki


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _usage(cert: x509.Certificate) -> list[x509.ObjectIdentifier]:
    return list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def _is_ca(cert: x509.Certificate) -> bool:
    return cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def _matches(cert_path: Path, key_path: Path) -> bool:
    key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    encoding = serialization.Encoding.PEM
    return bool(
        _cert(cert_path).public_key().public_bytes(encoding, public) == key.public_key().public_bytes(encoding, public)
    )


def test_the_control_plane_material_chains_to_its_two_cas(tmp_path: Path) -> None:
    material = pki.create(tmp_path / "pki")
    assert material == pki.paths(tmp_path / "pki")
    ca, front_ca = _cert(material.ca_cert), _cert(material.front_proxy_ca)
    assert _is_ca(ca) and _is_ca(front_ca) and ca.subject != front_ca.subject
    for leaf, issuer in (
        (material.serving_cert, ca),
        (material.kubelet_client_cert, ca),
        (material.front_proxy_client_cert, front_ca),
    ):
        cert = _cert(leaf)
        cert.verify_directly_issued_by(issuer)
        assert not _is_ca(cert)
    assert _usage(_cert(material.serving_cert)) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert _usage(_cert(material.kubelet_client_cert)) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert _usage(_cert(material.front_proxy_client_cert)) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_the_serving_certificate_names_every_address_a_client_dials(tmp_path: Path) -> None:
    material = pki.create(tmp_path)
    sans = _cert(material.serving_cert).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)} >= {"127.0.0.1", "10.96.0.1"}, (
        "loopback and the kubernetes Service"
    )
    assert set(sans.get_values_for_type(x509.DNSName)) >= {"localhost", "kubernetes.default.svc"}


def test_certificates_are_valid_now_and_for_months(tmp_path: Path) -> None:
    material = pki.create(tmp_path)
    now = dt.datetime.now(dt.UTC)
    for path in (material.ca_cert, material.serving_cert, material.front_proxy_client_cert):
        cert = _cert(path)
        assert cert.not_valid_before_utc < now, "a clock a little behind must still accept it"
        assert cert.not_valid_after_utc - now > dt.timedelta(days=300)


def test_every_key_is_private_and_belongs_to_its_certificate(tmp_path: Path) -> None:
    material = pki.create(tmp_path)
    assert _mode(tmp_path) == 0o700
    for cert_path, key_path in (
        (material.ca_cert, material.ca_key),
        (material.serving_cert, material.serving_key),
        (material.front_proxy_client_cert, material.front_proxy_client_key),
        (material.kubelet_client_cert, material.kubelet_client_key),
    ):
        assert _mode(key_path) == 0o600
        assert _matches(cert_path, key_path)
    assert _mode(material.service_account_key) == 0o600
    service_account = serialization.load_pem_private_key(material.service_account_key.read_bytes(), password=None)
    published = serialization.load_pem_public_key(material.service_account_pub.read_bytes())
    assert service_account.public_key().public_numbers() == published.public_numbers()  # type: ignore[union-attr]


def test_the_extender_pair_has_its_own_ca_a_loopback_server_and_a_scheduler_client(tmp_path: Path) -> None:
    control_plane = pki.create(tmp_path / "pki")
    tls = pki.extender_tls(tmp_path / "extender")
    ca = _cert(tls.ca_cert)
    assert ca.subject != _cert(control_plane.ca_cert).subject
    server, client = _cert(tls.serving_cert), _cert(tls.client_cert)
    server.verify_directly_issued_by(ca)
    client.verify_directly_issued_by(ca)
    assert _usage(server) == [ExtendedKeyUsageOID.SERVER_AUTH] and _usage(client) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"], "scheduler_config dials serverName localhost"
    assert client.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "kube-scheduler"
    assert _mode(tls.serving_key) == _mode(tls.client_key) == 0o600
    assert _matches(tls.serving_cert, tls.serving_key) and _matches(tls.client_cert, tls.client_key)


def test_renewed_extender_leaves_are_new_and_chain_to_the_same_ca_or_to_a_new_one(tmp_path: Path) -> None:
    tls = pki.extender_tls(tmp_path / "extender")
    first_ca, first_server = _cert(tls.ca_cert), _cert(tls.serving_cert)
    first_client = _cert(tls.client_cert)
    assert _mode(tls.ca_key) == 0o600
    pki.renew_extender_tls(tls)
    assert _cert(tls.ca_cert) == first_ca
    for cert_path, key_path, old in (
        (tls.serving_cert, tls.serving_key, first_server),
        (tls.client_cert, tls.client_key, first_client),
    ):
        assert _cert(cert_path).serial_number != old.serial_number
        _cert(cert_path).verify_directly_issued_by(first_ca)
        assert _matches(cert_path, key_path) and _mode(key_path) == 0o600
    pki.renew_extender_tls(tls, new_ca=True)
    second_ca = _cert(tls.ca_cert)
    assert second_ca.public_key() != first_ca.public_key()
    _cert(tls.serving_cert).verify_directly_issued_by(second_ca)
    _cert(tls.client_cert).verify_directly_issued_by(second_ca)
    assert _matches(tls.serving_cert, tls.serving_key) and _matches(tls.client_cert, tls.client_key)
    assert not list((tmp_path / "extender").glob(".*.new")), "no partial file is left behind"


def test_leaves_name_their_ca_by_key_so_two_cas_of_one_name_can_be_bundled(tmp_path: Path) -> None:
    tls = pki.extender_tls(tmp_path / "extender")
    ca, leaf = _cert(tls.ca_cert), _cert(tls.serving_cert)
    subject_key = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    authority_key = leaf.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    assert authority_key.key_identifier == subject_key.digest


def test_a_node_client_certificate_names_the_node_in_system_nodes(tmp_path: Path) -> None:
    material = pki.create(tmp_path / "pki")
    cert_path, key_path = pki.node_client(material, "real-0", tmp_path / "node")
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:real-0"
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:nodes"
    ca = x509.load_pem_x509_certificate(material.ca_cert.read_bytes())
    cert.verify_directly_issued_by(ca)
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600


def test_a_renewal_swaps_every_extender_file_at_once_as_a_mounted_secret_does(tmp_path: Path) -> None:
    """Each file is a link through `..data`, and a renewal is one rename of that link: a reader
    never finds a certificate beside a key it does not match (kube-scheduler would fail handshakes)."""
    tls = pki.extender_tls(tmp_path)
    files = (tls.ca_cert, tls.ca_key, tls.serving_cert, tls.serving_key, tls.client_cert, tls.client_key)
    before, client_before = (tmp_path / "..data").resolve(), tls.client_cert.read_bytes()
    pki.renew_extender_tls(tls)
    after = (tmp_path / "..data").resolve()
    assert after != before and not before.exists(), "the old version is removed once the link moved"
    assert all(path.is_symlink() and path.resolve().parent == after for path in files)
    assert tls.client_cert.read_bytes() != client_before
    ssl.create_default_context().load_cert_chain(tls.client_cert, tls.client_key)  # the new pair matches
    assert oct(tls.client_key.stat().st_mode & 0o777) == "0o600"
