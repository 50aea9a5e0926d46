"""`nativedra extender-certs renew` on the real control plane, as the shipped CronJob runs it: under
the ServiceAccount of manifests/base/extender-cert-renewal.yaml (a TokenRequest token, not the
admin), so these tests show that its Role suffices and that it reaches nothing else.

A serving certificate 10 days from expiry is renewed in its Secret (chaining to the CA, same SANs,
ca.crt kept) and a second run changes nothing; a run that loses a race to another renewal does not
overwrite it; a bad CA Secret is named and nothing is written; and a running extender serves the
renewed certificate and accepts the scheduler's renewed client certificate, with no restart."""

from __future__ import annotations

import base64
import datetime as dt
import json
import socket
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from kubernetes import client, config

from nativedra.base.certs.renewal import Ca, Issued, Policy, load_ca, renew
from nativedra.base.certs.renewal_files import publish_pair
from nativedra.base.certs.renewal_secret import renew_secret
from nativedra.cluster import ControlPlane, commands, wait_for
from nativedra.cluster.controlplane import free_port
from nativedra.cluster.credentials import write_kubeconfig
from nativedra.cluster.pki import ExtenderTls, extender_tls
from nativedra.objects import apply_documents
from testkit.extender_harness import ExtenderCluster
from testkit.manifests import MANIFESTS, kustomize

NAME = "nativedra-extender-cert-renewal"
SERVING, CA_SECRET = "nativedra-extender-tls", "nativedra-extender-ca"
NEAR = dt.timedelta(days=10)


@dataclass
class Renewal:
    """A namespace holding the two Secrets (the serving one 10 days from expiry) and the shipped
    renewal RBAC; `run` is the command as its ServiceAccount, `as_account` that account's client."""

    api: client.ApiClient
    namespace: str
    kubeconfig: Path
    tls: ExtenderTls
    ca: Ca
    near: Issued

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = commands.nativedra(
            "extender-certs", "renew", "--kubeconfig", str(self.kubeconfig), "--namespace", self.namespace, *args
        )
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)

    def as_account(self) -> client.ApiClient:
        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def secret(self, name: str = SERVING) -> Any:
        return client.CoreV1Api(self.api).read_namespaced_secret(name, self.namespace)

    def put_ca(self, data: dict[str, bytes]) -> None:
        body = {"metadata": {"name": CA_SECRET}, "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}
        client.CoreV1Api(self.api).replace_namespaced_secret(CA_SECRET, self.namespace, body)


def _decoded(secret: Any, key: str) -> bytes:
    return base64.b64decode(secret.data[key])


def _cert(secret: Any) -> x509.Certificate:
    return x509.load_pem_x509_certificate(_decoded(secret, "tls.crt"))


def _renewal_rbac(namespace: str) -> list[dict[str, Any]]:
    """The shipped ServiceAccount, Role and RoleBinding, moved to `namespace` as kustomize's
    namespace setting would move them."""
    documents = [
        d
        for d in kustomize(MANIFESTS / "base")
        if d["metadata"]["name"] == NAME and d["kind"] in {"ServiceAccount", "Role", "RoleBinding"}
    ]
    assert len(documents) == 3
    for document in documents:
        document["metadata"]["namespace"] = namespace
        for subject in document.get("subjects", []):
            subject["namespace"] = namespace
    return documents


def _secret(name: str, data: dict[str, bytes], type_: str = "Opaque") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "type": type_,
        "data": {key: base64.b64encode(value).decode() for key, value in data.items()},
    }


@pytest.fixture
def renewal(control_plane: ControlPlane, api: client.ApiClient, namespace: str, tmp_path: Path) -> Renewal:
    core = client.CoreV1Api(api)
    apply_documents(api, _renewal_rbac(namespace))
    tls = extender_tls(tmp_path / "tls")
    ca = load_ca(tls.ca_cert.read_bytes(), "ca.crt", tls.ca_key.read_bytes(), "ca.key")
    serving = x509.load_pem_x509_certificate(tls.serving_cert.read_bytes())
    near = renew(serving, ca, dt.datetime.now(dt.UTC), NEAR)
    ca_data = {"ca.crt": tls.ca_cert.read_bytes(), "ca.key": tls.ca_key.read_bytes()}
    core.create_namespaced_secret(namespace, _secret(CA_SECRET, ca_data))
    serving_data = {"tls.crt": near.cert_pem(), "tls.key": near.key_pem(), "ca.crt": tls.ca_cert.read_bytes()}
    core.create_namespaced_secret(namespace, _secret(SERVING, serving_data, "kubernetes.io/tls"))
    core.create_namespaced_secret(namespace, _secret("unrelated", {"password": b"hunter2"}))
    token = core.create_namespaced_service_account_token(NAME, namespace, {"spec": {"expirationSeconds": 3600}})
    kubeconfig = write_kubeconfig(
        tmp_path / "renewal.kubeconfig",
        control_plane.server,
        control_plane.layout.certs.ca_cert,
        f"system:serviceaccount:{namespace}:{NAME}",
        {"token": token.status.token},
    )
    return Renewal(api, namespace, kubeconfig, tls, ca, near)


