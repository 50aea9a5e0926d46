"""Rotating the extender's CA with no refused handshake, in three steps an admin runs in order
(`nativedra extender-certs rotate-ca start|switch|finish`; docs/install.md, "Rotating the CA"):

1. start: a new CA is made (kept as `next.crt`, `next.key` in the CA Secret) and every trust bundle
   (`ca.crt` of the serving Secret, which the extender trusts for clients, and of the client Secret,
   which the scheduler trusts for the extender) becomes old + new. Leaves stay as they are.
2. switch, once every reader has the bundle (the kubelet syncs mounted Secrets within a minute or
   two; a static-pod scheduler's caFile is copied and the scheduler restarted): the new CA signs
   (`ca.crt`, `ca.key`; the old one kept as `previous.crt`), and the Secrets' leaves are re-issued
   by it. `renew` re-issues any leaf of `previous.crt` at once, so the daily runs on control-plane
   nodes move their client files too.
3. finish, once no leaf of the old CA is in use: the bundles hold the new CA alone and
   `previous.crt` goes. It refuses while a Secret's leaf is still the old CA's.

Every step reads what is there and does only what is missing, so a step that failed half way is
run again; each write carries the resourceVersion it read (409: another writer; run it again)."""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding
from kubernetes import client

from nativedra.base.certs.renewal import (
    BACKDATE,
    Ca,
    Issued,
    Policy,
    RenewalError,
    issued_by,
    load_ca,
    load_leaf,
    not_after,
)
from nativedra.base.certs.renewal_secret import (
    CA_CERT,
    CA_KEY,
    PREVIOUS_CA,
    SERVING_CERT,
    TIMEOUT_S,
    ca_of,
    read,
    renew_secret,
    value,
)

NEXT_CERT = "next.crt"
NEXT_KEY = "next.key"
CA_LIFETIME = dt.timedelta(days=3650)
CA_KEY_USAGE = x509.KeyUsage(
    digital_signature=True,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    key_cert_sign=True,
    crl_sign=True,
    encipher_only=False,
    decipher_only=False,
)


@dataclass(frozen=True)
class Names:
    """Where the material is: one namespace; the client Secret is optional (None, or absent: a
    default scheduler whose client files live on the control-plane nodes)."""

    namespace: str
    ca_secret: str
    serving_secret: str
    client_secret: str | None


