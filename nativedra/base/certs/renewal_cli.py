"""`nativedra extender-certs renew`: renew the extender's serving certificate in its Secret (and with
--client-secret the second scheduler's client Secret), or with --client-cert-dir the scheduler's
client certificate files on a control-plane node, when less than --renew-before-days are left, or at
once when signed by the CA a rotation is replacing. Meant to run daily
(manifests/base/extender-cert-renewal.yaml); a run with nothing due changes nothing.
`nativedra extender-certs rotate-ca start|switch|finish`: the CA rotation (rotation.py).
Exit status 0: done or not due; 1: the material or the API refused (the message names the Secret
and key, or the file); 2: bad flags."""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.config import ConfigException
from urllib3.exceptions import HTTPError

from nativedra.base.certs import rotation
from nativedra.base.certs.renewal import LIFETIME, RENEW_BEFORE, Policy, RenewalError
from nativedra.base.certs.renewal_files import renew_client_dir
from nativedra.base.certs.renewal_secret import read_ca, renew_secret
from nativedra.base.cmdline.flags import add_flag
from nativedra.base.kube.client import api_client

log = logging.getLogger(__name__)
PROG = "nativedra extender-certs renew"


def _guarded(prog: str, args: argparse.Namespace, work: Callable[[client.CoreV1Api], list[str]]) -> int:
    """Run `work` with the API client of --kubeconfig and log what it did: exit 2 without
    credentials, 1 when the material or the API refuses (the message names the Secret and key or the
    file; what was written before the refusal stays), else 0."""
    try:
        core = client.CoreV1Api(api_client(args.kubeconfig))
    except ConfigException as error:
        print(f"{prog}: no API credentials: {error}", file=sys.stderr)
        return 2
    try:
        messages = work(core)
    except RenewalError as error:
        print(f"{prog}: {error}; nothing more was written", file=sys.stderr)
        return 1
    except HTTPError as error:
        print(f"{prog}: the API server could not be reached: {error}; nothing more was written", file=sys.stderr)
        return 1
    for message in messages:
        log.info("%s", message)
    return 0


def _run(args: argparse.Namespace) -> int:
    policy = Policy(
        dt.datetime.now(dt.UTC), dt.timedelta(days=args.renew_before_days), dt.timedelta(days=args.lifetime_days)
    )
    problem = policy.problem()
    if problem:
        print(f"{PROG}: {problem} (--renew-before-days, --lifetime-days)", file=sys.stderr)
        return 2

    def renew(core: client.CoreV1Api) -> list[str]:
        ca, previous = read_ca(core, args.namespace, args.ca_secret)
        if args.client_cert_dir is not None:
            return [renew_client_dir(args.client_cert_dir, ca, policy, previous=previous).message]
        return [
            renew_secret(core, args.namespace, name, ca, policy, previous=previous).message
            for name in (args.serving_secret, *args.client_secret)
        ]

    return _guarded(PROG, args, renew)


def _rotate(args: argparse.Namespace) -> int:
    names = rotation.Names(args.namespace, args.ca_secret, args.serving_secret, args.client_secret)
    now = dt.datetime.now(dt.UTC)
    prog = f"nativedra extender-certs rotate-ca {args.step}"
    policy = Policy(now, lifetime=dt.timedelta(days=args.lifetime_days))
    problem = policy.problem()
    if problem or args.ca_lifetime_days < args.lifetime_days:
        print(
            f"{prog}: {problem or 'a new CA must outlive the leaves it signs'} (--lifetime-days, --ca-lifetime-days)",
            file=sys.stderr,
        )
        return 2

    def step(core: client.CoreV1Api) -> list[str]:
        if args.step == "start":
            return [rotation.start(core, names, now, dt.timedelta(days=args.ca_lifetime_days))]
        if args.step == "switch":
            return [rotation.switch(core, names, policy)]
        return [rotation.finish(core, names)]

    return _guarded(prog, args, step)


