"""The pure parts of a CA rotation: the new CA, the trust bundle, and a leaf of the CA being rotated
out re-issued at once by renewal, while a leaf of an unrelated CA is still refused."""

from __future__ import annotations

import datetime as dt

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import NameOID

from nativedra.base.certs.renewal import Ca, Policy, RenewalError, decide_and_renew, issued_by, renew
from nativedra.base.certs.rotation import bundle, new_ca

NOW = dt.datetime(2035, 6, 1, tzinfo=dt.UTC)
SUBJECT = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "nativedra-extender-ca")])


def _ca(when: dt.datetime = NOW) -> Ca:
    made = new_ca(SUBJECT, when)
    return Ca(made.cert, made.key, "test")


def test_the_new_ca_is_a_ca_for_ten_years_with_the_old_subject() -> None:
    ca = _ca()
    constraints = ca.cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca
    assert ca.cert.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    assert ca.cert.subject == SUBJECT == ca.cert.issuer
    assert dt.timedelta(days=3649) < ca.cert.not_valid_after_utc - NOW <= dt.timedelta(days=3650)


def test_a_bundle_holds_each_ca_once_in_order() -> None:
    old, new = _ca(), _ca()
    pem = bundle(old.cert, new.cert, old.cert)
    assert x509.load_pem_x509_certificates(pem) == [old.cert, new.cert]


def test_a_leaf_of_the_previous_ca_is_renewed_at_once_by_the_new_one() -> None:
    old, new, stranger = _ca(), _ca(), _ca()
    leaf = renew(renew_seed(old), old, NOW).cert  # a year left: not due by time
    issued, message = decide_and_renew(leaf, "tls.crt", new, Policy(NOW), previous=old.cert)
    assert issued is not None and issued_by(issued.cert, new.cert)
    assert "signed by the previous CA" in message
    same, _ = decide_and_renew(renew(renew_seed(new), new, NOW).cert, "tls.crt", new, Policy(NOW), previous=old.cert)
    assert same is None  # already the new CA's and not due
    with pytest.raises(RenewalError, match="was not signed by the CA"):
        decide_and_renew(renew(renew_seed(stranger), stranger, NOW).cert, "tls.crt", new, Policy(NOW), old.cert)


def renew_seed(ca: Ca) -> x509.Certificate:
    """Any certificate to take a subject and extensions from: the CA's own will do."""
    return ca.cert


def test_a_renewed_leaf_names_its_ca_by_the_cas_own_key_identifier() -> None:
    """A CA whose subjectKeyIdentifier is not the SHA-1 of its key (as Go 1.26's, hence Helm's genCA,
    makes): the renewed leaf's authorityKeyIdentifier is that identifier, which OpenSSL matches."""
    made = new_ca(SUBJECT, NOW)
    odd_id = x509.SubjectKeyIdentifier(bytes(range(20)))
    builder = x509.CertificateBuilder().subject_name(SUBJECT).issuer_name(SUBJECT).public_key(made.key.public_key())
    builder = builder.serial_number(1).not_valid_before(NOW).not_valid_after(NOW + dt.timedelta(days=3650))
    builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    cert = builder.add_extension(odd_id, critical=False).sign(made.key, hashes.SHA256())
    ca = Ca(cert, made.key, "helm-like")
    leaf = renew(made.cert, ca, NOW).cert
    aki = leaf.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    assert aki.key_identifier == bytes(range(20))