def new_ca(subject: x509.Name, now: dt.datetime, lifetime: dt.timedelta = CA_LIFETIME) -> Issued:
    """A self-signed EC P-256 CA with the old one's subject (so messages and bundles stay readable)."""
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + lifetime)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(CA_KEY_USAGE, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issued(cert, key)


def bundle(*certs: x509.Certificate) -> bytes:
    """A PEM trust bundle: each certificate once, in the order given."""
    seen: list[bytes] = []
    for cert in certs:
        pem = cert.public_bytes(Encoding.PEM)
        if pem not in seen:
            seen.append(pem)
    return b"".join(seen)


def _update(core: client.CoreV1Api, secret: Any, change: Callable[[dict[str, bytes]], dict[str, bytes]]) -> bool:
    """Write `change`(decoded data) back when it differs; the body keeps the resourceVersion read."""
    where = f"Secret {secret.metadata.namespace}/{secret.metadata.name}"
    data = {key: base64.b64decode(encoded) for key, encoded in (secret.data or {}).items()}
    changed = change(dict(data))
    if changed == data:
        return False
    secret.data = {key: base64.b64encode(raw).decode() for key, raw in changed.items()}
    try:
        core.replace_namespaced_secret(
            secret.metadata.name, secret.metadata.namespace, secret, _request_timeout=TIMEOUT_S
        )
    except client.ApiException as error:
        detail = "changed meanwhile: run the step again" if error.status == 409 else f"{error.status} {error.reason}"
        raise RenewalError(f"{where}: update refused ({detail}); nothing after it was written") from error
    return True


def _client(core: client.CoreV1Api, names: Names) -> Any | None:
    if names.client_secret is None:
        return None
    try:
        return core.read_namespaced_secret(names.client_secret, names.namespace, _request_timeout=TIMEOUT_S)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise RenewalError(
            f"Secret {names.namespace}/{names.client_secret}: get: {error.status} {error.reason}"
        ) from error


def _trusting(core: client.CoreV1Api, names: Names) -> tuple[list[Any], str]:
    """The Secrets whose ca.crt is a trust bundle: the serving one and, when there, the client one;
    and a note when the client Secret was named but not found (said in every step's output, so a
    wrong name or namespace is not passed over in silence)."""
    found = [read(core, names.namespace, names.serving_secret)]
    client_secret = _client(core, names)
    if client_secret is None:
        skipped = f"; Secret {names.namespace}/{names.client_secret} not found: skipped" if names.client_secret else ""
        return found, skipped
    return [*found, client_secret], ""


def _untrusting(secrets: list[Any], ca: x509.Certificate) -> list[str]:
    """The Secrets whose ca.crt bundle does not hold `ca`."""
    return [
        f"Secret {secret.metadata.namespace}/{secret.metadata.name}"
        for secret in secrets
        if ca not in x509.load_pem_x509_certificates(value(secret, CA_CERT))
    ]


def _upcoming(secret: Any, names: Names) -> Ca:
    where = f"Secret {names.namespace}/{names.ca_secret}"
    return load_ca(
        value(secret, NEXT_CERT), f"{where} key {NEXT_CERT}", value(secret, NEXT_KEY), f"{where} key {NEXT_KEY}"
    )


def _set_bundle(core: client.CoreV1Api, secrets: list[Any], pem: bytes) -> list[str]:
    done = []
    for secret in secrets:
        if _update(core, secret, lambda data: {**data, CA_CERT: pem}):
            done.append(f"Secret {secret.metadata.namespace}/{secret.metadata.name} key {CA_CERT}")
    return done


def start(core: client.CoreV1Api, names: Names, now: dt.datetime, lifetime: dt.timedelta = CA_LIFETIME) -> str:
    secret = read(core, names.namespace, names.ca_secret)
    ca, previous = ca_of(secret)
    if previous is not None:
        raise RenewalError(f"Secret {names.namespace}/{names.ca_secret}: a rotation was switched already: run finish")
    if (secret.data or {}).get(NEXT_CERT):
        upcoming = _upcoming(secret, names)
        made = "kept the new CA made before"
    else:
        issued = new_ca(ca.cert.subject, now, lifetime)
        _update(core, secret, lambda data: {**data, NEXT_CERT: issued.cert_pem(), NEXT_KEY: issued.key_pem()})
        upcoming = Ca(issued.cert, issued.key, f"Secret {names.namespace}/{names.ca_secret} key {NEXT_CERT}")
        made = f"made a new CA valid until {not_after(upcoming.cert):%Y-%m-%dT%H:%M:%SZ}"
    trusting, skipped = _trusting(core, names)
    # Old first: a leaf without an authorityKeyIdentifier (openssl x509 -req makes such) is matched
    # by name alone, and OpenSSL tries the first CA of that name.
    updated = _set_bundle(core, trusting, bundle(ca.cert, upcoming.cert))
    return f"start: {made}; old + new CA trusted in {', '.join(updated) or 'every bundle already'}{skipped}"


def switch(core: client.CoreV1Api, names: Names, policy: Policy) -> str:
    """Refused unless every bundle already trusts the new CA: a serving leaf of a CA the scheduler
    does not trust would fail every call (run start again, and let its readers load it, first)."""
    secret = read(core, names.namespace, names.ca_secret)
    data = secret.data or {}
    trusting, skipped = _trusting(core, names)
    if data.get(NEXT_CERT):
        upcoming = _upcoming(secret, names)
        missing = _untrusting(trusting, upcoming.cert)
        if missing:
            raise RenewalError(f"{', '.join(missing)}: ca.crt does not trust the new CA yet: run start again first")

        def swapped(raw: dict[str, bytes]) -> dict[str, bytes]:
            kept = {k: v for k, v in raw.items() if k not in (NEXT_CERT, NEXT_KEY)}
            return {**kept, PREVIOUS_CA: raw[CA_CERT], CA_CERT: raw[NEXT_CERT], CA_KEY: raw[NEXT_KEY]}

        _update(core, secret, swapped)  # `secret` now holds what was written
    elif not data.get(PREVIOUS_CA):
        raise RenewalError(f"Secret {names.namespace}/{names.ca_secret}: no rotation started: run start first")
    ca, previous = ca_of(secret)
    missing = _untrusting(trusting, ca.cert)
    if missing:
        raise RenewalError(f"{', '.join(missing)}: ca.crt does not trust the new CA: run start again first")
    outcomes = [
        renew_secret(core, names.namespace, secret.metadata.name, ca, policy, previous=previous).message
        for secret in trusting
    ]
    return "switch: the new CA signs; " + "; ".join(outcomes) + skipped


def finish(core: client.CoreV1Api, names: Names) -> str:
    ca_secret = read(core, names.namespace, names.ca_secret)
    ca, previous = ca_of(ca_secret)
    if previous is None:
        if (ca_secret.data or {}).get(NEXT_CERT):
            raise RenewalError(
                f"Secret {names.namespace}/{names.ca_secret}: the rotation is not switched yet: run switch"
            )
        return "finish: no rotation under way: nothing to do"
    trusting, skipped = _trusting(core, names)
    for secret in trusting:
        where = f"Secret {secret.metadata.namespace}/{secret.metadata.name} key {SERVING_CERT}"
        if not issued_by(load_leaf(value(secret, SERVING_CERT), where), ca.cert):
            raise RenewalError(f"{where}: not yet signed by the new CA: run switch (or renew) first")
    updated = _set_bundle(core, trusting, bundle(ca.cert))
    _update(core, ca_secret, lambda data: {k: v for k, v in data.items() if k != PREVIOUS_CA})
    trusted = ", ".join(updated) or "every bundle already"
    return f"finish: only the new CA trusted in {trusted}; the old CA dropped{skipped}"
