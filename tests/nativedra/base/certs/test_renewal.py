"""Renewal is decided by the time left (strictly inside the window, which opens before the extender's
expiry warning) and issues a successor that a real X.509 path validation accepts for the same name
and purpose: same subject, SANs and usages, a new key, signed by the CA. Bad CA material and a
certificate from another CA are refused with the place they came from named."""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID
from cryptography.x509.verification import PolicyBuilder, Store

from nativedra.base.certs.renewal import (
    LIFETIME,
    RENEW_BEFORE,
    Ca,
    Policy,
    RenewalError,
    check_issued_by,
    decide_and_renew,
    load_ca,
    load_leaf,
    needs_renewal,
    renew,
)
from nativedra.cli import build_parser
from nativedra.cluster.pki import ExtenderTls, extender_tls

NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> ExtenderTls:
    return extender_tls(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory) -> ExtenderTls:
    """Material of a second CA of the same name."""
    return extender_tls(tmp_path_factory.mktemp("other"))


def _ca(tls: ExtenderTls) -> Ca:
    return load_ca(tls.ca_cert.read_bytes(), "ca.crt", tls.ca_key.read_bytes(), "ca.key")


def _cert(path: Path) -> x509.Certificate:
    return load_leaf(path.read_bytes(), str(path))


def _extension(cert: x509.Certificate, kind: type[x509.ExtensionType]) -> x509.Extension[x509.ExtensionType]:
    return cert.extensions.get_extension_for_class(kind)


@pytest.mark.parametrize(
    ("left", "due"),
    [
        (dt.timedelta(days=61), False),
        (RENEW_BEFORE, False),  # renewed when less than the window is left
        (RENEW_BEFORE - dt.timedelta(seconds=1), True),
        (dt.timedelta(days=1), True),
        (dt.timedelta(days=-3), True),  # expired: renewed too
    ],
)
def test_a_certificate_is_due_when_less_than_the_window_is_left(
    tls: ExtenderTls, left: dt.timedelta, due: bool
) -> None:
    week = dt.timedelta(days=7)  # issued a week before its notAfter, which may be past
    cert = renew(_cert(tls.serving_cert), _ca(tls), NOW + left - week, week).cert
    assert cert.not_valid_after_utc == NOW + left
    assert needs_renewal(cert, NOW) is due


def test_the_window_opens_before_the_extenders_expiry_warning() -> None:
    parser = build_parser()
    warning_days = parser.parse_args(["extender"]).certificate_warning_days
    renew_args = parser.parse_args(["extender-certs", "renew"])
    assert dt.timedelta(days=warning_days) < RENEW_BEFORE
    assert dt.timedelta(days=renew_args.renew_before_days) == RENEW_BEFORE
    assert dt.timedelta(days=renew_args.lifetime_days) == LIFETIME


def test_the_flags_fall_back_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NATIVEDRA_RENEW_BEFORE_DAYS", "45")
    monkeypatch.setenv("NATIVEDRA_CLIENT_CERT_DIR", "/etc/kubernetes/nativedra-extender")
    args = build_parser().parse_args(["extender-certs", "renew"])
    assert args.renew_before_days == 45.0
    assert args.client_cert_dir == Path("/etc/kubernetes/nativedra-extender")


