"""A running `nativedra extender` against abusive callers: only a client holding a certificate
from its CA that names the scheduler gets an answer, malformed bodies get a 400 naming the field,
oversized ones a 413, and SIGTERM ends it within 10 s while it is busy."""

from __future__ import annotations

import http.client
import json
import signal
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.x509.oid import ExtendedKeyUsageOID

from nativedra.cluster import ControlPlane, commands, wait_for
from nativedra.cluster.controlplane import free_port
from nativedra.cluster.pki import ExtenderTls, extender_leaf, extender_tls
from nativedra.cluster.waits import http_ok
from testkit.extender_harness import BOUND
from testkit.extender_requests import CLAIMS, MALFORMED

FAST_POD = {"metadata": {"name": "web", "namespace": "default"}, "spec": {"containers": []}}


@dataclass
class Running:
    process: subprocess.Popen[bytes]
    port: int
    probe_port: int
    tls: ExtenderTls
    log: Path

    def context(self, with_certificate: bool = True, certificate: tuple[Path, Path] | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.tls.ca_cert))
        if with_certificate:
            cert, key = certificate or (self.tls.client_cert, self.tls.client_key)
            context.load_cert_chain(str(cert), str(key))
        return context

    def post(
        self, verb: str, body: bytes, with_certificate: bool = True, certificate: tuple[Path, Path] | None = None
    ) -> tuple[int, str]:
        connection = http.client.HTTPSConnection(
            "localhost", self.port, context=self.context(with_certificate, certificate), timeout=30
        )
        try:
            connection.request("POST", f"/{verb}", body=body, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            return response.status, response.read().decode()
        finally:
            connection.close()


@pytest.fixture
def extender(control_plane: ControlPlane, tmp_path: Path) -> Iterator[Running]:
    tls = extender_tls(tmp_path / "tls")
    probe_port = free_port()  # 0 turns the probes off: the probe port is still picked before the start
    log = tmp_path / "extender.log"
    flags = ["--tls-cert-file", str(tls.serving_cert), "--tls-key-file", str(tls.serving_key)]
    flags += ["--client-ca-file", str(tls.ca_cert), "--probe-port", str(probe_port)]
    with log.open("ab") as output:
        process = subprocess.Popen(
            commands.extender(control_plane.kubeconfig, 0, *flags), stdout=output, stderr=subprocess.STDOUT
        )
    try:
        wait_for(lambda: http_ok(f"http://127.0.0.1:{probe_port}/readyz"), 60, "the extender's /readyz", log.read_text)
        found = wait_for(lambda: BOUND.search(log.read_text()), 10, "the port the extender bound", log.read_text)
        yield Running(process, int(found.group(1)), probe_port, tls, log)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_only_a_client_with_a_certificate_from_the_ca_is_answered(extender: Running) -> None:
    body = json.dumps({"Pod": FAST_POD, "NodeNames": ["a", "b"]}).encode()
    status, text = extender.post("filter", body)
    assert (status, json.loads(text)) == (
        200,
        {"NodeNames": ["a", "b"], "Nodes": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""},
    )
    with pytest.raises((ssl.SSLError, ConnectionError)):
        extender.post("filter", body, with_certificate=False)


def test_a_certificate_of_the_ca_that_does_not_name_the_scheduler_is_refused(extender: Running, tmp_path: Path) -> None:
    """The extender's own serving leaf as a client: as shipped here (serverAuth only) OpenSSL refuses
    its purpose; as Helm's genSignedCert makes it (serverAuth and clientAuth, same CA as the
    scheduler's) only the identity check stands in the way, and closes the connection before a
    request is read. So does any other leaf of the CA that names neither CN nor SAN kube-scheduler."""
    body = json.dumps({"Pod": FAST_POD, "NodeNames": ["a"]}).encode()
    both = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    helm_serving = extender_leaf(extender.tls, tmp_path, "nativedra-extender", both, ["nativedra-extender.svc"])
    other_client = extender_leaf(extender.tls, tmp_path, "ci-bot", [ExtendedKeyUsageOID.CLIENT_AUTH], ["ci-bot"])
    for certificate in ((extender.tls.serving_cert, extender.tls.serving_key), helm_serving, other_client):
        with pytest.raises((ssl.SSLError, ConnectionError)):
            extender.post("filter", body, certificate=certificate)
    log = extender.log.read_text()
    assert "client certificate names nativedra-extender, nativedra-extender.svc, none of kube-scheduler" in log
    assert "client certificate names ci-bot, none of kube-scheduler" in log
    metrics = http.client.HTTPConnection("127.0.0.1", extender.probe_port, timeout=10)
    metrics.request("GET", "/metrics")
    assert "nativedra_extender_clients_refused_total 2.0" in metrics.getresponse().read().decode()
    assert extender.post("filter", body)[0] == 200, "the scheduler's certificate is still answered"


def test_malformed_and_oversized_bodies_are_refused_with_a_reason(extender: Running) -> None:
    for shape, (body, field) in MALFORMED.items():
        for verb in ("filter", "prioritize"):
            status, text = extender.post(verb, body)
            assert status == 400 and field in json.loads(text)["Error"], (shape, verb, status, text)
    names = [f"node-{index:07d}-{'x' * 100}" for index in range(20_000)]
    status, text = extender.post("filter", json.dumps({"Pod": FAST_POD, "NodeNames": names}).encode())
    assert status == 413, text
    assert extender.process.poll() is None, extender.log.read_text()


def test_sigterm_ends_a_busy_extender_within_10_seconds(extender: Running) -> None:
    pod = {**FAST_POD, "spec": {"containers": [], "resourceClaims": CLAIMS}}
    body = json.dumps({"Pod": pod, "NodeNames": [f"node-{i:05d}" for i in range(5000)]}).encode()
    stop = threading.Event()
    answered = [0] * 16

    def hammer(caller: int) -> None:
        while not stop.is_set():
            try:
                extender.post("prioritize", body)
                answered[caller] += 1
            except (OSError, http.client.HTTPException):
                time.sleep(0.01)

    callers = [threading.Thread(target=hammer, args=(index,), daemon=True) for index in range(16)]
    for caller in callers:
        caller.start()
    try:
        # Busy: every caller answered once and back with its next request (not a fixed pause).
        wait_for(lambda: all(answered), 30, "each of 16 callers answered", extender.log.read_text)
        started = time.monotonic()
        extender.process.send_signal(signal.SIGTERM)
        extender.process.wait(15)
        assert time.monotonic() - started < 10, extender.log.read_text()
    finally:
        stop.set()
