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
from nativedra.cluster.binaries import DEFAULT_K8S_VERSION
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
    assert len(chart) == 33
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
    chart = by_key(helm.template({"secondScheduler": {"enabled": True}}, kube_version=DEFAULT_K8S_VERSION))
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


@pytest.mark.parametrize("effect", ["NoSchedule", "NoExecute"])
def test_the_fatal_fault_effect_reaches_the_plugin(helm: Helm, effect: str) -> None:
    config = _publish_config(_plugin_args(helm.template({"plugin": {"faults": {"fatalEffect": effect}}})))
    assert config.fatal_fault_effect == effect


def test_backend_driver_root_node_selector_tolerations_and_image(helm: Helm) -> None:
    values = {
        "image": {"repository": "registry.example/nd", "tag": "1.2.3", "pullPolicy": "Always"},
        "plugin": {
            "backend": "nvml",
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
    assert build_parser().parse_args([*args, "--node-name", "n"]).backend == "nvml"
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


def _peers(*peers: dict[str, Any]) -> dict[str, Any]:
    return {"extender": {"networkPolicy": {"schedulerPeers": list(peers)}}}


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"plugin": {"backend": "cuda"}}, "/plugin/backend"),
        ({"plugin": {"driverRoot": "run/nvidia"}}, "/plugin/driverRoot"),
        ({"plugin": {"driverRoot": "/"}}, "/plugin/driverRoot"),
        ({"extender": {"replicas": -1}}, "/extender/replicas"),
        ({"plugin": {"fractions": {"denominators": [1]}}}, "/plugin/fractions/denominators/0"),
        # A scheduler peer that admits everyone on the verbs' port: any namespace, any pod of the
        # extender's, any address, or a peer of a kind a NetworkPolicy does not have.
        (_peers({"namespaceSelector": {}}), "/extender/networkPolicy/schedulerPeers/0/namespaceSelector"),
        (_peers({"podSelector": {"matchLabels": {}}}), "/extender/networkPolicy/schedulerPeers/0/podSelector"),
        (_peers({"ipBlock": {"cidr": "0.0.0.0/0"}}), "/extender/networkPolicy/schedulerPeers/0/ipBlock/cidr"),
        (_peers({"ipBlock": {"cidr": "::/0"}}), "/extender/networkPolicy/schedulerPeers/0/ipBlock/cidr"),
        (_peers({}), "/extender/networkPolicy/schedulerPeers/0"),
        (_peers({"nodeSelector": {"a": "b"}}), "/extender/networkPolicy/schedulerPeers/0"),
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
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["10.96.0.88"]
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
    values = {"namespace": {"name": "gpu-system", "pluginName": "gpu-plugin"}, "secondScheduler": {"enabled": True}}
    documents = helm.template(values)
    namespaced = [d for d in documents if "namespace" in d["metadata"]]
    assert {d["metadata"]["namespace"] for d in namespaced} == {"gpu-system", "gpu-plugin", "kube-system"}
    plugin_objects = {
        (d["kind"], d["metadata"]["name"]) for d in namespaced if d["metadata"]["namespace"] == "gpu-plugin"
    }
    assert plugin_objects == {(kind, "nativedra-plugin") for kind in ("ServiceAccount", "DaemonSet", "NetworkPolicy")}
    for name in ("nativedra-plugin-own-node-slices", "nativedra-plugin-own-node-claims"):
        policy = named(documents, "ValidatingAdmissionPolicy", name)
        assert "system:serviceaccount:gpu-plugin:nativedra-plugin" in policy["spec"]["matchConditions"][0]["expression"]
    config = yaml.safe_load(named(documents, "ConfigMap", "nativedra-scheduler")["data"]["config.yaml"])
    assert config["extenders"][0]["urlPrefix"] == "https://nativedra-extender.gpu-system.svc:8888"
    subjects = [s for d in documents if d["kind"].endswith("Binding") and "subjects" in d for s in d["subjects"]]
    assert {s["namespace"] for s in subjects} == {"gpu-system", "gpu-plugin"}
    labels = {d["metadata"]["name"]: d["metadata"]["labels"] for d in documents if d["kind"] == "Namespace"}
    assert labels["gpu-system"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert labels["gpu-plugin"]["pod-security.kubernetes.io/enforce"] == "privileged"


def test_the_plugin_never_shares_the_restricted_namespace(helm: Helm) -> None:
    with pytest.raises(HelmError, match=r"namespace\.pluginName must differ"):
        helm.template({"namespace": {"name": "gpu", "pluginName": "gpu"}})


# What each backend's code reads on the host (docs/install.md, "What the plugin gets from the host").
BACKEND_HOST_PATHS = {
    "nvml": {"/dev": True, "/sys": True, "/usr/lib/x86_64-linux-gnu": True},
    "sysfs": {"/dev": True, "/sys": True},
    "simulated": {"/var/lib/nativedra/simulated": True},
}
KUBELET_AND_CDI = {
    "/var/lib/kubelet/plugins_registry": False,
    "/var/lib/kubelet/plugins/gpu.nativedra.dev": False,
    "/var/run/cdi": False,
}


@pytest.mark.parametrize("backend", sorted(BACKEND_HOST_PATHS))
def test_each_backend_gets_only_the_host_paths_and_privileges_it_uses(helm: Helm, backend: str) -> None:
    """Host path -> read-only, per backend: never /, never all of /var/lib/kubelet/plugins (other
    drivers' and CSI sockets), no mount propagation back to the host, privileged for NVML only."""
    pod = named(helm.template({"plugin": {"backend": backend}}), "DaemonSet", "nativedra-plugin")["spec"]["template"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    container = pod["spec"]["containers"][0]
    mounted = {
        volumes[m["name"]]["hostPath"]["path"]: bool(m.get("readOnly"))
        for m in container["volumeMounts"]
        if "hostPath" in volumes[m["name"]]
    }
    assert mounted == BACKEND_HOST_PATHS[backend] | KUBELET_AND_CDI
    assert all(m.get("mountPropagation") in (None, "HostToContainer") for m in container["volumeMounts"])
    context = container["securityContext"]
    assert context["privileged"] is (backend == "nvml")
    if backend != "nvml":
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    env = {e["name"] for e in container["env"]}
    assert ("NATIVEDRA_DRIVER_ROOT" in env) is (backend == "nvml")
    assert ("NATIVEDRA_DEV_ROOT" in env) is (backend != "simulated")


def _pod_specs(documents: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each workload's pod template by its name label (the CronJob's through its jobTemplate)."""
    found = {}
    for document in documents:
        spec = document.get("spec", {})
        template = spec.get("jobTemplate", {}).get("spec", {}).get("template") or spec.get("template")
        if document["kind"] in {"Deployment", "DaemonSet", "CronJob"} and template:
            found[template["metadata"]["labels"]["app.kubernetes.io/name"]] = template
    return found


def test_every_pod_takes_pull_secrets_metadata_and_placement(helm: Helm) -> None:
    """The values Helm users set on every chart land on each of the four workloads' pods, and the
    name label that selectors use is never replaced by podLabels."""
    placement: dict[str, Any] = {
        "podAnnotations": {"example.com/owner": "ml-platform"},
        "podLabels": {"team": "infra", "app.kubernetes.io/name": "taken"},
        "nodeSelector": {"node-role.kubernetes.io/infra": ""},
        "tolerations": [{"key": "infra", "operator": "Exists"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
                }
            }
        },
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}],
        "priorityClassName": "infra-critical",
        "resources": {"requests": {"cpu": "1"}},
    }
    values = {
        "imagePullSecrets": [{"name": "regcred"}],
        "plugin": placement,
        "extender": {**placement, "certRenewal": placement},
        "secondScheduler": {"enabled": True, **placement},
    }
    pods = _pod_specs(helm.template(values))
    names = {"nativedra-plugin", "nativedra-extender", "nativedra-extender-cert-renewal", "nativedra-scheduler"}
    assert set(pods) == names
    for name, pod in pods.items():
        spec = pod["spec"]
        assert pod["metadata"]["labels"] == {"app.kubernetes.io/name": name, "team": "infra"}, name
        assert pod["metadata"]["annotations"] == placement["podAnnotations"], name
        assert spec["imagePullSecrets"] == [{"name": "regcred"}], name
        for key in ("tolerations", "topologySpreadConstraints", "priorityClassName"):
            assert spec[key] == placement[key], (name, key)
        for key in ("nodeSelector", "affinity"):  # Helm merges maps into the defaults (null drops a key)
            assert spec[key].items() >= placement[key].items(), (name, key)
        assert [c["resources"]["requests"]["cpu"] for c in spec["containers"]] == ["1"], name


def test_security_contexts_are_values_with_the_base_as_default(helm: Helm) -> None:
    documents = helm.template(
        {
            "extender": {
                "podSecurityContext": {"runAsUser": 1000, "fsGroup": 2000},
                "securityContext": {"readOnlyRootFilesystem": True},
            }
        }
    )
    pod = _pod_specs(documents)["nativedra-extender"]["spec"]
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "fsGroup": 2000,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    dropped = helm.template({"extender": {"securityContext": {"capabilities": None}}})
    assert "capabilities" not in _pod_specs(dropped)["nativedra-extender"]["spec"]["containers"][0]["securityContext"]


def test_monitors_and_scheduler_peers(helm: Helm) -> None:
    """ServiceMonitor (extender) and PodMonitor (plugin) scrape the ports the metrics are served on,
    and a host-network scheduler's nodes join the peers allowed on the verbs' port."""
    peers = [{"ipBlock": {"cidr": "192.0.2.10/32"}}]
    documents = helm.template(
        {
            "plugin": {"podMonitor": {"enabled": True, "labels": {"release": "prom"}}},
            "extender": {
                "serviceMonitor": {"enabled": True, "interval": "1m30s"},
                "networkPolicy": {"schedulerPeers": peers},
            },
        }
    )
    monitor = named(documents, "ServiceMonitor", "nativedra-extender")
    service = named(documents, "Service", "nativedra-extender")
    assert monitor["spec"]["endpoints"] == [{"port": "probes", "path": "/metrics", "interval": "1m30s"}]
    assert "probes" in {port["name"] for port in service["spec"]["ports"]}
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    pod_monitor = named(documents, "PodMonitor", "nativedra-plugin")
    assert pod_monitor["metadata"]["labels"]["release"] == "prom"
    plugin = _pod_specs(documents)["nativedra-plugin"]["spec"]["containers"][0]
    assert pod_monitor["spec"]["podMetricsEndpoints"][0]["port"] in {p["name"] for p in plugin["ports"]}
    verbs = named(documents, "NetworkPolicy", "nativedra-extender")["spec"]["ingress"][0]
    assert verbs["ports"] == [{"port": 8888, "protocol": "TCP"}]
    assert verbs["from"][-1] == peers[0] and len(verbs["from"]) == 3
    assert not {d["kind"] for d in helm.template()} & {"ServiceMonitor", "PodMonitor"}


def _ingress(documents: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return list(named(documents, "NetworkPolicy", name)["spec"]["ingress"])


def _namespaces_admitted(rule: dict[str, Any]) -> list[str]:
    return [peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] for peer in rule["from"]]


def test_network_policies_admit_the_schedulers_on_the_verbs_and_only_monitoring_on_metrics(helm: Helm) -> None:
    """The verbs' port: the second scheduler (a pod of the extender's own namespace: no
    namespaceSelector) and kube-system's kube-scheduler, never a label any tenant can set in its own
    namespace; metrics (extender 8080, plugin metricsPort) from monitoring.namespaces only, and
    from no one but each pod's node when that list is empty."""
    for values in ({}, {"plugin": {"backend": "simulated"}}, {"secondScheduler": {"enabled": True}}):
        for policy in (d for d in helm.template(values) if d["kind"] == "NetworkPolicy"):
            for rule in policy["spec"]["ingress"]:
                assert rule.get("from"), f"{policy['metadata']['name']}: a rule without `from` admits everyone"
                assert all(peer.get("namespaceSelector") != {} for peer in rule["from"]), "any namespace admitted"
    documents = helm.template()
    verbs, metrics = _ingress(documents, "nativedra-extender")
    assert verbs["from"][:2] == [
        {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "nativedra-scheduler"}}},
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"component": "kube-scheduler"}},
        },
    ]
    assert (metrics["ports"], _namespaces_admitted(metrics)) == ([{"port": 8080, "protocol": "TCP"}], ["monitoring"])
    (plugin,) = _ingress(documents, "nativedra-plugin")
    assert (plugin["ports"], _namespaces_admitted(plugin)) == ([{"port": 9400, "protocol": "TCP"}], ["monitoring"])
    assert named(documents, "NetworkPolicy", "nativedra-plugin")["metadata"]["namespace"] == "nativedra-plugin"

    documents = helm.template({"monitoring": {"namespaces": ["prometheus", "obs"]}, "plugin": {"metricsPort": 9500}})
    (plugin,) = _ingress(documents, "nativedra-plugin")
    assert (plugin["ports"], _namespaces_admitted(plugin)) == (
        [{"port": 9500, "protocol": "TCP"}],
        ["prometheus", "obs"],
    )
    assert _namespaces_admitted(_ingress(documents, "nativedra-extender")[1]) == ["prometheus", "obs"]

    documents = helm.template({"monitoring": {"namespaces": []}})
    assert [rule["ports"] for rule in _ingress(documents, "nativedra-extender")] == [
        [{"port": 8888, "protocol": "TCP"}]
    ]
    assert _ingress(documents, "nativedra-plugin") == []
    assert "NetworkPolicy" not in {
        d["kind"]
        for d in helm.template({"plugin": {"networkPolicy": {"enabled": False}}})
        if d["metadata"]["name"] == "nativedra-plugin"
    }


