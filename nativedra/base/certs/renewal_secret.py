"""A certificate pair renewed in its Secret (`tls.crt`, `tls.key`; `ca.crt`, the trusted CA bundle,
is left as it is): the extender's serving Secret and the second scheduler's client Secret, with the
CA read from a Secret of its own (`ca.crt`, `ca.key`, and during a rotation `previous.crt`).

The update carries the resourceVersion that was read: when another run (or an admin) changed the
Secret in between, the API server refuses it with 409 Conflict and the Secret is read and judged
again, so two runs never overwrite each other's certificate and a renewal is never made twice."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from cryptography import x509
from kubernetes import client

from nativedra.base.certs.renewal import Ca, Outcome, Policy, RenewalError, decide_and_renew, load_ca, load_leaf

SERVING_CERT = "tls.crt"
SERVING_KEY = "tls.key"
CA_CERT = "ca.crt"
CA_KEY = "ca.key"
PREVIOUS_CA = "previous.crt"  # the CA being rotated out (rotation.py): its leaves are re-issued at once
ATTEMPTS = 3
TIMEOUT_S = 30.0


def _refused(error: client.ApiException, what: str) -> RenewalError:
    try:
        detail = json.loads(error.body or "{}").get("message") or error.reason
    except (ValueError, AttributeError):
        detail = error.reason
    return RenewalError(f"{what}: {error.status} {detail}")


def read(core: client.CoreV1Api, namespace: str, name: str) -> Any:
    try:
        return core.read_namespaced_secret(name, namespace, _request_timeout=TIMEOUT_S)
    except client.ApiException as error:
        raise _refused(error, f"Secret {namespace}/{name}: get") from error


def value(secret: Any, key: str) -> bytes:
    where = f"Secret {secret.metadata.namespace}/{secret.metadata.name}"
    encoded = (secret.data or {}).get(key)
    if not encoded:
        raise RenewalError(f"{where}: key {key} is missing or empty")
    try:
        return base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as error:
        raise RenewalError(f"{where} key {key}: not base64 ({error})") from error


def read_ca(core: client.CoreV1Api, namespace: str, name: str) -> tuple[Ca, x509.Certificate | None]:
    return ca_of(read(core, namespace, name))


def ca_of(secret: Any) -> tuple[Ca, x509.Certificate | None]:
    """The signing CA a CA Secret holds and, while a rotation is under way, the previous one
    (rotation.py). A CA Secret that cert-manager issued keeps the CA as tls.crt and tls.key (no
    ca.key): read as such."""
    data = secret.data or {}
    where = f"Secret {secret.metadata.namespace}/{secret.metadata.name}"
    cert_key, key_key = (
        (SERVING_CERT, SERVING_KEY) if data.get(SERVING_KEY) and not data.get(CA_KEY) else (CA_CERT, CA_KEY)
    )
    ca = load_ca(value(secret, cert_key), f"{where} key {cert_key}", value(secret, key_key), f"{where} key {key_key}")
    previous = None
    if data.get(PREVIOUS_CA):
        previous = load_leaf(value(secret, PREVIOUS_CA), f"{where} key {PREVIOUS_CA}")
    return ca, previous


def renew_secret(
    core: client.CoreV1Api,
    namespace: str,
    name: str,
    ca: Ca,
    policy: Policy,
    *,
    previous: x509.Certificate | None = None,
) -> Outcome:
    for _ in range(ATTEMPTS):
        secret = read(core, namespace, name)
        where = f"Secret {namespace}/{name} key {SERVING_CERT}"
        current = load_leaf(value(secret, SERVING_CERT), where)
        issued, message = decide_and_renew(current, where, ca, policy, previous)
        if issued is None:
            return Outcome(False, message)
        secret.data = {
            **secret.data,
            SERVING_CERT: base64.b64encode(issued.cert_pem()).decode(),
            SERVING_KEY: base64.b64encode(issued.key_pem()).decode(),
        }
        try:  # the body keeps metadata.resourceVersion as read: a PUT on a changed Secret is refused
            core.replace_namespaced_secret(name, namespace, secret, _request_timeout=TIMEOUT_S)
        except client.ApiException as error:
            if error.status == 409:
                continue
            raise _refused(error, f"Secret {namespace}/{name}: update") from error
        return Outcome(True, message)
    raise RenewalError(f"Secret {namespace}/{name}: changed under each of {ATTEMPTS} attempts to update it")
