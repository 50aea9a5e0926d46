"""Twelve years of the chart's certificates on the real API server, with a clock that makes the days
pass: the Secrets `extender.tls.generate` makes (a 10-year CA, 1-year serving and client leaves)
are renewed every two weeks as the daily CronJob would (`renew_secret` on the serving and the client
Secret), and when the CA has less than a year left it is rotated (start, two weeks later switch, two
weeks later finish). Every two weeks, and after every single write, the scheduler's view and the extender's view are
checked at that simulated time with a full chain verification (cryptography's verifier: validity,
signature, SANs for the server name the shipped scheduler calls, extended key usage; and for the
extender's side OpenSSL too, `openssl verify -attime`, which finds issuers as the extender does): each side
with the trust bundle it had one step earlier as well as the current one, because the kubelet
syncs one mounted Secret after the other. Not one check may fail in twelve years.

The same years without the rotation fail on the day the CA expires: the check can fail."""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID
from cryptography.x509.verification import (
    Criticality,
    ExtensionPolicy,
    PolicyBuilder,
    Store,
    VerificationError,
)
from kubernetes import client

from nativedra.base.certs import rotation
from nativedra.base.certs.renewal import Ca, Policy, RenewalError, load_leaf, not_after, renew
from nativedra.base.certs.renewal_secret import read_ca, renew_secret
from nativedra.cluster.helm import Helm, build_helm
from nativedra.objects import apply_documents

SERVING, CA_SECRET, CLIENT = "nativedra-extender-tls", "nativedra-extender-ca", "nativedra-scheduler-extender-client"
CLUSTER_IP = "10.96.0.88"  # the chart's extender.service.clusterIP: what the shipped urlPrefix names
STEP = dt.timedelta(days=14)  # the renewal window (60 days) spans four steps
YEARS = 12
ROTATE_WITHIN = dt.timedelta(days=365)


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Helm]:
    yield Helm(build_helm(), tmp_path_factory.mktemp("helm"))


def _data(core: client.CoreV1Api, namespace: str, name: str) -> dict[str, bytes]:
    secret = core.read_namespaced_secret(name, namespace)
    return {key: base64.b64decode(value) for key, value in (secret.data or {}).items()}


@dataclass
class Views:
    """What each side held: the scheduler trusts the client Secret's ca.crt and presents its tls.crt;
    the extender trusts the serving Secret's ca.crt and presents its tls.crt."""

    serving: dict[str, bytes]
    client: dict[str, bytes]


@dataclass
class Years:
    core: client.CoreV1Api
    namespace: str
    checks: int = 0
    failures: list[str] = field(default_factory=list)
    renewals: dict[str, int] = field(default_factory=lambda: {SERVING: 0, CLIENT: 0})
    rotations: list[str] = field(default_factory=list)
    last: Views | None = None

    def views(self) -> Views:
        return Views(_data(self.core, self.namespace, SERVING), _data(self.core, self.namespace, CLIENT))

    def check(self, now: dt.datetime, when: str) -> None:
        """Both handshakes at `now`, each side with its bundle of now and of the last check."""
        current = self.views()
        earlier = self.last or current
        for scheduler, extender in ((current, current), (earlier, current), (current, earlier)):
            self.checks += 1
            problem = _handshake(now, scheduler.client, extender.serving)
            if problem:
                self.failures.append(f"{now:%Y-%m-%d} {when}: {problem}")
        self.last = current

    def renew(self, now: dt.datetime) -> None:
        ca, previous = read_ca(self.core, self.namespace, CA_SECRET)
        for name in (SERVING, CLIENT):
            if renew_secret(self.core, self.namespace, name, ca, Policy(now), previous=previous).renewed:
                self.renewals[name] += 1
                self.check(now, f"renewed {name}")


