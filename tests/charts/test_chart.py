"""charts/nativedra with the real helm (built from helm.sh/helm/v3): it lints, and with its default
values it renders exactly what `kubectl kustomize manifests/base` renders, object by object (and
with the simulated backend or the second scheduler, the matching overlay), so the two cannot drift.
Each value an admin sets lands where the plugin, the extender and the scheduler read it.

Normalised before comparing, and nothing else: Helm's own labels (`helm.sh/chart`,
`app.kubernetes.io/managed-by`, `app.kubernetes.io/instance`, on objects' metadata only, never on
selectors or pod templates); a ConfigMap's YAML file compared as parsed YAML (the chart renders
the extender's config from structured values, so the base's comments inside it are gone); and the
`metadata.namespace` that kustomize puts on cluster-scoped kinds it has no schema for (DeviceClass,
the admission policies), which the API server clears on write; and CEL `expression`s with each run of
whitespace made one space (kustomize's go-yaml re-folds a `>-` scalar whose second line is more
indented with an added blank line, in the second scheduler's marker policy; CEL ignores it)."""

from __future__ import annotations

import base64
import copy
import datetime as dt
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from dra_driver.run.cli import publish_config_from
from nativedra.cli import build_parser
from nativedra.cluster.helm import CHART, Helm, HelmError, build_helm
from testkit.manifests import MANIFESTS, kustomize, named

HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance")
NAMESPACE = "nativedra-system"
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "DeviceClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
}
Key = tuple[str, str]  # kind, name (every name is unique per kind in what we ship)


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Helm]:
    yield Helm(build_helm(), tmp_path_factory.mktemp("helm"))


@functools.cache
def _kustomized(path: Path) -> tuple[dict[str, Any], ...]:
    return tuple(kustomize(path))