def test_the_extender_accepts_the_client_identities_the_values_name(helm: Helm) -> None:
    def args(values: dict[str, Any]) -> list[str]:
        return list(_pod_specs(helm.template(values))["nativedra-extender"]["spec"]["containers"][0]["args"])

    assert "--client-identities=kube-scheduler" in args({})
    names = {"extender": {"tls": {"clientIdentities": ["kube-scheduler", "spiffe://c/ns/kube-system/sa/s"]}}}
    assert "--client-identities=kube-scheduler,spiffe://c/ns/kube-system/sa/s" in args(names)
    parsed = build_parser().parse_args(
        ["extender", "--client-identities=kube-scheduler,spiffe://c/ns/kube-system/sa/s"]
    )
    assert parsed.client_identities == {"kube-scheduler", "spiffe://c/ns/kube-system/sa/s"}
    for refused in ([], ["a,b"], ["two words"]):
        with pytest.raises(HelmError, match="clientIdentities"):
            helm.template({"extender": {"tls": {"clientIdentities": refused}}})


@pytest.mark.parametrize(
    "values",
    [
        {"extender": {"replicsa": 3}},
        {"plugin": {"fractions": {"denominator": [4]}}},
        {"imagePullSecret": [{"name": "x"}]},
        {"extender": {"service": {"clusterIP": "nativedra.example"}}},
        {"secondScheduler": {"resources": {"request": {"cpu": "1"}}}},
        {"extender": {"serviceMonitor": {"interval": "soon"}}},
    ],
)
def test_a_typo_fails_the_install_instead_of_being_ignored(helm: Helm, values: dict[str, Any]) -> None:
    with pytest.raises(HelmError, match=r"additional properties|does not match pattern"):
        helm.template(values)


