"""Cluster state fed by list+watch of the objects the extender reads.

Raw objects are kept as dicts; node models and usage are rebuilt lazily, per node, when a slice,
node or claim of that node changed. A restarted extender lists everything again and gets the same
view: nothing needed for correctness lives only in memory.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import defaultdict
from typing import Any

from kubernetes import client, watch

from extender.gang import JobSetShape, may_belong_to_gang
from extender.model import Node, Usage, nodes_from, usage_from
from extender.view import ClusterView
from kube.resources import (
    COSCHEDULING_POD_GROUPS,
    DEVICE_CLASSES,
    JOBSETS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    Resource,
)

log = logging.getLogger(__name__)
# Custom resources are listed through `CustomObjectsApi`; built-in kinds through their typed APIs.
CUSTOM_RESOURCES: dict[str, Resource] = {
    r.plural: r
    for r in (
        RESOURCE_SLICES,
        RESOURCE_CLAIMS,
        RESOURCE_CLAIM_TEMPLATES,
        DEVICE_CLASSES,
        COSCHEDULING_POD_GROUPS,
        JOBSETS,
    )
}
Key = tuple[str, str]
OPTIONAL_KIND_RETRY_S = 5.0  # a JobSet created right after its CRD waits at most this long


def _key(obj: dict[str, Any]) -> Key:
    return obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def _relevant_pod(pod: dict[str, Any]) -> bool:
    """Pods that can matter: with claims, or in a gang."""
    return bool((pod.get("spec") or {}).get("resourceClaims")) or may_belong_to_gang(pod)


def _has_pod_affinity(pod: dict[str, Any]) -> bool:
    affinity = (pod.get("spec") or {}).get("affinity") or {}
    return bool(affinity.get("podAffinity") or affinity.get("podAntiAffinity"))


class ClusterState:
    """Every watched kind is stored the same way. Required kinds gate readiness: without their
    first list the view would be wrong. Optional kinds are CRDs that may not be installed
    (scheduler-plugins PodGroups): when the API does not serve one, it simply has no objects, and
    readiness never waits for it."""

    REQUIRED_KINDS = (
        "nodes",
        "pods",
        "resourceslices",
        "resourceclaims",
        "resourceclaimtemplates",
        "deviceclasses",
    )
    OPTIONAL_KINDS = ("podgroups", "jobsets")
    KINDS = REQUIRED_KINDS + OPTIONAL_KINDS

    def __init__(self, driver: str) -> None:
        self.driver = driver
        self.lock = threading.RLock()
        self.version = 0
        self.objects: dict[str, dict[Key, dict[str, Any]]] = {kind: {} for kind in self.KINDS}
        self._synced: set[str] = set()
        self._nodes: dict[str, Node] = {}
        self._usage: dict[str, Usage] = {}
        self._slices_by_node: dict[str, dict[Key, dict[str, Any]]] = defaultdict(dict)
        self._claims_by_node: dict[str, set[Key]] = defaultdict(set)
        self._dirty_nodes: set[str] = set()
        self._dirty_usage: set[str] = set()
        # Pods that may be gang members (in the order the pods were first stored) and pods with
        # inter-pod (anti-)affinity: readers look at these, not at every pod.
        self._gang_pods: dict[Key, None] = {}
        self._affinity_pods: set[Key] = set()

    def missing(self) -> list[str]:
        """Required kinds not listed yet, for /readyz to name."""
        with self.lock:
            return sorted(set(self.REQUIRED_KINDS) - self._synced)

    # -- updates -------------------------------------------------------------------------------

    def replace(self, kind: str, items: list[dict[str, Any]]) -> None:
        with self.lock:
            for key in list(self.objects[kind]):
                self._forget(kind, key)
            for item in items:
                self._store(kind, item)
            self._synced.add(kind)
            self.version += 1

    def absent(self, kind: str) -> None:
        """The API does not serve optional `kind` (its CRD is not installed): it has no objects,
        and any seen before the CRD went away are gone with it."""
        self.replace(kind, [])

    def apply(self, event: str, kind: str, obj: dict[str, Any]) -> None:
        with self.lock:
            if event == "DELETED":
                self._forget(kind, _key(obj))
            else:
                self._store(kind, obj)
            self.version += 1

    def _pools(self, claim: dict[str, Any]) -> set[str]:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        return {
            r.get("pool", "")
            for r in allocation.get("devices", {}).get("results") or []
            if r.get("driver") == self.driver
        }

    def _forget(self, kind: str, key: Key) -> None:
        old = self.objects[kind].pop(key, None)
        if old is not None:
            self._touch(kind, key, old)

    def _store(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "pods" and not _relevant_pod(obj):
            self._forget(kind, _key(obj))
            return
        key = _key(obj)
        old = self.objects[kind].get(key)
        self.objects[kind][key] = obj
        if old is not None:
            self._touch(kind, key, old)
        self._touch(kind, key, obj, stored=True)

    def _touch(self, kind: str, key: Key, obj: dict[str, Any], stored: bool = False) -> None:
        if kind == "nodes":
            self._dirty_nodes.add(key[1])
        elif kind == "pods":
            if not stored and key in self.objects["pods"]:
                return  # replaced: the new object's touch follows, and the pod keeps its place
            if stored and may_belong_to_gang(obj):
                self._gang_pods.setdefault(key)
            else:
                self._gang_pods.pop(key, None)
            if stored and _has_pod_affinity(obj):
                self._affinity_pods.add(key)
            else:
                self._affinity_pods.discard(key)
        elif kind == "resourceslices":
            node = (obj.get("spec") or {}).get("nodeName") or ""
            if stored:
                self._slices_by_node[node][key] = obj
            else:
                self._slices_by_node[node].pop(key, None)
            self._dirty_nodes.add(node)
        elif kind == "resourceclaims":
            for pool in self._pools(obj):
                if stored:
                    self._claims_by_node[pool].add(key)
                else:
                    self._claims_by_node[pool].discard(key)
                self._dirty_usage.add(pool)

    # -- reading -------------------------------------------------------------------------------

    def _rebuild(self) -> None:
        for name in self._dirty_nodes:
            node_object = self.objects["nodes"].get(("", name))
            if node_object is None:
                self._nodes.pop(name, None)
                self._usage.pop(name, None)
                continue
            self._nodes.update(nodes_from([node_object], list(self._slices_by_node[name].values()), self.driver))
            self._dirty_usage.add(name)
        self._dirty_nodes.clear()
        for name in self._dirty_usage:
            if name not in self._nodes:
                continue
            claims = [
                self.objects["resourceclaims"][k]
                for k in self._claims_by_node[name]
                if k in self.objects["resourceclaims"]
            ]
            rebuilt = usage_from(claims, {name: self._nodes[name]}, self.driver)[name]
            if self._usage.get(name) != rebuilt:  # an update that changes nothing keeps the object
                self._usage[name] = rebuilt
        self._dirty_usage.clear()

    def view(self) -> ClusterView:
        with self.lock:
            self._rebuild()
            pod_groups = {
                key: int((group.get("spec") or {}).get("minMember") or 0)
                for key, group in self.objects["podgroups"].items()
            }
            return ClusterView(
                version=self.version,
                nodes=dict(self._nodes),
                usage=dict(self._usage),
                pods=dict(self.objects["pods"]),
                claims=dict(self.objects["resourceclaims"]),
                templates=dict(self.objects["resourceclaimtemplates"]),
                classes={k[1]: v for k, v in self.objects["deviceclasses"].items()},
                jobsets={key: JobSetShape.from_api(obj) for key, obj in self.objects["jobsets"].items()},
                pod_group_min=pod_groups,
                gang_pods=tuple(self._gang_pods),
                affinity_pods=frozenset(self._affinity_pods),
            )


def _lister(api: client.ApiClient, kind: str) -> Any:
    core = client.CoreV1Api(api)
    if kind == "nodes":
        return core.list_node
    if kind == "pods":
        return core.list_pod_for_all_namespaces
    return CUSTOM_RESOURCES[kind].lister(api)


def run_informer(api: client.ApiClient, state: ClusterState, kind: str, stop: threading.Event) -> None:
    """List, then watch from that resourceVersion; re-list on any error (e.g. 410 Gone, API restart)."""
    lister = _lister(api, kind)
    while not stop.is_set():
        try:
            response = lister(_preload_content=False)
            listing = json.loads(response.data)
            state.replace(kind, listing.get("items") or [])
            version = listing["metadata"].get("resourceVersion")
            for event in watch.Watch().stream(lister, resource_version=version, timeout_seconds=300):
                if stop.is_set():
                    return
                if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                    state.apply(event["type"], kind, event["raw_object"])
        except client.ApiException as error:
            if error.status == 404 and kind in ClusterState.OPTIONAL_KINDS:
                state.absent(kind)
                stop.wait(OPTIONAL_KIND_RETRY_S)  # the CRD may be installed after the extender starts
                continue
            log.warning("%s watch: %s %s; re-listing", kind, error.status, error.reason)
            stop.wait(1)
        except Exception as error:  # noqa: BLE001 - API restarts and dropped connections: re-list
            log.warning("%s watch interrupted: %s; re-listing", kind, error)
            stop.wait(1)