def _where_flags(parser: argparse.ArgumentParser) -> None:
    """The API credentials and the Secrets both verbs work on."""
    add_flag(parser, "--kubeconfig", type=Path, help="kubeconfig file; default: in-cluster service account")
    add_flag(parser, "--namespace", default="nativedra-system", help="namespace of the Secrets")
    add_flag(parser, "--serving-secret", default="nativedra-extender-tls", help="the extender's TLS Secret")
    add_flag(parser, "--ca-secret", default="nativedra-extender-ca", help="Secret holding the CA's ca.crt and ca.key")


def _lifetime(help_text: str) -> dict[str, Any]:
    return {"type": float, "default": LIFETIME / dt.timedelta(days=1), "help": help_text}


def register(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = subcommands.add_parser(
        "extender-certs",
        help="renew the extender's TLS certificates before they expire",
        description="Certificates between kube-scheduler and the extender.",
    )
    verbs = group.add_subparsers(dest="verb", required=True, metavar="VERB")
    renew = verbs.add_parser(
        "renew",
        help="renew the serving certificate (Secret) or the scheduler's client certificate (files) when due",
        description="Renew the extender's serving certificate in --serving-secret (tls.crt, tls.key; ca.crt is "
        "kept), or with --client-cert-dir the scheduler's client certificate (tls.crt, tls.key in DIR, swapped "
        "as one pair through a ..data link), when less than --renew-before-days are left. The new certificate "
        "keeps the old one's subject, SANs and key usages, has a new EC P-256 key and is signed by the CA in "
        "--ca-secret (ca.crt, ca.key), which must have signed the current one. Nothing is written unless "
        "renewal is due and every input is sound. Exit 0: renewed or not due; 1: bad material or an API "
        "refusal; 2: bad flags.",
    )
    _where_flags(renew)
    add_flag(
        renew,
        "--client-secret",
        action="append",
        default=[],
        help="also renew this Secret's tls.crt and tls.key (the second scheduler's client certificate); repeatable",
    )
    add_flag(
        renew,
        "--client-cert-dir",
        type=Path,
        help="renew the scheduler's client certificate here (its tlsConfig certFile and keyFile, named tls.crt "
        "and tls.key) instead of the serving Secret",
    )
    add_flag(
        renew,
        "--renew-before-days",
        type=float,
        default=RENEW_BEFORE / dt.timedelta(days=1),
        help="renew when fewer days than this are left; keep it above the extender's --certificate-warning-days "
        "(30), so that its CertificateExpiringSoon event means renewal is failing",
    )
    add_flag(renew, "--lifetime-days", **_lifetime("validity of a renewed certificate, over --renew-before-days"))
    renew.set_defaults(handler=_run)
    rotate = verbs.add_parser(
        "rotate-ca",
        help="replace the CA with no refused handshake: start, then switch, then finish",
        description="Rotate the CA in three steps run in order, each once every reader has the last one's "
        "result (docs/install.md, 'Rotating the CA'). start: a new CA, trusted beside the old one in the "
        "serving and client Secrets' ca.crt. switch: the new CA signs; the Secrets' leaves re-issued (renew "
        "re-issues any other leaf of the old CA, e.g. on control-plane nodes). finish: the old CA dropped "
        "from every bundle (refused while a Secret's leaf is still the old CA's). Each step can be run again.",
    )
    rotate.add_argument("step", choices=["start", "switch", "finish"])
    _where_flags(rotate)
    add_flag(
        rotate,
        "--client-secret",
        default="nativedra-scheduler-extender-client",
        help="the second scheduler's client Secret (ca.crt, tls.crt, tls.key); skipped when absent",
    )
    add_flag(
        rotate,
        "--ca-lifetime-days",
        type=float,
        default=rotation.CA_LIFETIME / dt.timedelta(days=1),
        help="validity of the new CA (start)",
    )
    add_flag(rotate, "--lifetime-days", **_lifetime("validity of the re-issued leaves (switch)"))
    rotate.set_defaults(handler=_rotate)