@pytest.mark.parametrize("version", ["v1.34.4", "v1.35.4", "v1.36.2", "v1.37.2", "v1.38.0-beta.0"])
def test_each_release_gets_its_wiring(helm: Helm, version: str) -> None:
    """Lint passes for every release the chart allows; the second scheduler runs the cluster's own
    kube-scheduler; marker policies (admissionregistration.k8s.io/v1, GA in 1.36) render from 1.36
    and the second scheduler's entry names the marker only there; asking for the default
    scheduler's policy earlier fails naming the value."""
    second = {"secondScheduler": {"enabled": True}}
    helm("lint", "--strict", "--kube-version", version, str(CHART), *helm.values_args(second))
    documents = helm.template(second, kube_version=version)
    image = _pod_specs(documents)["nativedra-scheduler"]["spec"]["containers"][0]["image"]
    release = version.split("-", maxsplit=1)[0]  # helm's --kube-version drops a pre-release ("-beta.0")
    assert image == f"registry.k8s.io/kube-scheduler:{release}"
    config = yaml.safe_load(named(documents, "ConfigMap", "nativedra-scheduler")["data"]["config.yaml"])
    policies = {d["metadata"]["name"] for d in documents if d["kind"] == "MutatingAdmissionPolicy"}
    served = tuple(int(part) for part in version.lstrip("v").split(".")[:2]) >= (1, 36)
    assert ("managedResources" in config["extenders"][0]) is served
    assert policies == ({"nativedra-scheduler-extender-marker"} if served else set())
    marker = {"schedulerMarkerPolicy": {"enabled": True}}
    if served:
        rendered = helm.template(marker, kube_version=version)
        assert "nativedra-extender-marker" in {d["metadata"]["name"] for d in rendered}
    else:
        with pytest.raises(HelmError, match=r"schedulerMarkerPolicy\.enabled needs Kubernetes 1\.36"):
            helm.template(marker, kube_version=version)