def _handshake(now: dt.datetime, scheduler: dict[str, bytes], extender: dict[str, bytes]) -> str | None:
    """Why the scheduler (trusting its ca.crt) would refuse the extender's serving leaf at its
    fixed ClusterIP, or the extender (trusting its ca.crt) the scheduler's client leaf, or None.
    A client certificate needs no subjectAltName in TLS (Go's and Python's stacks accept one
    without); the verifier's Web PKI profile asks for one, so only that rule is relaxed."""
    try:
        trusted = Store(x509.load_pem_x509_certificates(scheduler["ca.crt"]))
        server = x509.IPAddress(ipaddress.ip_address(CLUSTER_IP))
        verifier = PolicyBuilder().store(trusted).time(now).build_server_verifier(server)
        verifier.verify(load_leaf(extender["tls.crt"], "serving"), [])
    except VerificationError as error:
        return f"the scheduler refuses the extender: {error}"
    client_leaf = ExtensionPolicy.webpki_defaults_ee().may_be_present(
        x509.SubjectAlternativeName, Criticality.AGNOSTIC, None
    )
    refused = _openssl_refuses(now, extender["ca.crt"], scheduler["tls.crt"])
    if refused:
        return f"the extender (OpenSSL) refuses the scheduler: {refused}"
    try:
        trusted = Store(x509.load_pem_x509_certificates(extender["ca.crt"]))
        builder = PolicyBuilder().store(trusted).time(now)
        builder = builder.extension_policies(ca_policy=ExtensionPolicy.webpki_defaults_ca(), ee_policy=client_leaf)
        builder.build_client_verifier().verify(load_leaf(scheduler["tls.crt"], "client"), [])
    except VerificationError as error:
        return f"the extender refuses the scheduler: {error}"
    return None


def _openssl_refuses(now: dt.datetime, bundle: bytes, leaf: bytes) -> str | None:
    """What OpenSSL, the library the extender's TLS uses, says of a client leaf against a CA bundle
    at `now` (`openssl verify -attime`): None when it verifies. It finds a leaf's issuer by name and
    key identifier, which cryptography's verifier does not require to match."""
    with tempfile.TemporaryDirectory() as scratch:
        trusted, presented = Path(scratch) / "ca.crt", Path(scratch) / "tls.crt"
        trusted.write_bytes(bundle)
        presented.write_bytes(leaf)
        command = ["openssl", "verify", "-attime", str(int(now.timestamp())), "-purpose", "sslclient"]
        result = subprocess.run(
            [*command, "-CAfile", str(trusted), str(presented)], capture_output=True, text=True, check=False
        )
    return None if result.returncode == 0 else (result.stdout + result.stderr).strip()


def _generated(helm: Helm, namespace: str) -> list[dict[str, Any]]:
    values = {"namespace": {"name": namespace, "create": False}, "extender": {"tls": {"generate": True}}}
    return [d for d in helm.template(values) if d["kind"] == "Secret"]


def _live(years: Years, start: dt.datetime, rotate: bool) -> dt.datetime:
    """Every two weeks until YEARS have passed, or until the first refused handshake; returns the
    simulated time it stopped."""
    now, step = start, None
    while now < start + dt.timedelta(days=365 * YEARS) and not years.failures:
        years.renew(now)
        ca, previous = read_ca(years.core, years.namespace, CA_SECRET)
        names = rotation.Names(years.namespace, CA_SECRET, SERVING, CLIENT)
        if rotate and step is None and previous is None and not_after(ca.cert) - now < ROTATE_WITHIN:
            step = "start"
        if step is not None:
            if step == "start":
                years.rotations.append(rotation.start(years.core, names, now))
                step = "switch"
            elif step == "switch":
                years.rotations.append(rotation.switch(years.core, names, Policy(now)))
                step = "finish"
            else:
                years.rotations.append(rotation.finish(years.core, names))
                step = None
            years.check(now, years.rotations[-1].split(":")[0])
        years.check(now, "every two weeks")
        now += STEP
    return now


