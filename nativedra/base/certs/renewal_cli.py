"""`nativedra extender-certs renew`: renew the extender's serving certificate in its Secret, or with
--client-cert-dir the scheduler's client certificate files on a control-plane node, when less than
--renew-before-days are left. Meant to run daily (manifests/base/extender-cert-renewal.yaml); a run
with nothing due changes nothing. Exit status 0: renewed or not due; 1: the material or the API
refused (the message names the Secret and key, or the file); 2: bad flags."""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import sys
from pathlib import Path

from kubernetes import client
from kubernetes.config import ConfigException
from urllib3.exceptions import HTTPError

from nativedra.base.certs.renewal import LIFETIME, RENEW_BEFORE, Policy, RenewalError
from nativedra.base.certs.renewal_files import renew_client_dir
from nativedra.base.certs.renewal_secret import read_ca, renew_serving_secret
from nativedra.base.cmdline.flags import add_flag
from nativedra.base.kube.client import api_client

log = logging.getLogger(__name__)
PROG = "nativedra extender-certs renew"


def _run(args: argparse.Namespace) -> int:
    policy = Policy(
        dt.datetime.now(dt.UTC), dt.timedelta(days=args.renew_before_days), dt.timedelta(days=args.lifetime_days)
    )
    problem = policy.problem()
    if problem:
        print(f"{PROG}: {problem} (--renew-before-days, --lifetime-days)", file=sys.stderr)
        return 2
    try:
        core = client.CoreV1Api(api_client(args.kubeconfig))
    except ConfigException as error:
        print(f"{PROG}: no API credentials: {error}", file=sys.stderr)
        return 2
    try:
        ca = read_ca(core, args.namespace, args.ca_secret)
        if args.client_cert_dir is not None:
            outcome = renew_client_dir(args.client_cert_dir, ca, policy)
        else:
            outcome = renew_serving_secret(core, args.namespace, args.serving_secret, ca, policy)
    except RenewalError as error:
        print(f"{PROG}: {error}; nothing was written", file=sys.stderr)
        return 1
    except HTTPError as error:
        print(f"{PROG}: the API server could not be reached: {error}; nothing was written", file=sys.stderr)
        return 1
    log.info("%s", outcome.message)
    return 0


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
    add_flag(renew, "--kubeconfig", type=Path, help="kubeconfig file; default: in-cluster service account")
    add_flag(renew, "--namespace", default="nativedra-system", help="namespace of both Secrets")
    add_flag(renew, "--serving-secret", default="nativedra-extender-tls", help="the extender's TLS Secret")
    add_flag(renew, "--ca-secret", default="nativedra-extender-ca", help="Secret holding the CA's ca.crt and ca.key")
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
    add_flag(
        renew,
        "--lifetime-days",
        type=float,
        default=LIFETIME / dt.timedelta(days=1),
        help="validity of a renewed certificate, longer than --renew-before-days",
    )
    renew.set_defaults(handler=_run)
