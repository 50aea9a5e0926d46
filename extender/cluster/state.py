"""Cluster state fed by list+watch of the objects the extender reads.

Raw objects are kept as dicts; node models and usage are rebuilt lazily, per node, when a slice,
node or claim of that node changed. A restarted extender lists everything again and gets the same
view: nothing needed for correctness lives only in memory.

Views are snapshots shared between calls: a kind's mapping is copied only when that kind changed
since the last view, and node models and usage are published copy-on-write, so an unchanged
mapping is the very same object in the next view. A bounded journal says which objects, node
models and usages changed between two versions, so readers look at those instead of every node.
"""

from __future__ import annotations

import logging
import threading
import weakref
from bisect import bisect_right
from collections import defaultdict
from typing import Any

from extender.cluster.membership import GangSources, MemberIndex
from extender.cluster.reservation import Reservation, ReservationError, from_lease
from extender.cluster.view import ClusterView
from extender.devices.node_usage import (
    Allocated,
    Node,
    Usage,
    allocated_results,
    nodes_from,
    published_digest,
    share_values,
    usage_of,
)
from extender.pods.gang import JobSetShape, NativeGroup, may_belong_to_gang
from extender.pods.node_admission import NONE, NodeAdmission, Requests, counts_on_node, pod_requests
from nativedra.base.gcutil.collector import built_in_bulk, freeze_survivors
from nativedra.base.kube.pods import extended_claim_name, extended_resources

log = logging.getLogger(__name__)
NATIVE_KINDS = ("nativepodgroups", "nativepodgroups-v1alpha2")
Key = tuple[str, str]
Change = tuple[str, Key]  # (kind, key); node models are kind "node" and usage "usage", key ("", node name)
JOURNALED = frozenset({"pods", "resourceclaims", "resourceclaimtemplates"})


def _key(obj: dict[str, Any]) -> Key:
    return obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def _relevant_pod(pod: dict[str, Any]) -> bool:
    """Pods that can matter: with claims (the scheduler's special claim for extended resources
    among them, or extended resources it may make one for), or in a gang."""
    return (
        bool((pod.get("spec") or {}).get("resourceClaims"))
        or may_belong_to_gang(pod)
        or extended_claim_name(pod) is not None
        or bool(extended_resources(pod))
    )


def _has_pod_affinity(pod: dict[str, Any]) -> bool:
    affinity = (pod.get("spec") or {}).get("affinity") or {}
    return bool(affinity.get("podAffinity") or affinity.get("podAntiAffinity"))


