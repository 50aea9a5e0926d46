"""Which verified client certificates may ask the extender (the connection-level check is
e2e/test_abuse_extender_http.py's, against the running extender)."""

from __future__ import annotations

import argparse

import pytest

from extender.serve.client_identity import AcceptedClients, PeerCertificate, identities, parse_identities


def _peer(common_name: str | None, *sans: tuple[str, str]) -> PeerCertificate:
    """The shape ssl.SSLSocket.getpeercert() gives for a verified certificate."""
    subject: tuple[tuple[tuple[str, str]], ...] = ((("organizationName", "nativedra"),),)
    if common_name is not None:
        subject += ((("commonName", common_name),),)
    peer: PeerCertificate = {"subject": subject, "issuer": ((("commonName", "nativedra-extender-ca"),),)}
    if sans:
        peer["subjectAltName"] = sans
    return peer


SCHEDULER = AcceptedClients(parse_identities("kube-scheduler"))


def test_the_scheduler_is_known_by_its_common_name_or_a_dns_or_uri_name() -> None:
    assert SCHEDULER.refusal(_peer("kube-scheduler")) is None
    assert SCHEDULER.refusal(_peer(None, ("DNS", "kube-scheduler"))) is None
    spiffe = AcceptedClients(parse_identities("spiffe://cluster.local/ns/kube-system/sa/kube-scheduler"))
    assert spiffe.refusal(_peer("x", ("URI", "spiffe://cluster.local/ns/kube-system/sa/kube-scheduler"))) is None


def test_any_other_leaf_of_the_ca_is_refused_and_the_refusal_names_what_it_showed() -> None:
    serving = _peer(
        "nativedra-extender", ("DNS", "nativedra-extender.nativedra-system.svc"), ("IP Address", "10.0.0.1")
    )
    reason = SCHEDULER.refusal(serving)
    assert reason == (
        "client certificate names nativedra-extender, nativedra-extender.nativedra-system.svc, "
        "none of kube-scheduler (--client-identities)"
    )
    assert SCHEDULER.refusal(_peer(None, ("IP Address", "10.0.0.2"))) == (
        "client certificate names no CN or SAN, none of kube-scheduler (--client-identities)"
    )
    assert SCHEDULER.refusal(_peer("kube-scheduler-evil")) is not None, "names match whole, not by prefix"
    assert SCHEDULER.refusal(None) == "no verified client certificate"
    assert SCHEDULER.refusal({}) == "no verified client certificate"


def test_an_organization_or_an_ip_address_is_no_identity() -> None:
    peer = _peer("other", ("IP Address", "kube-scheduler"), ("email", "kube-scheduler"))
    assert identities(peer) == frozenset({"other"})


def test_identities_are_a_comma_list_of_at_least_one_name() -> None:
    assert parse_identities(" kube-scheduler, nativedra-scheduler ,") == {"kube-scheduler", "nativedra-scheduler"}
    with pytest.raises(argparse.ArgumentTypeError, match="names no identity"):
        parse_identities(" , ")
