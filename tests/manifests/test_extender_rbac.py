"""The extender's ClusterRole lets it list and watch every kind its ClusterState watches (an
optional kind without the rule is silently treated as absent, native PodGroups for one), and no more;
its only cluster-wide writes are evictions and events (preemption's), and in its own namespace it
writes Leases alone (the leaders, the devices kept for preemptors, gangs' return records)."""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from extender.cluster.informer import CUSTOM_RESOURCES
from extender.cluster.state import ClusterState

REPO = Path(__file__).resolve().parents[2]
BUILT_IN = {"pods": "", "nodes": "", "poddisruptionbudgets": "policy"}  # kinds listed through typed APIs
NAMESPACED = {"preemptions"}  # Leases in the extender's own namespace (the Role's)


@functools.cache
def _base() -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl") or str(Path(sys.executable).parent / "kubectl")
    output = subprocess.run(
        [kubectl, "kustomize", str(REPO / "manifests" / "base")], capture_output=True, text=True, check=True
    ).stdout
    return [d for d in yaml.safe_load_all(output) if d]


def _extender(kind: str) -> dict[str, Any]:
    (found,) = [d for d in _base() if d["kind"] == kind and d["metadata"]["name"] == "nativedra-extender"]
    return found


def _extender_rules() -> list[dict[str, Any]]:
    return list(_extender("ClusterRole")["rules"])


def test_every_watched_kind_can_be_listed_and_watched_and_nothing_else() -> None:
    assert set(ClusterState.KINDS) == set(CUSTOM_RESOURCES) | set(BUILT_IN) | NAMESPACED
    custom = [CUSTOM_RESOURCES[kind] for kind in ClusterState.KINDS if kind in CUSTOM_RESOURCES]
    watched = {(resource.group, resource.plural) for resource in custom}
    watched |= {(group, plural) for plural, group in BUILT_IN.items()}
    granted = {
        (group, resource)
        for rule in _extender_rules()
        if {"list", "watch"} <= set(rule["verbs"])
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert watched - granted == set(), "watched kinds the extender may not list and watch"
    assert granted - watched == set(), "list/watch granted on kinds the extender does not watch"


def test_the_extender_writes_only_evictions_and_events_cluster_wide_and_leases_in_its_namespace() -> None:
    writes = [rule for rule in _extender_rules() if set(rule["verbs"]) - {"get", "list", "watch"}]
    assert writes == [
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    ]
    # Read beyond its watches: whether a LeaderWorkerSet whose group lost pods still exists.
    gets = [rule for rule in _extender_rules() if rule["verbs"] == ["get"]]
    assert gets == [{"apiGroups": ["leaderworkerset.x-k8s.io"], "resources": ["leaderworkersets"], "verbs": ["get"]}]
    role, binding = _extender("Role"), _extender("RoleBinding")
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "nativedra-system"
    assert role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "list", "watch", "create", "patch", "delete"],
        }
    ]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "nativedra-extender"}
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "nativedra-extender", "namespace": "nativedra-system"}
    ]


def test_the_extender_learns_its_own_pod_from_the_downward_api() -> None:
    (container,) = _extender("Deployment")["spec"]["template"]["spec"]["containers"]
    fields = {env["name"]: env["valueFrom"]["fieldRef"]["fieldPath"] for env in container["env"]}
    assert fields == {
        "NATIVEDRA_POD_NAME": "metadata.name",
        "NATIVEDRA_POD_NAMESPACE": "metadata.namespace",
        "NATIVEDRA_POD_UID": "metadata.uid",  # kubectl describe pod selects events by uid
    }