def test_the_serving_secret_is_renewed_once_under_the_shipped_role(renewal: Renewal) -> None:
    before = renewal.secret()
    first = renewal.run()
    assert first.returncode == 0, first.stderr
    assert f"Secret {renewal.namespace}/{SERVING} key tls.crt: renewed (10.0 days were left)" in first.stderr
    after = renewal.secret()
    new, old = _cert(after), _cert(before)
    assert new.serial_number != old.serial_number
    new.verify_directly_issued_by(renewal.ca.cert)
    left = new.not_valid_after_utc - dt.datetime.now(dt.UTC)
    assert dt.timedelta(days=364) < left <= dt.timedelta(days=365)
    assert new.subject == old.subject
    names = x509.SubjectAlternativeName
    assert new.extensions.get_extension_for_class(names) == old.extensions.get_extension_for_class(names)
    key = serialization.load_pem_private_key(_decoded(after, "tls.key"), None)
    assert key.public_key() == new.public_key(), "tls.key is the renewed certificate's key"
    assert _decoded(after, "ca.crt") == _decoded(before, "ca.crt"), "the client CA is left as it is"

    second = renewal.run()
    assert second.returncode == 0, second.stderr
    assert "nothing to do" in second.stderr
    assert renewal.secret().metadata.resource_version == after.metadata.resource_version


def test_the_renewal_account_reaches_nothing_but_the_two_secrets(renewal: Renewal) -> None:
    core, ns = client.CoreV1Api(renewal.as_account()), renewal.namespace
    assert core.read_namespaced_secret(CA_SECRET, ns).data["ca.key"]  # what it needs works
    refused: list[Callable[[], Any]] = [
        lambda: core.read_namespaced_secret("unrelated", ns),
        lambda: core.list_namespaced_secret(ns),
        lambda: core.replace_namespaced_secret(CA_SECRET, ns, core.read_namespaced_secret(CA_SECRET, ns)),
        lambda: core.delete_namespaced_secret(SERVING, ns),
        lambda: core.create_namespaced_secret(ns, _secret("minted", {"a": b"b"})),
        lambda: core.read_namespaced_secret(SERVING, "kube-system"),
        lambda: core.list_namespaced_pod(ns),
    ]
    for action in refused:
        with pytest.raises(client.ApiException) as denied:
            action()
        assert denied.value.status == 403


def test_a_run_that_loses_the_race_leaves_the_winners_certificate(renewal: Renewal) -> None:
    """Both runs read the near-expiry Secret; the other run renews and writes first. This run's
    update carries the resourceVersion it read, is refused with a conflict by the real API server,
    reads again and finds nothing due: the winner's certificate stays."""
    now, ns = dt.datetime.now(dt.UTC), renewal.namespace
    admin = client.CoreV1Api(renewal.api)
    won: list[Any] = []

    class RacedCore(client.CoreV1Api):  # type: ignore[misc]
        def read_namespaced_secret(self, name: str, namespace: str, **kwargs: Any) -> Any:
            read = super().read_namespaced_secret(name, namespace, **kwargs)
            if not won:  # the other run, between this run's read and its write
                won.append(renew_secret(admin, ns, SERVING, renewal.ca, Policy(now)))
                won.append(_cert(renewal.secret()).serial_number)
            return read

    outcome = renew_secret(RacedCore(renewal.as_account()), ns, SERVING, renewal.ca, Policy(now))
    assert won[0].renewed
    assert not outcome.renewed and "nothing to do" in outcome.message
    assert _cert(renewal.secret()).serial_number == won[1]