@pytest.mark.parametrize("values", [{"secondScheduler": {"enabled": True}}, {"extender": {"tls": {"generate": True}}}])
def test_the_client_secret_is_renewed_where_the_chart_makes_or_mounts_it(helm: Helm, values: dict[str, Any]) -> None:
    """The CronJob's run renews the second scheduler's client Secret too, and its Role may update
    that Secret (by name) and nothing more; without either value neither is there."""
    for given, expected in ((values, ["nativedra-scheduler-extender-client"]), ({}, [])):
        documents = helm.template(given)
        job = named(documents, "CronJob", "nativedra-extender-cert-renewal")["spec"]["jobTemplate"]["spec"]
        parsed = build_parser().parse_args(job["template"]["spec"]["containers"][0]["args"])
        assert parsed.client_secret == expected
        rules = named(documents, "Role", "nativedra-extender-cert-renewal")["rules"]
        updatable = [name for rule in rules if "update" in rule["verbs"] for name in rule["resourceNames"]]
        assert updatable == ["nativedra-extender-tls", *expected]


def test_cert_manager_issues_the_three_secrets_where_it_is_served(helm: Helm) -> None:
    """extender.tls.certManager: a CA whose key survives its renewals, and the serving (DNS name and
    fixed ClusterIP) and client certificates from it, in the Secrets the Deployment, the second
    scheduler and the renewal tools read; no renewal CronJob. Refused without cert-manager's API and
    together with generate."""
    values = {"extender": {"tls": {"certManager": {"enabled": True}}}}
    with pytest.raises(HelmError, match="needs cert-manager"):
        helm.template(values)
    with pytest.raises(HelmError, match="choose one"):
        helm.template({"extender": {"tls": {"certManager": {"enabled": True}, "generate": True}}})
    documents = helm.template(values, api_versions=("cert-manager.io/v1",))
    certificates = {d["metadata"]["name"]: d["spec"] for d in documents if d["kind"] == "Certificate"}
    assert set(certificates) == {
        "nativedra-extender-ca",
        "nativedra-extender-tls",
        "nativedra-scheduler-extender-client",
    }
    ca, serving, client = (certificates[name] for name in sorted(certificates))
    assert ca["isCA"] is True and ca["privateKey"]["rotationPolicy"] == "Never"
    assert (ca["duration"], ca["renewBefore"]) == ("87600h", "8760h")
    assert serving["dnsNames"] == [f"nativedra-extender.{NAMESPACE}.svc"] and serving["ipAddresses"] == ["10.96.0.88"]
    assert (serving["duration"], serving["renewBefore"]) == ("8760h", "1440h")
    assert "server auth" in serving["usages"] and "client auth" in client["usages"]
    volumes = named(documents, "Deployment", "nativedra-extender")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": serving["secretName"]}} in volumes
    assert ca["secretName"] == "nativedra-extender-ca" and client["secretName"] == "nativedra-scheduler-extender-client"
    issuers = {d["metadata"]["name"] for d in documents if d["kind"] == "Issuer"}
    assert {serving["issuerRef"]["name"], client["issuerRef"]["name"], ca["issuerRef"]["name"]} == issuers
    assert not [d for d in documents if d["kind"] in {"CronJob", "Secret"}]