class ClusterState:
    """Every watched kind is stored the same way. Required kinds gate readiness: without their
    first list the view would be wrong. Optional kinds are CRDs that may not be installed
    (scheduler-plugins PodGroups): when the API does not serve one, it simply has no objects, and
    readiness never waits for it. Native PodGroups are optional the same way: the API is served
    only with a feature gate on."""

    REQUIRED_KINDS = (
        "nodes",
        "pods",
        "resourceslices",
        "resourceclaims",
        "resourceclaimtemplates",
        "deviceclasses",
    )
    # PodDisruptionBudgets and the preemption Leases (in the extender's namespace) only matter to
    # preemption: without them it counts no budget, and keeps no devices.
    OPTIONAL_KINDS = ("podgroups", "jobsets", *NATIVE_KINDS, "poddisruptionbudgets", "preemptions")
    KINDS = REQUIRED_KINDS + OPTIONAL_KINDS

    def __init__(self, driver: str) -> None:
        self.driver = driver
        self.lock = threading.RLock()
        self.version = 0
        self.objects: dict[str, dict[Key, dict[str, Any]]] = {kind: {} for kind in self.KINDS}
        self._synced: set[str] = set()
        self._absent: set[str] = set()  # optional kinds the API does not serve (or lets us read)
        # The native PodGroups as the planner reads them, kept until one changes.
        self._native: dict[Key, NativeGroup] | None = None
        self._nodes: dict[str, Node] = {}
        self._usage: dict[str, Usage] = {}
        self._slices_by_node: dict[str, dict[Key, dict[str, Any]]] = defaultdict(dict)
        self._slice_digests: dict[Key, bytes] = {}  # `published_digest` of each of our slices, made as it arrived
        self._claims_by_node: dict[str, set[Key]] = defaultdict(set)
        self._claim_results: dict[Key, tuple[Allocated, ...]] = {}  # allocated claims' `allocated_results`
        # Other drivers' pools of NUMA-placed devices (extender.devices.node_usage `Node.partners`): their
        # claims, and the node each pool is on.
        self._claims_by_partner_pool: dict[tuple[str, str], set[Key]] = defaultdict(set)
        self._partner_pool_node: dict[tuple[str, str], str] = {}
        self._node_partner_pools: dict[str, set[tuple[str, str]]] = {}
        self._dirty_nodes: set[str] = set()
        self._dirty_usage: set[str] = set()
        # Pods that may be gang members, with their gangs and members kept current, and pods with
        # inter-pod (anti-)affinity: readers look at these, not at every pod.
        self._members = MemberIndex()
        self._affinity_pods: set[Key] = set()
        # Devices kept for preemptors (extender.cluster.reservation), by Lease; added to their nodes' usage.
        self._reservations: dict[Key, Reservation] = {}
        # One usage object per value, while some node has it (see `_canonical`).
        self._usages: weakref.WeakValueDictionary[tuple[Any, ...], Usage] = weakref.WeakValueDictionary()
        # What the last view handed out, replaced (never changed) when something changed since.
        self._snapshots: dict[str, dict[Key, dict[str, Any]]] = {}
        self._nodes_view: dict[str, Node] = {}
        self._usage_view: dict[str, Usage] = {}
        self._view: ClusterView | None = None
        # The journal: (version, change) in version order, at most JOURNAL_MAX entries; changes at
        # or before `_journal_floor` are no longer listed (readers then look at everything).
        self._journal_versions: list[int] = []
        self._journal_changes: list[Change] = []
        self._journal_floor = 0
        self._since_freeze = 0  # watch events applied since the objects were last frozen
        self._unjournaled_version = 0
        # What decides a node's admission apart from devices (taints, cordon, allocatable), and what
        # every pod bound there asks, pods outside the view too: preemption evicts only where the
        # preemptor would then pass the scheduler's filters.
        self._admission: dict[str, NodeAdmission] = {}
        self._pod_requests: dict[Key, tuple[str, Requests]] = {}
        self._node_requested: dict[str, Requests] = {}
        self._requests_seen: dict[Requests, Requests] = {}  # one object per value: most pods ask alike

    # Between two scheduling calls a busy cluster delivers tens of events, a burst a few thousand; a
    # reader further behind than this checks everything (correct, only slower).
    JOURNAL_MAX = 8_192
    # Node models rebuilt at once past which the collector is paused (see nativedra.base.gcutil.collector).
    BULK_NODES = 256
    # Watch events between two freezes of the objects held (see `apply`).
    REFREEZE_EVENTS = 1_000

    def _note(self, change: Change, version: int) -> None:
        self._journal_versions.append(version)
        self._journal_changes.append(change)
        if len(self._journal_versions) > self.JOURNAL_MAX:
            drop = len(self._journal_versions) // 2
            self._journal_floor = self._journal_versions[drop - 1]
            del self._journal_versions[:drop]
            del self._journal_changes[:drop]

    def changes(self, since: int, upto: int) -> set[Change] | None:
        """What changed after version `since` up to `upto` (journaled kinds, node models, usage),
        or None when the journal no longer reaches back that far."""
        with self.lock:
            if since < self._journal_floor or since > upto:
                return None
            low = bisect_right(self._journal_versions, since)
            high = bisect_right(self._journal_versions, upto)
            return set(self._journal_changes[low:high])

    def missing(self) -> list[str]:
        """Required kinds not listed yet, for /readyz to name."""
        with self.lock:
            return sorted(set(self.REQUIRED_KINDS) - self._synced)

    # -- updates -------------------------------------------------------------------------------

    def replace(self, kind: str, items: list[dict[str, Any]]) -> None:
        with self.lock:
            self._absent.discard(kind)
            if kind in NATIVE_KINDS:
                self._native = None
            for key in list(self.objects[kind]):
                self._forget(kind, key)
            if kind == "pods":
                self._pod_requests.clear()
                self._node_requested.clear()
            for item in items:
                self._store(kind, item)
                if kind == "pods":
                    self._account(_key(item), item)
            self._synced.add(kind)
            self.version += 1
            self._journal_floor = self.version  # a whole kind replaced: readers look at everything
            self._unjournaled_version += 1
            self._journal_versions.clear()
            self._journal_changes.clear()

    def absent(self, kind: str) -> bool:
        """The API does not serve optional `kind` (its CRD is not installed, its feature gate is
        off): it has no objects, and any seen before it went away are gone with it. True when it
        was not known to be absent before, so the caller says so once."""
        with self.lock:
            newly = kind not in self._absent
            self.replace(kind, [])
            self._absent.add(kind)
            return newly

    def apply(self, event: str, kind: str, obj: dict[str, Any]) -> None:
        with self.lock:
            if event == "DELETED":
                self._forget(kind, _key(obj))
            else:
                self._store(kind, obj)
            if kind == "pods":
                self._account(_key(obj), None if event == "DELETED" else obj)
            self.version += 1
            self._since_freeze += 1
            if self._since_freeze >= self.REFREEZE_EVENTS and not self.missing():
                # Objects from watch events live until replaced, like the listed ones: a full
                # collection walking all of them stalled a call for up to 280 ms at 5,000 nodes.
                # Only what arrived since the last freeze is collected, then frozen (nativedra.base.gcutil.collector).
                freeze_survivors()
                self._since_freeze = 0

    MAX_REQUEST_SHAPES = 65_536

    def _account(self, key: Key, pod: dict[str, Any] | None) -> None:
        """Keep the node's requested total current as a pod comes, changes or goes."""
        old = self._pod_requests.pop(key, None)
        if old is not None:
            node, requests = old
            left = self._node_requested[node].minus(requests)
            if left.pods > 0:
                self._node_requested[node] = left
            else:
                del self._node_requested[node]
        if pod is None or not counts_on_node(pod):
            return
        node, requests = pod["spec"]["nodeName"], pod_requests(pod)
        if len(self._requests_seen) < self.MAX_REQUEST_SHAPES:
            requests = self._requests_seen.setdefault(requests, requests)
        self._pod_requests[key] = (node, requests)
        self._node_requested[node] = self._node_requested.get(node, NONE).plus(requests)

    def node_room(self) -> tuple[dict[str, NodeAdmission], dict[str, Requests]]:
        """Each node's admission facts and what the pods bound there ask, all pods counted."""
        with self.lock:
            return dict(self._admission), dict(self._node_requested)

    def _forget(self, kind: str, key: Key) -> None:
        old = self.objects[kind].pop(key, None)
        if old is not None:
            self._changed(kind, key)
            self._touch(kind, key, old)

    def _changed(self, kind: str, key: Key) -> None:
        self._snapshots.pop(kind, None)
        if kind in NATIVE_KINDS:
            self._native = None
        self._view = None
        if kind in ("resourceclaims", "resourceclaimtemplates"):
            self._members.object_changed(kind, key)
        if kind in JOURNALED:
            self._note((kind, key), self.version + 1)
        else:
            self._unjournaled_version += 1

    def _store(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "pods" and not _relevant_pod(obj):
            self._forget(kind, _key(obj))
            return
        key = _key(obj)
        if kind == "resourceslices":
            share_values(obj)
        old = self.objects[kind].get(key)
        self.objects[kind][key] = obj
        self._changed(kind, key)
        if old is not None:
            self._touch(kind, key, old)
        self._touch(kind, key, obj, stored=True)

    def _touch(self, kind: str, key: Key, obj: dict[str, Any], stored: bool = False) -> None:
        if kind == "nodes":
            self._dirty_nodes.add(key[1])
            if stored:
                self._admission[key[1]] = NodeAdmission.of(obj)
            elif key not in self.objects["nodes"]:
                self._admission.pop(key[1], None)
        elif kind == "pods":
            if not stored and key in self.objects["pods"]:
                return  # replaced: the new object's touch follows, and the pod keeps its place
            if stored and may_belong_to_gang(obj):
                self._members.pod_stored(key, obj)
            else:
                self._members.pod_forgotten(key)
            if stored and _has_pod_affinity(obj):
                self._affinity_pods.add(key)
            else:
                self._affinity_pods.discard(key)
        elif kind == "resourceslices":
            node = (obj.get("spec") or {}).get("nodeName") or ""
            # An object leaving (deleted, or replaced: its successor is touched next) takes its
            # digest along; only our slices make node models.
            if stored:
                self._slices_by_node[node][key] = obj
                if (obj.get("spec") or {}).get("driver") == self.driver:
                    self._slice_digests[key] = published_digest(obj)
            else:
                self._slices_by_node[node].pop(key, None)
                self._slice_digests.pop(key, None)
            self._dirty_nodes.add(node)
        elif kind == "preemptions":
            self._reservation_touched(key, obj, stored)
        elif kind == "resourceclaims":
            # An object leaving (deleted, or replaced: its successor is touched next) takes along
            # what was read of it when it arrived.
            results = allocated_results(obj) if stored else self._claim_results.pop(key, ())
            if stored and results:
                self._claim_results[key] = results
            ours, theirs = set(), set()
            for driver, pool, _, _ in results:
                if driver == self.driver:
                    ours.add(pool)
                else:
                    theirs.add((driver, pool))
            for pool in ours:
                if stored:
                    self._claims_by_node[pool].add(key)
                else:
                    self._claims_by_node[pool].discard(key)
                self._dirty_usage.add(pool)
            for partner_pool in theirs:
                if stored:
                    self._claims_by_partner_pool[partner_pool].add(key)
                else:
                    self._claims_by_partner_pool[partner_pool].discard(key)
                    if not self._claims_by_partner_pool[partner_pool]:
                        del self._claims_by_partner_pool[partner_pool]
                node = self._partner_pool_node.get(partner_pool)
                if node is not None:
                    self._dirty_usage.add(node)

    def _reservation_touched(self, key: Key, lease: dict[str, Any], stored: bool) -> None:
        old = self._reservations.pop(key, None)
        if old is not None:
            self._dirty_usage.update(old.nodes)
        if not stored:
            return
        try:
            reservation = from_lease(lease)
        except ReservationError as error:
            log.error("ignoring a preemption Lease: %s", error)
            return
        self._reservations[key] = reservation
        self._dirty_usage.update(reservation.nodes)

    def _canonical(self, usage: Usage) -> Usage:
        """The one object of this value: nodes used alike share it, so a score or fit worked out
        for one serves them all, and thousands of full nodes hold one usage, not thousands."""
        key = usage.fingerprint()
        found = self._usages.get(key)
        if found is None:
            self._usages[key] = found = usage
        return found

    def _kept(self, node: str, usage: Usage) -> Usage:
        """`usage` with the devices kept on `node` for preemptors."""
        for reservation in self._reservations.values():
            reserved = reservation.nodes.get(node)
            if reserved is not None:
                usage = usage.plus(reserved.usage)
        return usage

    # -- reading -------------------------------------------------------------------------------

    def _rebuild(self) -> None:
        """Node models and usage of the nodes touched since the last view; the published mappings
        are replaced by updated copies (a view holds the old ones), and each change is journaled."""
        if not self._dirty_nodes and not self._dirty_usage:
            return
        if len(self._dirty_nodes) + len(self._dirty_usage) > self.BULK_NODES:
            with built_in_bulk():
                self._rebuild_dirty()
            return
        self._rebuild_dirty()

    def _rebuild_dirty(self) -> None:
        nodes: dict[str, Node | None] = {}
        usage: dict[str, Usage | None] = {}
        for name in self._dirty_nodes:
            node_object = self.objects["nodes"].get(("", name))
            if node_object is None:
                if name in self._nodes:
                    nodes[name] = usage[name] = None
                continue
            slices = list(self._slices_by_node[name].values())
            nodes.update(nodes_from([node_object], slices, self.driver, lambda s: self._slice_digests[_key(s)]))
            self._partner_pools(name, slices)
            self._dirty_usage.add(name)
        self._dirty_nodes.clear()
        for name, node in nodes.items():
            if node is None:
                self._nodes.pop(name, None)
                self._usage.pop(name, None)
                self._partner_pools(name, [])
            else:
                self._nodes[name] = node
            self._note(("node", ("", name)), self.version)
        for name in self._dirty_usage:
            if name not in self._nodes:
                if self._usage.pop(name, None) is not None:
                    usage[name] = None
                continue
            keys = self._claims_by_node[name]
            for partner_pool in self._node_partner_pools.get(name, ()):
                keys = keys | self._claims_by_partner_pool.get(partner_pool, set())
            allocated = [self._claim_results[k] for k in keys if k in self._claim_results]
            claimed = usage_of(allocated, {name: self._nodes[name]}, self.driver)[name]
            rebuilt = self._canonical(self._kept(name, claimed))
            if self._usage.get(name) != rebuilt:  # an update that changes nothing keeps the object
                self._usage[name] = usage[name] = rebuilt
        self._dirty_usage.clear()
        for name in usage:
            self._note(("usage", ("", name)), self.version)
        if nodes:
            self._nodes_view = dict(self._nodes)
        if usage:
            self._usage_view = dict(self._usage)
        if nodes or usage:
            self._view = None

    def _partner_pools(self, node: str, slices: list[dict[str, Any]]) -> None:
        """Remember which other drivers' pools are on `node`, so their claims count there."""
        pools = {(s["spec"].get("driver", ""), s["spec"]["pool"]["name"]) for s in slices}
        pools = {pool for pool in pools if pool[0] != self.driver}
        for pool in self._node_partner_pools.pop(node, set()) - pools:
            if self._partner_pool_node.get(pool) == node:
                del self._partner_pool_node[pool]
        if pools:
            self._node_partner_pools[node] = pools
            for pool in pools:
                self._partner_pool_node[pool] = node

    def _snapshot(self, kind: str) -> dict[Key, dict[str, Any]]:
        snapshot = self._snapshots.get(kind)
        if snapshot is None:
            snapshot = self._snapshots[kind] = dict(self.objects[kind])
        return snapshot

    def _native_groups(self) -> dict[Key, NativeGroup] | None:
        """Both API versions' PodGroups in one mapping (a cluster serves one); None when neither is
        served, so pods' scheduling groups are ignored rather than waited for. Until the first list
        answers, the API counts as served: a member asked about that early is retried shortly."""
        if all(kind in self._absent for kind in NATIVE_KINDS):
            return None
        if self._native is None:
            self._native = {
                key: NativeGroup.from_api(obj) for kind in NATIVE_KINDS for key, obj in self.objects[kind].items()
            }
        return self._native

    def view(self) -> ClusterView:
        """The view at the current version: the same object until something changes; mappings of
        kinds that did not change are shared with the previous view."""
        with self.lock:
            self._rebuild()
            if self._view is not None and self._view.version == self.version:
                return self._view
            pod_groups = {
                key: int((group.get("spec") or {}).get("minMember") or 0)
                for key, group in self.objects["podgroups"].items()
            }
            version = self.version
            classes = {k[1]: v for k, v in self.objects["deviceclasses"].items()}
            jobsets = {key: JobSetShape.from_api(obj) for key, obj in self.objects["jobsets"].items()}
            native_groups = self._native_groups()
            sources = GangSources(classes, jobsets, pod_groups, native_groups, self.driver)
            claims, templates = self.objects["resourceclaims"], self.objects["resourceclaimtemplates"]
            members = self._members.refresh(claims, templates, sources)
            self._view = ClusterView(
                version=version,
                nodes=self._nodes_view,
                usage=self._usage_view,
                pods=self._snapshot("pods"),
                claims=self._snapshot("resourceclaims"),
                templates=self._snapshot("resourceclaimtemplates"),
                classes=classes,
                jobsets=jobsets,
                pod_group_min=pod_groups,
                native_groups=native_groups,
                members=members,
                affinity_pods=frozenset(self._affinity_pods),
                reservations={r.preemptor: r for r in self._reservations.values()},
                budgets=self._snapshot("poddisruptionbudgets"),
                unjournaled_version=self._unjournaled_version,
                changes=lambda since: self.changes(since, version),
            )
            return self._view
