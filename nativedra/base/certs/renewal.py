"""Certificate renewal, decided and issued without I/O: whether a leaf is due (less than
`renew_before` left), and its successor (a new EC P-256 key, the same subject, SANs, key usages and
extended key usages, signed by the CA). Callers name where each piece of PEM came from, so that an
error says which Secret key or file to fix; nothing is written by this module.

The default renewal window (60 days) is wider than the extender's expiry warning (30 days,
extender/serve/cert_expiry.py): renewal runs first, so a CertificateExpiringSoon event means renewal is
failing, not that it has not started."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificatePublicKeyTypes

RENEW_BEFORE = dt.timedelta(days=60)
LIFETIME = dt.timedelta(days=365)
BACKDATE = dt.timedelta(minutes=5)  # a verifier whose clock is a little behind still accepts a new leaf
# What a renewed leaf keeps of its predecessor; key identifiers are made anew for the new key and CA.
KEPT_EXTENSIONS = (
    x509.BasicConstraints,
    x509.KeyUsage,
    x509.ExtendedKeyUsage,
    x509.SubjectAlternativeName,
)

CaKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


class RenewalError(Exception):
    """Material that cannot be renewed; the message names where it came from and what is wrong."""


@dataclass(frozen=True)
class Ca:
    cert: x509.Certificate
    key: CaKey
    where: str  # where the certificate came from, for messages


@dataclass(frozen=True)
class Policy:
    """When a leaf is due (less than `renew_before` left at `now`) and how long its successor lives."""

    now: dt.datetime
    renew_before: dt.timedelta = RENEW_BEFORE
    lifetime: dt.timedelta = LIFETIME

    def problem(self) -> str | None:
        """Why the window and lifetime do not work together, or None. A lifetime not longer than the
        window would make every run renew again."""
        if self.renew_before <= dt.timedelta(0):
            return "the renewal window must be positive"
        if self.lifetime <= self.renew_before:
            return (
                f"a lifetime of {_days(self.lifetime)} is not longer than the renewal window of "
                f"{_days(self.renew_before)}"
            )
        return None


@dataclass(frozen=True)
class Issued:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )


def not_after(cert: x509.Certificate) -> dt.datetime:
    return cert.not_valid_after_utc


def needs_renewal(cert: x509.Certificate, now: dt.datetime, renew_before: dt.timedelta = RENEW_BEFORE) -> bool:
    """Less than `renew_before` left before notAfter (or already expired)."""
    return not_after(cert) - now < renew_before


def _days(span: dt.timedelta) -> str:
    return f"{span / dt.timedelta(days=1):.1f} days"


def load_leaf(pem: bytes, where: str) -> x509.Certificate:
    """The first certificate of `pem` (a chain may follow it)."""
    try:
        certs = x509.load_pem_x509_certificates(pem)
    except ValueError as error:
        raise RenewalError(f"{where}: not a PEM certificate ({error})") from error
    if not certs:  # pragma: no cover - load_pem_x509_certificates raises on no certificate
        raise RenewalError(f"{where}: no certificate")
    return certs[0]


def load_ca(cert_pem: bytes, cert_where: str, key_pem: bytes, key_where: str) -> Ca:
    """A CA certificate and its private key, checked to belong together and to be a CA."""
    cert = load_leaf(cert_pem, cert_where)
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as error:
        raise RenewalError(f"{key_where}: not an unencrypted PEM private key ({error})") from error
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise RenewalError(f"{key_where}: a {type(key).__name__}; an EC or RSA CA key is needed")
    if _spki(key.public_key()) != _spki(cert.public_key()):
        raise RenewalError(f"{key_where} is not the key of the certificate in {cert_where}")
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        constraints = None
    if constraints is None or not constraints.ca:
        raise RenewalError(f"{cert_where}: {cert.subject.rfc4514_string()} is not a CA (basicConstraints CA:TRUE)")
    return Ca(cert, key, cert_where)


def _spki(key: CertificatePublicKeyTypes) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _not_issued_by(cert: x509.Certificate, ca: x509.Certificate) -> Exception | None:
    """Why `cert` does not carry `ca`'s signature, or None when it does."""
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature) as error:
        return error
    return None


def issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    return _not_issued_by(cert, ca) is None


def check_issued_by(cert: x509.Certificate, ca: Ca, cert_where: str) -> None:
    """`cert` carries the CA's signature: a successor from this CA is trusted where the old one was."""
    error = _not_issued_by(cert, ca.cert)
    if error is not None:
        raise RenewalError(
            f"{cert_where}: {cert.subject.rfc4514_string()} was not signed by the CA in {ca.where} "
            f"({ca.cert.subject.rfc4514_string()}): {error or type(error).__name__}"
        ) from error


def authority_key_id(ca: Ca) -> x509.AuthorityKeyIdentifier:
    """The CA's own subjectKeyIdentifier, when it has one: OpenSSL (the extender's TLS) finds a leaf's
    issuer by it, and a CA's identifier need not be the SHA-1 of its key (Go 1.26, and so Helm's
    genCA, makes another kind); computed from the key only for a CA that carries none."""
    try:
        ski = ca.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    except x509.ExtensionNotFound:
        return x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key())
    return x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski)


def renew(cert: x509.Certificate, ca: Ca, now: dt.datetime, lifetime: dt.timedelta = LIFETIME) -> Issued:
    """The successor of `cert`: a new key, valid from a little before `now` for `lifetime`."""
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(cert.subject)
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + lifetime)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(authority_key_id(ca), critical=False)
    )
    for extension in cert.extensions:
        if isinstance(extension.value, KEPT_EXTENSIONS):
            builder = builder.add_extension(extension.value, critical=extension.critical)
    return Issued(builder.sign(ca.key, hashes.SHA256()), key)


def ca_outlives(ca: Ca, issued: Issued) -> str | None:
    """A note when the CA expires before the leaf it just signed: the leaf is refused from then on,
    and a CA is renewed by hand (docs/install.md, "Certificate rotation")."""
    if not_after(ca.cert) >= not_after(issued.cert):
        return None
    return (
        f"the CA {ca.cert.subject.rfc4514_string()} expires at {not_after(ca.cert):%Y-%m-%dT%H:%M:%SZ}, "
        f"before the renewed certificate ({not_after(issued.cert):%Y-%m-%dT%H:%M:%SZ}): rotate the CA"
    )


@dataclass(frozen=True)
class Outcome:
    """What one renewal run did to one target, in words for the log."""

    renewed: bool
    message: str


def decide_and_renew(
    current: x509.Certificate, where: str, ca: Ca, policy: Policy, previous: x509.Certificate | None = None
) -> tuple[Issued | None, str]:
    """The successor of `current` when it is due (None when not), and what to log. `current` must
    come from `ca` whether or not it is due, so that a wrong CA is reported on the first run, not
    on the run that needed it; during a CA rotation (rotation.py) a leaf of the `previous` CA is due
    at once, so that every leaf moves to the new CA before the old one leaves the trust bundles."""
    if previous is not None and issued_by(current, previous) and not issued_by(current, ca.cert):
        issued = renew(current, ca, policy.now, policy.lifetime)
        return issued, (
            f"{where}: signed by the previous CA {previous.subject.rfc4514_string()} (a CA rotation is under "
            f"way): re-issued by the new one, valid until {not_after(issued.cert):%Y-%m-%dT%H:%M:%SZ}"
        )
    check_issued_by(current, ca, where)
    left = not_after(current) - policy.now
    if not needs_renewal(current, policy.now, policy.renew_before):
        return None, (
            f"{where}: valid until {not_after(current):%Y-%m-%dT%H:%M:%SZ} ({_days(left)} left, "
            f"renewed within {_days(policy.renew_before)} of expiry): nothing to do"
        )
    issued = renew(current, ca, policy.now, policy.lifetime)
    note = ca_outlives(ca, issued)
    message = (
        f"{where}: renewed ({_days(left)} were left); new certificate valid until "
        f"{not_after(issued.cert):%Y-%m-%dT%H:%M:%SZ}"
    )
    return issued, f"{message}; {note}" if note else message