def test_a_bad_ca_secret_is_named_and_the_serving_secret_is_left_unchanged(renewal: Renewal, tmp_path: Path) -> None:
    ns, tls = renewal.namespace, renewal.tls
    other = extender_tls(tmp_path / "other")
    where = f"Secret {ns}/{CA_SECRET}"
    cases = {
        f"{where}: key ca.key is missing or empty": {"ca.crt": tls.ca_cert.read_bytes()},
        f"{where} key ca.crt: not a PEM certificate": {"ca.crt": b"garbage", "ca.key": tls.ca_key.read_bytes()},
        f"{where} key ca.key is not the key of the certificate in {where} key ca.crt": {
            "ca.crt": tls.ca_cert.read_bytes(),
            "ca.key": other.ca_key.read_bytes(),
        },
        (
            f"Secret {ns}/{SERVING} key tls.crt: CN=nativedra-extender was not signed by the CA in "
            f"{where} key ca.crt (CN=nativedra-extender-ca)"
        ): {"ca.crt": other.ca_cert.read_bytes(), "ca.key": other.ca_key.read_bytes()},
    }
    before = renewal.secret()
    for message, data in cases.items():
        renewal.put_ca(data)
        result = renewal.run()
        assert result.returncode == 1, result.stderr
        assert message in result.stderr and "nothing more was written" in result.stderr, result.stderr
        after = renewal.secret()
        assert after.metadata.resource_version == before.metadata.resource_version
        assert after.data == before.data


def _served_serial(port: int, context: Any) -> int:
    """The serial of the certificate the extender serves a new handshake."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_a_running_extender_serves_the_renewed_certificate_and_accepts_the_renewed_client(
    renewal: Renewal, control_plane: ControlPlane, tmp_path: Path
) -> None:
    """The extender reads its files as mounted from the Secret (here copied in one `..data` swap,
    the kubelet's part); the scheduler's client pair, 10 days from expiry too, is renewed in its
    directory by the same command with --client-cert-dir, reading only the CA Secret."""
    mounted, scheduler = tmp_path / "mounted", tmp_path / "scheduler"
    mounted.mkdir()
    scheduler.mkdir()
    (mounted / "ca.crt").write_bytes(renewal.tls.ca_cert.read_bytes())
    publish_pair(mounted, renewal.near.cert_pem(), renewal.near.key_pem())
    client_old = x509.load_pem_x509_certificate(renewal.tls.client_cert.read_bytes())
    client_near = renew(client_old, renewal.ca, dt.datetime.now(dt.UTC), NEAR)
    (scheduler / "tls.crt").write_bytes(client_near.cert_pem())
    (scheduler / "tls.key").write_bytes(client_near.key_pem())
    files = ExtenderTls(
        ca_cert=mounted / "ca.crt",
        serving_cert=mounted / "tls.crt",
        serving_key=mounted / "tls.key",
        client_cert=scheduler / "tls.crt",
        client_key=scheduler / "tls.key",
        ca_key=renewal.tls.ca_key,
    )
    config_file = tmp_path / "extender.yaml"
    config_file.write_text(yaml.safe_dump({"topologyLevels": ["kubernetes.io/hostname"]}))
    extender = ExtenderCluster(
        control_plane, renewal.api, 0, free_port(), files, config_file, tmp_path / "extender.log"
    )
    extender.start_extender()
    try:
        assert _served_serial(extender.port, extender.client_context()) == renewal.near.cert.serial_number
        served = renewal.run()
        assert served.returncode == 0, served.stderr
        secret = renewal.secret()
        publish_pair(mounted, _decoded(secret, "tls.crt"), _decoded(secret, "tls.key"))
        client_run = renewal.run("--client-cert-dir", str(scheduler))
        assert client_run.returncode == 0, client_run.stderr
        assert f"{scheduler / 'tls.crt'}: renewed (10.0 days were left)" in client_run.stderr
        renewed_client = x509.load_pem_x509_certificate((scheduler / "tls.crt").read_bytes())
        assert renewed_client.serial_number != client_near.cert.serial_number
        # A new handshake presents the renewed client certificate (client_context reads the files
        # now) and must get the renewed serving certificate, verified for "localhost" by the CA.
        wait_for(
            lambda: _served_serial(extender.port, extender.client_context()) == _cert(secret).serial_number,
            10,
            "the extender serving the renewed certificate",
            extender.log.read_text,
        )
        # A request, not just a handshake: under TLS 1.3 the server judges the client certificate after.
        pod = {"metadata": {"name": "web", "namespace": renewal.namespace}, "spec": {"containers": [{"name": "c"}]}}
        status, answer = extender.post("filter", json.dumps({"Pod": pod, "NodeNames": ["a"]}).encode())
        assert status == 200 and answer["NodeNames"] == ["a"]
    finally:
        extender.kill_extender()
