"""Validating admission webhooks in one namespace, served from the test process. One on
`pods/eviction`: the API server itself reports every Eviction it is asked for (dry runs apart), so
a test counts what was really sent, whoever sent it. It can hold the first real eviction until the
test lets it go: a deterministic point "mid-decision" at which to pause the process that sent it.
One on Lease updates: the API server slowed, each renewal held for seconds.

The API server calls it over TLS; it serves with the control plane's own loopback certificate (its
SANs include 127.0.0.1) and is registered with the plane's CA as caBundle.
"""

from __future__ import annotations

import base64
import contextlib
import json
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kubernetes import client

from nativedra.cluster import ControlPlane

HOLD_LIMIT_S = 20.0  # under the webhook's 30 s timeout: a forgotten hold never fails the request


@dataclass
class Evictions:
    """What the webhook saw, in arrival order: (pod name, dry run)."""

    seen: list[tuple[str, bool]] = field(default_factory=list)
    hold_first: bool = False
    held: threading.Event = field(default_factory=threading.Event)  # the first real eviction is waiting
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def real(self) -> list[str]:
        with self.lock:
            return [name for name, dry in self.seen if not dry]

    def dry_runs(self) -> list[str]:
        with self.lock:
            return [name for name, dry in self.seen if dry]

    def admit(self, request: dict[str, Any]) -> None:
        dry = bool(request.get("dryRun"))
        with self.lock:
            first_real = not dry and not any(not d for _, d in self.seen)
            self.seen.append((str(request.get("name", "")), dry))
        if first_real and self.hold_first:
            self.held.set()
            self.release.wait(HOLD_LIMIT_S)


def _handler(admit: Callable[[dict[str, Any]], None]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            review = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            request = review.get("request") or {}
            admit(request)
            answer = {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": request.get("uid", ""), "allowed": True},
            }
            body = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


@contextlib.contextmanager
def admission_webhook(
    plane: ControlPlane, namespace: str, name: str, rules: list[dict[str, Any]], admit: Callable[[dict[str, Any]], None]
) -> Iterator[None]:
    """A validating webhook on `rules` in `namespace` that calls `admit` with each request and then
    allows it (whatever `admit` does before returning, the API server waits for)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(admit))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    certs = plane.layout.certs
    context.load_cert_chain(certs.serving_cert, certs.serving_key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    admission = client.AdmissionregistrationV1Api(plane.api_client())
    configuration = f"nd-{name}-{namespace}"
    url = f"https://127.0.0.1:{server.server_address[1]}/{name}"
    webhook = {
        "name": f"{name}.e2e.nativedra.dev",
        "clientConfig": {"url": url, "caBundle": base64.b64encode(certs.ca_cert.read_bytes()).decode()},
        "rules": rules,
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "failurePolicy": "Fail",
        "sideEffects": "None",  # dry runs are sent to it too
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 30,
    }
    admission.create_validating_webhook_configuration({"metadata": {"name": configuration}, "webhooks": [webhook]})
    try:
        yield
    finally:
        with contextlib.suppress(client.ApiException):
            admission.delete_validating_webhook_configuration(configuration)
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def eviction_webhook(plane: ControlPlane, namespace: str, *, hold_first: bool = False) -> Iterator[Evictions]:
    evictions = Evictions(hold_first=hold_first)
    rules = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods/eviction"]}]
    try:
        with admission_webhook(plane, namespace, "evictions", rules, evictions.admit):
            yield evictions
    finally:
        evictions.release.set()


@dataclass
class SlowLeases:
    """Lease writes in one namespace, each held `delay_s` by the API server before it is admitted."""

    delay_s: float = 0.0

    def admit(self, request: dict[str, Any]) -> None:
        time.sleep(self.delay_s)


@contextlib.contextmanager
def slow_leases(plane: ControlPlane, namespace: str) -> Iterator[SlowLeases]:
    slow = SlowLeases()
    rules = [
        {"apiGroups": ["coordination.k8s.io"], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["leases"]}
    ]
    with admission_webhook(plane, namespace, "slow-leases", rules, slow.admit):
        yield slow
