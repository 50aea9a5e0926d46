"""The renewal CronJob runs `nativedra extender-certs renew` under its own ServiceAccount, whose
Role reaches exactly the two Secrets the command reads and writes (by name: get on the CA, get and
update on the serving Secret) and nothing else; those names are the command's defaults and the
Secret the extender mounts, in the namespace the Job runs in."""

from __future__ import annotations

import functools
from typing import Any

from nativedra.cli import build_parser
from testkit.manifests import MANIFESTS, kustomize, named

NAME = "nativedra-extender-cert-renewal"


@functools.cache
def _base() -> list[dict[str, Any]]:
    return kustomize(MANIFESTS / "base")


def _job_pod() -> dict[str, Any]:
    spec: dict[str, Any] = named(_base(), "CronJob", NAME)["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return spec


def test_the_role_reaches_only_the_two_secrets_by_name() -> None:
    role = named(_base(), "Role", NAME)
    defaults = build_parser().parse_args(["extender-certs", "renew"])
    assert role["metadata"]["namespace"] == defaults.namespace == "nativedra-system"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [defaults.ca_secret], "verbs": ["get"]},
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": [defaults.serving_secret],
            "verbs": ["get", "update"],
        },
    ]
    (mounted,) = [
        v["secret"]["secretName"]
        for v in named(_base(), "Deployment", "nativedra-extender")["spec"]["template"]["spec"]["volumes"]
        if "secret" in v
    ]
    assert mounted == defaults.serving_secret, "the Secret renewed is the one the extender serves from"


def test_nothing_else_is_granted_to_the_renewal_account() -> None:
    bindings = [d for d in _base() if d["kind"] in {"RoleBinding", "ClusterRoleBinding"}]
    subject = {"kind": "ServiceAccount", "name": NAME, "namespace": "nativedra-system"}
    (binding,) = [b for b in bindings if subject in b["subjects"]]
    assert binding["kind"] == "RoleBinding" and binding["subjects"] == [subject]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME}


def test_the_cronjob_runs_the_renew_command_as_that_account_daily_one_at_a_time() -> None:
    cronjob = named(_base(), "CronJob", NAME)
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    assert len(cronjob["spec"]["schedule"].split()) == 5 and cronjob["spec"]["schedule"].split()[2:] == ["*"] * 3
    pod = _job_pod()
    assert pod["serviceAccountName"] == NAME
    (container,) = pod["containers"]
    args = build_parser().parse_args(container["args"])
    assert (args.command, args.verb, args.client_cert_dir) == ("extender-certs", "renew", None)
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {"NATIVEDRA_NAMESPACE": "metadata.namespace"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True
