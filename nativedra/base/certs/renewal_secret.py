"""The extender's serving certificate, renewed in its Secret (`tls.crt`, `tls.key`; `ca.crt`, the
client CA, is left as it is), with the CA read from a Secret of its own (`ca.crt`, `ca.key`).

The update carries the resourceVersion that was read: when another run (or an admin) changed the
Secret in between, the API server refuses it with 409 Conflict and the Secret is read and judged
again, so two runs never overwrite each other's certificate and a renewal is never made twice."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from kubernetes import client

from nativedra.base.certs.renewal import Ca, Outcome, Policy, RenewalError, decide_and_renew, load_ca, load_leaf

SERVING_CERT = "tls.crt"
SERVING_KEY = "tls.key"
CA_CERT = "ca.crt"
CA_KEY = "ca.key"
ATTEMPTS = 3
TIMEOUT_S = 30.0


def _refused(error: client.ApiException, what: str) -> RenewalError:
    try:
        detail = json.loads(error.body or "{}").get("message") or error.reason
    except (ValueError, AttributeError):
        detail = error.reason
    return RenewalError(f"{what}: {error.status} {detail}")


def _read(core: client.CoreV1Api, namespace: str, name: str) -> Any:
    try:
        return core.read_namespaced_secret(name, namespace, _request_timeout=TIMEOUT_S)
    except client.ApiException as error:
        raise _refused(error, f"Secret {namespace}/{name}: get") from error


def _value(secret: Any, key: str) -> bytes:
    where = f"Secret {secret.metadata.namespace}/{secret.metadata.name}"
    encoded = (secret.data or {}).get(key)
    if not encoded:
        raise RenewalError(f"{where}: key {key} is missing or empty")
    try:
        return base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as error:
        raise RenewalError(f"{where} key {key}: not base64 ({error})") from error


def read_ca(core: client.CoreV1Api, namespace: str, name: str) -> Ca:
    secret = _read(core, namespace, name)
    where = f"Secret {namespace}/{name}"
    return load_ca(_value(secret, CA_CERT), f"{where} key {CA_CERT}", _value(secret, CA_KEY), f"{where} key {CA_KEY}")


def renew_serving_secret(core: client.CoreV1Api, namespace: str, name: str, ca: Ca, policy: Policy) -> Outcome:
    for _ in range(ATTEMPTS):
        secret = _read(core, namespace, name)
        where = f"Secret {namespace}/{name} key {SERVING_CERT}"
        current = load_leaf(_value(secret, SERVING_CERT), where)
        issued, message = decide_and_renew(current, where, ca, policy)
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