def test_a_lifetime_inside_the_window_is_refused_before_any_api_call(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    args = parser.parse_args(["extender-certs", "renew", "--lifetime-days", "50", "--kubeconfig", "/nonexistent"])
    assert args.handler(args) == 2
    assert "a lifetime of 50.0 days is not longer than the renewal window of 60.0 days" in capsys.readouterr().err
    assert Policy(NOW, dt.timedelta(days=-1)).problem() == "the renewal window must be positive"
    assert Policy(NOW).problem() is None


def test_the_renewed_serving_certificate_keeps_its_names_and_usages_and_chains_to_the_ca(tls: ExtenderTls) -> None:
    old, ca = _cert(tls.serving_cert), _ca(tls)
    issued = renew(old, ca, NOW, dt.timedelta(days=90))
    new = issued.cert
    assert new.subject == old.subject
    assert new.issuer == ca.cert.subject
    for kind in (x509.SubjectAlternativeName, x509.ExtendedKeyUsage, x509.BasicConstraints):
        assert _extension(new, kind) == _extension(old, kind)
    sans = _extension(new, x509.SubjectAlternativeName).value
    assert isinstance(sans, x509.SubjectAlternativeName)
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert new.serial_number != old.serial_number
    assert new.not_valid_before_utc < NOW and new.not_valid_after_utc == NOW + dt.timedelta(days=90)
    public = new.public_key()
    assert isinstance(public, ec.EllipticCurvePublicKey) and public.curve.name == "secp256r1"
    assert public != old.public_key(), "a new key, not the old one re-signed"
    assert issued.key.public_key() == public
    assert serialization.load_pem_private_key(issued.key_pem(), None).public_key() == public
    # Path validation as a TLS client does it: the CA as the only trust anchor, the name, the purpose.
    store = Store([ca.cert])
    verifier = PolicyBuilder().store(store).time(NOW).build_server_verifier(x509.DNSName("localhost"))
    chain = verifier.verify(load_leaf(issued.cert_pem(), "renewed"), [])
    assert chain[-1] == ca.cert


def test_the_renewed_client_certificate_is_accepted_as_a_client_by_the_same_ca(tls: ExtenderTls) -> None:
    old, ca = _cert(tls.client_cert), _ca(tls)
    new = renew(old, ca, NOW).cert
    assert _extension(new, x509.ExtendedKeyUsage).value == x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])
    # cryptography's client verifier insists on a SAN, which client certificates seldom carry; the
    # extender's real handshake with a renewed client certificate is in e2e/test_cert_renewal.py.
    new.verify_directly_issued_by(ca.cert)
    assert not [e for e in new.extensions if isinstance(e.value, x509.SubjectAlternativeName)]
    assert new.subject == old.subject


def test_a_certificate_from_another_ca_is_refused_naming_both_places(tls: ExtenderTls, other: ExtenderTls) -> None:
    with pytest.raises(RenewalError) as refused:
        check_issued_by(_cert(other.serving_cert), _ca(tls), "Secret ns/s key tls.crt")
    assert "Secret ns/s key tls.crt: CN=nativedra-extender was not signed by the CA in ca.crt" in str(refused.value)
    check_issued_by(_cert(tls.serving_cert), _ca(tls), "Secret ns/s key tls.crt")


def test_a_wrong_ca_is_reported_even_when_nothing_is_due(tls: ExtenderTls, other: ExtenderTls) -> None:
    """Reported on the first daily run, not weeks later on the run that needed it."""
    policy = Policy(NOW)
    issued, message = decide_and_renew(_cert(tls.serving_cert), "tls.crt", _ca(tls), policy)
    assert issued is None and "nothing to do" in message
    with pytest.raises(RenewalError, match="was not signed by the CA"):
        decide_and_renew(_cert(tls.serving_cert), "tls.crt", _ca(other), policy)


def test_a_due_certificate_is_renewed_and_the_message_says_until_when(tls: ExtenderTls) -> None:
    ca = _ca(tls)
    near = renew(_cert(tls.serving_cert), ca, NOW, dt.timedelta(days=10)).cert
    issued, message = decide_and_renew(near, "tls.crt", ca, Policy(NOW, lifetime=dt.timedelta(days=100)))
    assert issued is not None
    assert issued.cert.not_valid_after_utc == NOW + dt.timedelta(days=100)
    assert message.startswith("tls.crt: renewed (10.0 days were left)")
    # The CA of extender_tls lives 365 days: a leaf of 400 would outlive it, and the message says so.
    _, longer = decide_and_renew(near, "tls.crt", ca, Policy(NOW, lifetime=dt.timedelta(days=400)))
    assert "expires at" in longer and "before the renewed certificate" in longer


def test_bad_ca_material_is_refused_naming_where_it_came_from(tls: ExtenderTls, other: ExtenderTls) -> None:
    ca_pem, key_pem = tls.ca_cert.read_bytes(), tls.ca_key.read_bytes()
    with pytest.raises(RenewalError, match=r"^S key ca\.crt: not a PEM certificate"):
        load_ca(b"not pem", "S key ca.crt", key_pem, "S key ca.key")
    with pytest.raises(RenewalError, match=r"^S key ca\.key: not an unencrypted PEM private key"):
        load_ca(
            ca_pem, "S key ca.crt", b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "S key ca.key"
        )
    with pytest.raises(RenewalError, match=r"^S key ca\.key is not the key of the certificate in S key ca\.crt"):
        load_ca(ca_pem, "S key ca.crt", other.ca_key.read_bytes(), "S key ca.key")
    with pytest.raises(RenewalError, match=r"^S key ca\.crt: CN=nativedra-extender is not a CA"):
        load_ca(tls.serving_cert.read_bytes(), "S key ca.crt", tls.serving_key.read_bytes(), "S key ca.key")
    assert load_ca(ca_pem, "S key ca.crt", key_pem, "S key ca.key").where == "S key ca.crt"