def test_the_second_scheduler_needs_no_fixed_cluster_ip(helm: Helm) -> None:
    """It calls the Service's DNS name from its pod: no fixed address (which would fail on a Service
    range without it) and no IP in the generated serving certificate; the overlay does the same."""
    documents = helm.template({"secondScheduler": {"enabled": True}, "extender": {"tls": {"generate": True}}})
    assert "clusterIP" not in named(documents, "Service", "nativedra-extender")["spec"]
    serving = base64.b64decode(named(documents, "Secret", "nativedra-extender-tls")["data"]["tls.crt"])
    names = x509.load_pem_x509_certificate(serving).extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert names.value.get_values_for_type(x509.IPAddress) == []
    overlay = by_key(_kustomized(MANIFESTS / "overlays" / "second-scheduler"))
    assert "clusterIP" not in overlay[("Service", "nativedra-extender")]["spec"]
    assert (
        by_key(_kustomized(MANIFESTS / "base"))[("Service", "nativedra-extender")]["spec"]["clusterIP"] == "10.96.0.88"
    )


def test_protected_namespaces_and_the_extenders_own_are_refused_its_evictions(helm: Helm) -> None:
    values = {"namespace": {"name": "gpu-system"}, "extender": {"protectedNamespaces": ["kube-system", "team-x"]}}
    documents = helm.template(values)
    policy = named(documents, "ValidatingAdmissionPolicy", "nativedra-extender-evictions")
    assert (
        policy["spec"]["validations"][0]["expression"]
        == '!(request.namespace in ["kube-system", "team-x", "gpu-system"])'
    )
    assert "system:serviceaccount:gpu-system:nativedra-extender" in policy["spec"]["matchConditions"][0]["expression"]
    decisions = named(documents, "ValidatingAdmissionPolicy", "nativedra-extender-own-decisions")
    assert decisions["spec"]["matchConstraints"]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "gpu-system"
    }