def normalised(document: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = copy.deepcopy(document)
    labels = result["metadata"].get("labels") or {}
    for label in HELM_LABELS:
        labels.pop(label, None)
    if not labels:
        result["metadata"].pop("labels", None)
    if result["kind"] in CLUSTER_SCOPED:
        result["metadata"].pop("namespace", None)
    if result["kind"] == "ConfigMap":
        result["data"] = {key: yaml.safe_load(text) for key, text in result.get("data", {}).items()}
    spaced: dict[str, Any] = _cel_spaced(result)
    return spaced


def _cel_spaced(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _cel_spaced(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_cel_spaced(v) for v in value]
    if key in {"expression", "messageExpression"} and isinstance(value, str):
        return " ".join(value.split())
    return value


def by_key(documents: list[dict[str, Any]] | tuple[dict[str, Any], ...]) -> dict[Key, dict[str, Any]]:
    keyed = {(d["kind"], d["metadata"]["name"]): normalised(d) for d in documents}
    assert len(keyed) == len(documents), "two objects of one kind share a name"
    return keyed


def differences(chart: dict[Key, dict[str, Any]], kustomized: dict[Key, dict[str, Any]]) -> list[str]:
    found = [f"only in the chart: {key}" for key in sorted(set(chart) - set(kustomized))]
    found += [f"only in kustomize: {key}" for key in sorted(set(kustomized) - set(chart))]
    for key in sorted(set(chart) & set(kustomized)):
        if chart[key] != kustomized[key]:
            found.append(f"{key} differs:\n chart:     {chart[key]}\n kustomize: {kustomized[key]}")
    return found


def test_lint(helm: Helm) -> None:
    output = helm("lint", "--strict", str(CHART))
    assert "1 chart(s) linted, 0 chart(s) failed" in output
    for values in ({"plugin": {"backend": "simulated"}}, {"secondScheduler": {"enabled": True}}):
        helm("lint", "--strict", str(CHART), *helm.values_args(values))


def test_default_values_render_the_kustomize_base(helm: Helm) -> None:
    chart, base = by_key(helm.template()), by_key(_kustomized(MANIFESTS / "base"))
    assert differences(chart, base) == []
    assert len(chart) == 25
    rendered = helm.template()
    for document in rendered:  # what is normalised away is there: Helm can tell its objects apart
        assert document["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"


def test_a_drift_in_the_base_would_be_found(helm: Helm) -> None:
    """The comparison sees a one-field change (here the extender's replicas) and a missing object."""
    chart = by_key(helm.template({"extender": {"replicas": 3}}))
    base = by_key(_kustomized(MANIFESTS / "base"))
    del chart[("DeviceClass", "gpu-share.nativedra.dev")]
    found = differences(chart, base)
    assert len(found) == 2
    assert "only in kustomize: ('DeviceClass', 'gpu-share.nativedra.dev')" in found
    assert found[1].startswith("('Deployment', 'nativedra-extender') differs")


def test_simulated_backend_renders_the_simulated_node_overlay(helm: Helm) -> None:
    chart = by_key(helm.template({"plugin": {"backend": "simulated"}}))
    assert differences(chart, by_key(_kustomized(MANIFESTS / "overlays" / "simulated-node"))) == []


def test_second_scheduler_renders_the_second_scheduler_overlay(helm: Helm) -> None:
    """The RoleBinding to kube-system's extension-apiserver-authentication-reader Role stays in
    kube-system in both (the overlay names its namespaces itself rather than moving every object)."""
    chart = by_key(helm.template({"secondScheduler": {"enabled": True}}))
    overlay = by_key(_kustomized(MANIFESTS / "overlays" / "second-scheduler"))
    reader = ("RoleBinding", "nativedra-scheduler-extension-apiserver-authentication-reader")
    assert chart[reader]["metadata"]["namespace"] == overlay[reader]["metadata"]["namespace"] == "kube-system"
    assert differences(chart, overlay) == []


def test_marker_policy_is_the_default_schedulers(helm: Helm) -> None:
    rendered = by_key(helm.template({"schedulerMarkerPolicy": {"enabled": True}}))
    path = MANIFESTS / "scheduler" / "extender-marker-policy.yaml"
    shipped = by_key([d for d in yaml.safe_load_all(path.read_text()) if d])
    for key, document in shipped.items():
        assert rendered[key] == document
    assert not {k for k in by_key(helm.template()) if k[0].startswith("MutatingAdmissionPolicy")}


def _plugin_args(documents: list[dict[str, Any]]) -> list[str]:
    container = named(documents, "DaemonSet", "nativedra-plugin")["spec"]["template"]["spec"]["containers"][0]
    return list(container["args"])


def _publish_config(args: list[str]) -> Any:
    """What the real plugin's flag parser makes of the rendered args (publish settings)."""
    return publish_config_from(build_parser().parse_args([*args, "--node-name", "n"]))


@pytest.mark.parametrize(
    ("values", "fractions", "share_gpus", "mig"),
    [
        ({}, (2, 4, 8), (), True),
        ({"fractions": {"enabled": False}}, (), (), True),
        ({"fractions": {"denominators": [4]}}, (4,), (), True),
        ({"shares": {"enabled": True}}, (2, 4, 8), "all", True),
        ({"fractions": {"enabled": False}, "shares": {"enabled": True}, "mig": {"enabled": False}}, (), "all", False),
    ],
)
def test_fractions_shares_and_mig_reach_the_plugin(
    helm: Helm, values: dict[str, Any], fractions: tuple[int, ...], share_gpus: Any, mig: bool
) -> None:
    config = _publish_config(_plugin_args(helm.template({"plugin": values})))
    assert config.fractions == fractions
    assert config.share_gpus == share_gpus
    assert config.mig is mig


def test_backend_driver_root_node_selector_tolerations_and_image(helm: Helm) -> None:
    values = {
        "image": {"repository": "registry.example/nd", "tag": "1.2.3", "pullPolicy": "Always"},
        "plugin": {
            "backend": "sysfs",
            "driverRoot": "/run/nvidia/driver",
            "nodeSelector": {
                "nativedra.dev/gpu-node": None,
                "example.com/accelerator": "gpu",
            },  # null drops a default key
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
        "extender": {"replicas": 3, "nodeSelector": {"node-role": "infra"}, "tolerations": [{"operator": "Exists"}]},
    }
    documents = helm.template(values)
    args = _plugin_args(documents)
    assert build_parser().parse_args([*args, "--node-name", "n"]).backend == "sysfs"
    plugin = named(documents, "DaemonSet", "nativedra-plugin")["spec"]["template"]["spec"]
    assert {"name": "driver-root", "hostPath": {"path": "/run/nvidia/driver", "type": "Directory"}} in plugin["volumes"]
    assert plugin["nodeSelector"] == {"example.com/accelerator": "gpu"}
    assert plugin["tolerations"] == [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    extender = named(documents, "Deployment", "nativedra-extender")["spec"]
    assert extender["replicas"] == 3
    assert extender["template"]["spec"]["nodeSelector"] == {"node-role": "infra"}
    assert extender["template"]["spec"]["tolerations"] == [{"operator": "Exists"}]
    job = named(documents, "CronJob", "nativedra-extender-cert-renewal")["spec"]["jobTemplate"]["spec"]["template"]
    containers = [plugin["containers"][0], extender["template"]["spec"]["containers"][0], job["spec"]["containers"][0]]
    assert {(c["image"], c["imagePullPolicy"]) for c in containers} == {("registry.example/nd:1.2.3", "Always")}


def test_simulated_backend_arguments_are_the_plugins(helm: Helm) -> None:
    args = _plugin_args(helm.template({"plugin": {"backend": "simulated", "simulated": {"profile": "a100-4x"}}}))
    parsed = build_parser().parse_args([*args, "--node-name", "n"])
    assert (parsed.backend, parsed.profile, str(parsed.dev_root)) == ("simulated", "a100-4x", "/simulated/dev")


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"plugin": {"backend": "cuda"}}, "/plugin/backend"),
        ({"plugin": {"driverRoot": "run/nvidia"}}, "/plugin/driverRoot"),
        ({"extender": {"replicas": -1}}, "/extender/replicas"),
        ({"plugin": {"fractions": {"denominators": [1]}}}, "/plugin/fractions/denominators/0"),
    ],
)
def test_a_bad_value_is_refused_naming_it(helm: Helm, values: dict[str, Any], field: str) -> None:
    with pytest.raises(HelmError, match=field):
        helm.template(values)


def test_generated_certificates_serve_the_extender_and_its_scheduler(helm: Helm) -> None:
    """extender.tls.generate: the serving certificate names the Service and the client certificate
    is for kube-scheduler, both signed by the CA whose key the renewal Job reads."""
    documents = helm.template({"extender": {"tls": {"generate": True}}})
    secrets = {d["metadata"]["name"]: d for d in documents if d["kind"] == "Secret"}
    assert set(secrets) == {"nativedra-extender-ca", "nativedra-extender-tls", "nativedra-scheduler-extender-client"}
    assert all(s["metadata"]["namespace"] == NAMESPACE for s in secrets.values())

    def pem(secret: str, key: str) -> bytes:
        return base64.b64decode(secrets[secret]["data"][key])

    ca = x509.load_pem_x509_certificate(pem("nativedra-extender-ca", "ca.crt"))
    serving = x509.load_pem_x509_certificate(pem("nativedra-extender-tls", "tls.crt"))
    client = x509.load_pem_x509_certificate(pem("nativedra-scheduler-extender-client", "tls.crt"))
    assert pem("nativedra-extender-tls", "ca.crt") == pem("nativedra-scheduler-extender-client", "ca.crt")
    assert x509.load_pem_x509_certificate(pem("nativedra-extender-tls", "ca.crt")) == ca
    public = ca.public_key()
    assert isinstance(public, rsa.RSAPublicKey) and not isinstance(public, ec.EllipticCurvePublicKey)
    for cert in (serving, client):
        assert cert.issuer == ca.subject
        assert cert.signature_hash_algorithm is not None
        public.verify(cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(), cert.signature_hash_algorithm)
        assert dt.timedelta(days=364) < cert.not_valid_after_utc - dt.datetime.now(dt.UTC) <= dt.timedelta(days=365)
    assert dt.timedelta(days=3649) < ca.not_valid_after_utc - dt.datetime.now(dt.UTC) <= dt.timedelta(days=3650)
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == [f"nativedra-extender.{NAMESPACE}.svc"]
    assert client.subject.rfc4514_string() == "CN=kube-scheduler"
    # Each certificate comes with its own key (the extender loads the serving pair with Python's ssl).
    for secret in ("nativedra-extender-tls", "nativedra-scheduler-extender-client"):
        key = serialization.load_pem_private_key(pem(secret, "tls.key"), password=None)
        certificate = x509.load_pem_x509_certificate(pem(secret, "tls.crt"))
        assert key.public_key() == certificate.public_key()


def test_a_ca_shorter_lived_than_its_leaves_is_refused(helm: Helm) -> None:
    with pytest.raises(HelmError, match="caValidityDays"):
        helm.template({"extender": {"tls": {"generate": True, "validityDays": 400, "caValidityDays": 365}}})


def test_secret_names_follow_their_values(helm: Helm) -> None:
    values = {"extender": {"tls": {"secretName": "my-tls", "caSecretName": "my-ca"}}}
    documents = helm.template(values)
    volumes = named(documents, "Deployment", "nativedra-extender")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": "my-tls"}} in volumes
    role = named(documents, "Role", "nativedra-extender-cert-renewal")
    assert [rule["resourceNames"] for rule in role["rules"]] == [["my-ca"], ["my-tls"]]
    job = named(documents, "CronJob", "nativedra-extender-cert-renewal")["spec"]["jobTemplate"]["spec"]["template"]
    parsed = build_parser().parse_args(job["spec"]["containers"][0]["args"])
    assert (parsed.serving_secret, parsed.ca_secret) == ("my-tls", "my-ca")


def test_another_namespace_moves_every_identity_with_it(helm: Helm) -> None:
    documents = helm.template({"namespace": {"name": "gpu-system"}, "secondScheduler": {"enabled": True}})
    namespaced = [d for d in documents if "namespace" in d["metadata"]]
    assert {d["metadata"]["namespace"] for d in namespaced} == {"gpu-system", "kube-system"}
    policy = named(documents, "ValidatingAdmissionPolicy", "nativedra-plugin-own-node-slices")
    assert "system:serviceaccount:gpu-system:nativedra-plugin" in policy["spec"]["matchConditions"][0]["expression"]
    config = yaml.safe_load(named(documents, "ConfigMap", "nativedra-scheduler")["data"]["config.yaml"])
    assert config["extenders"][0]["urlPrefix"] == "https://nativedra-extender.gpu-system.svc:8888"
    subjects = [s for d in documents if d["kind"].endswith("Binding") and "subjects" in d for s in d["subjects"]]
    assert {s["namespace"] for s in subjects} == {"gpu-system"}