def test_twelve_years_with_one_ca_rotation_refuse_no_handshake(
    helm: Helm, api: client.ApiClient, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    core = client.CoreV1Api(api)
    apply_documents(api, _generated(helm, namespace))
    original, _ = read_ca(core, namespace, CA_SECRET)
    years = Years(core, namespace)
    start = dt.datetime.now(dt.UTC)
    ended = _live(years, start, rotate=True)
    assert years.failures == []
    assert ended >= start + dt.timedelta(days=365 * YEARS)
    assert [message.split(":")[0] for message in years.rotations] == ["start", "switch", "finish"]
    final, previous = read_ca(core, namespace, CA_SECRET)
    assert previous is None and final.cert != original.cert
    assert not_after(final.cert) > ended
    # Yearly leaves renewed 60 days ahead: about one renewal a year each, plus the switch's re-issue.
    assert all(YEARS <= count <= YEARS + 3 for count in years.renewals.values()), years.renewals
    for name in (SERVING, CLIENT):
        assert len(x509.load_pem_x509_certificates(_data(core, namespace, name)["ca.crt"])) == 1
    assert years.checks > 3 * 26 * YEARS
    with capsys.disabled():
        print(f"\n{YEARS} simulated years: {years.checks} checks, renewals {years.renewals}, CA rotated once")


def test_without_the_rotation_the_first_refusal_is_the_day_the_ca_expires(
    helm: Helm, api: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api)
    apply_documents(api, _generated(helm, namespace))
    ca, _ = read_ca(core, namespace, CA_SECRET)
    years = Years(core, namespace)
    ended = _live(years, dt.datetime.now(dt.UTC), rotate=False)
    assert years.failures, "renewal alone kept the chain valid past the CA's end"
    assert not_after(ca.cert) < ended - STEP <= not_after(ca.cert) + STEP, (years.failures[0], not_after(ca.cert))


def test_a_step_out_of_order_or_a_bundle_not_yet_trusting_is_refused(
    helm: Helm, api: client.ApiClient, namespace: str
) -> None:
    """switch before start, finish before switch, and switch while a reader's bundle lacks the new
    CA (the client Secret made again with the old CA alone, as a regenerating upgrade would) are
    refused, naming what to do, and change nothing; a client Secret that is not there is named in
    the output; finish with no rotation under way does nothing."""
    core = client.CoreV1Api(api)
    apply_documents(api, _generated(helm, namespace))
    names = rotation.Names(namespace, CA_SECRET, SERVING, CLIENT)
    now = dt.datetime.now(dt.UTC)
    with pytest.raises(RenewalError, match="run start first"):
        rotation.switch(core, names, Policy(now))
    assert rotation.finish(core, names) == "finish: no rotation under way: nothing to do"
    old = _data(core, namespace, CLIENT)["ca.crt"]
    rotation.start(core, names, now)
    with pytest.raises(RenewalError, match="run switch"):
        rotation.finish(core, names)
    client_secret = core.read_namespaced_secret(CLIENT, namespace)
    client_secret.data = {**client_secret.data, "ca.crt": base64.b64encode(old).decode()}
    core.replace_namespaced_secret(CLIENT, namespace, client_secret)
    before = {name: _data(core, namespace, name) for name in (CA_SECRET, SERVING, CLIENT)}
    with pytest.raises(RenewalError, match=f"Secret {namespace}/{CLIENT}: ca.crt does not trust the new CA"):
        rotation.switch(core, names, Policy(now))
    assert {name: _data(core, namespace, name) for name in before} == before
    missing = rotation.Names(namespace, CA_SECRET, SERVING, "no-such-client")
    assert f"Secret {namespace}/no-such-client not found: skipped" in rotation.start(core, missing, now)


def test_a_ca_secret_in_cert_managers_layout_is_read(api: client.ApiClient, namespace: str) -> None:
    """cert-manager keeps a CA Certificate's pair as tls.crt and tls.key (with ca.crt): renewal reads
    it so, and so the control-plane nodes' client files are renewed by the CA cert-manager issued."""
    core = client.CoreV1Api(api)
    now = dt.datetime.now(dt.UTC)
    made = rotation.new_ca(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "nativedra-extender-ca")]), now)
    ca = Ca(made.cert, made.key, "test")
    leaf = renew(made.cert, ca, now, dt.timedelta(days=30)).cert  # due: 30 days left
    pem = made.cert_pem()
    data = {"tls.crt": pem, "tls.key": made.key_pem(), "ca.crt": pem}
    serving = {"tls.crt": leaf.public_bytes(Encoding.PEM), "tls.key": made.key_pem(), "ca.crt": pem}
    for name, content in ((CA_SECRET, data), (SERVING, serving)):
        body = {"metadata": {"name": name}, "data": {k: base64.b64encode(v).decode() for k, v in content.items()}}
        core.create_namespaced_secret(namespace, body)
    read, previous = read_ca(core, namespace, CA_SECRET)
    assert read.cert == made.cert and previous is None
    assert renew_secret(core, namespace, SERVING, read, Policy(now)).renewed
