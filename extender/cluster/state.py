"""Cluster state fed by list+watch of the objects the extender reads.

Objects are kept as the API sent them (dicts), except ResourceSlices, which are read from their bytes
into tables shared by every node of a model (extender.devices.slices): at 10,000 nodes publishing
the shipped defaults they are 1.2 million devices. Everything is indexed as it arrives: node models
and usage by `DeviceIndex`, each node's admission and requested totals by `NodeRoom`, gang members
by `MemberIndex`, and what changed when by the `Journal`. A restarted extender lists everything again and gets the same
view: nothing needed for correctness lives only in memory.

Views are snapshots shared between calls: a kind's mapping is copied only when that kind changed
since the last view, and node models and usage are published copy-on-write, so an unchanged
mapping is the very same object in the next view. A bounded journal says which objects, node
models and usages changed between two versions, so readers look at those instead of every node.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from extender.cluster.device_index import DeviceIndex
from extender.cluster.journal import Change, Journal
from extender.cluster.membership import MemberIndex
from extender.cluster.node_room import NodeRoom
from extender.cluster.view import ClusterView
from extender.devices.slices import PublishedSlice, SliceError, published_slice
from extender.pods.asked import GangSources
from extender.pods.facts import PodFacts
from extender.pods.gang import JobSetShape, NativeGroup
from extender.pods.keys import Key, object_key
from extender.pods.kueue import admitted_owners, workload_summary
from extender.pods.node_admission import NodeAdmission, Requests
from nativedra.base.gcutil.collector import freeze_survivors

log = logging.getLogger(__name__)
NATIVE_KINDS = ("nativepodgroups", "nativepodgroups-v1alpha2")
JOURNALED = frozenset({"pods", "resourceclaims", "resourceclaimtemplates"})
SLICES = "resourceslices"


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
    OPTIONAL_KINDS = ("podgroups", "jobsets", *NATIVE_KINDS, "poddisruptionbudgets", "preemptions", "workloads")
    KINDS = REQUIRED_KINDS + OPTIONAL_KINDS

    def __init__(self, driver: str, clock: Callable[[], float] = time.time) -> None:
        self.driver = driver
        self.clock = clock  # when holds lapse (`Reservation.expires`, unix seconds)
        self.lock = threading.RLock()
        self.version = 0
        self.objects: dict[str, dict[Key, dict[str, Any]]] = {kind: {} for kind in self.KINDS if kind != SLICES}
        # ResourceSlices are kept as read (extender.devices.slices), never as dicts.
        self.slices: dict[Key, PublishedSlice] = {}
        self._synced: set[str] = set()
        self._absent: set[str] = set()  # optional kinds the API does not serve (or lets us read)
        # The native PodGroups as the planner reads them, kept until one changes.
        self._native: dict[Key, NativeGroup] | None = None
        # The admitted Kueue Workloads' owners, kept until a Workload changes.
        self._admitted: frozenset[tuple[str, str]] | None = None
        self._devices = DeviceIndex(driver)
        self._room = NodeRoom()
        self._journal = Journal()
        # Pods that may be gang members, with their gangs and members kept current, and pods with
        # inter-pod (anti-)affinity: readers look at these, not at every pod.
        self._members = MemberIndex()
        self._affinity_pods: set[Key] = set()
        self._pod_facts: dict[Key, PodFacts] = {}  # every stored pod, worked out once as it arrived
        # What the last view handed out, replaced (never changed) when something changed since.
        self._snapshots: dict[str, dict[Key, Any]] = {}  # pods: their facts
        self._view: ClusterView | None = None
        self._since_freeze = 0  # watch events applied since the objects were last frozen
        self._replacing = False  # a LIST is being stored: the journal restarts at its end

    # Watch events between two freezes of the objects held (see `apply`).
    REFREEZE_EVENTS = 100

    def changes(self, since: int, upto: int) -> set[Change] | None:
        """What changed after version `since` up to `upto` (journaled kinds, node models, usage),
        or None when the journal no longer reaches back that far."""
        with self.lock:
            return self._journal.changes(since, upto)

    def listed(self, *kinds: str) -> bool:
        """Whether every one of `kinds` has been listed."""
        with self.lock:
            return all(kind in self._synced for kind in kinds)

    def settled(self, *kinds: str) -> bool:
        """Whether every one of `kinds` has been listed or found not served."""
        with self.lock:
            return all(kind in self._synced or kind in self._absent for kind in kinds)

    def missing(self) -> list[str]:
        """Required kinds not listed yet, for /readyz to name."""
        with self.lock:
            return sorted(set(self.REQUIRED_KINDS) - self._synced)

    # -- updates -------------------------------------------------------------------------------

    def replace(self, kind: str, items: list[dict[str, Any]]) -> None:
        if kind == SLICES:
            self.replace_slices([kept for item in items if (kept := _read_slice(item)) is not None])
            return
        with self._relisting(kind):
            self._absent.discard(kind)
            if kind in NATIVE_KINDS:
                self._native = None
            for key in list(self.objects[kind]):
                self._forget(kind, key)
            if kind == "pods":
                self._room.pods_relisted()
            for item in items:
                self._store(kind, item)
                if kind == "pods":
                    self._room.account(object_key(item), item)

    def replace_slices(self, items: list[PublishedSlice]) -> None:
        with self._relisting(SLICES):
            for key in list(self.slices):
                self._forget_slice(key)
            for item in items:
                self._store_slice(item)

    @contextlib.contextmanager
    def _relisting(self, kind: str) -> Iterator[None]:
        """Around a whole kind replaced: its objects are not journaled one by one, and once it is
        in, the kind is listed and the journal restarts (readers look at everything)."""
        with self.lock:
            self._replacing = True
            try:
                yield
            finally:
                self._replacing = False
            self._synced.add(kind)
            self.version += 1
            self._journal.restart(self.version)

    def apply_slice(self, event: str, key: Key, published: PublishedSlice | None) -> None:
        """A watch event of slice `key`: `published` is the slice read, None when it could not be
        read (its devices are forgotten rather than planned with as they were)."""
        with self.lock:
            if event == "DELETED" or published is None:
                self._forget_slice(key)
            else:
                self._store_slice(published)
            self._event_applied()

    def _store_slice(self, published: PublishedSlice) -> None:
        old = self.slices.get(published.key)
        self.slices[published.key] = published
        self._changed(SLICES, published.key)
        if old is not None:
            self._devices.slice_touched(old.key, old, stored=False)
        self._devices.slice_touched(published.key, published, stored=True)

    def _forget_slice(self, key: Key) -> None:
        old = self.slices.pop(key, None)
        if old is not None:
            self._changed(SLICES, key)
            self._devices.slice_touched(key, old, stored=False)

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
        if kind == SLICES:
            self.apply_slice(event, object_key(obj), None if event == "DELETED" else _read_slice(obj))
            return
        with self.lock:
            if event == "DELETED":
                self._forget(kind, object_key(obj))
            else:
                self._store(kind, obj)
            if kind == "pods":
                self._room.account(object_key(obj), None if event == "DELETED" else obj)
            self._event_applied()

    def _event_applied(self) -> None:
        self.version += 1
        self._since_freeze += 1
        if self._since_freeze >= self.REFREEZE_EVENTS and not self.missing():
            # Objects from watch events live until replaced, like the listed ones: a full
            # collection walking all of them stalled a call for up to 280 ms at 5,000 nodes.
            # Only what arrived since the last freeze is collected, then frozen (nativedra.base.gcutil.collector).
            freeze_survivors()
            self._since_freeze = 0

    def node_room(self) -> tuple[dict[str, NodeAdmission], dict[str, Requests]]:
        """Each node's admission facts and what the pods bound there ask, all pods counted."""
        with self.lock:
            return self._room.copies()

    def _forget(self, kind: str, key: Key) -> None:
        old = self.objects[kind].pop(key, None)
        if old is not None:
            self._changed(kind, key)
            self._touch(kind, key, old)

    def _changed(self, kind: str, key: Key) -> None:
        self._snapshots.pop(kind, None)
        if kind in NATIVE_KINDS:
            self._native = None
        if kind == "workloads":
            self._admitted = None
        self._view = None
        if kind in ("resourceclaims", "resourceclaimtemplates"):
            self._members.object_changed(kind, key)
        if self._replacing:
            return  # the journal restarts once the whole kind is in
        if kind in JOURNALED:
            self._journal.note((kind, key), self.version + 1)
        else:
            self._journal.unjournaled()

    def _store(self, kind: str, obj: dict[str, Any]) -> None:
        key = object_key(obj)
        if kind == "pods":
            facts = PodFacts.of(obj)
            if not facts.relevant:  # no claims, no extended resources, no gang: it cannot matter
                self._forget(kind, key)
                return
            self._pod_facts[key] = facts
        if kind == "workloads":
            obj = workload_summary(obj)
        old = self.objects[kind].get(key)
        self.objects[kind][key] = obj
        self._changed(kind, key)
        if old is not None:
            self._touch(kind, key, old)
        self._touch(kind, key, obj, stored=True)

    def _touch(self, kind: str, key: Key, obj: dict[str, Any], stored: bool = False) -> None:
        """Index `obj` as it arrives (stored) or leaves (deleted, or replaced: its successor is
        touched next)."""
        if kind == "nodes":
            self._devices.node_touched(key[1])
            if stored:
                self._room.node_stored(key[1], obj)
            elif key not in self.objects["nodes"]:
                self._room.node_gone(key[1])
        elif kind == "pods":
            if not stored and key in self.objects["pods"]:
                return  # replaced: the new object's touch follows, and the pod keeps its place
            facts = self._pod_facts[key] if stored else self._pod_facts.pop(key, None)
            if facts is not None and stored and facts.may_join_gang:
                self._members.pod_stored(key, facts)
            else:
                self._members.pod_forgotten(key)
            if facts is not None and stored and facts.has_pod_affinity:
                self._affinity_pods.add(key)
            else:
                self._affinity_pods.discard(key)
        elif kind == "preemptions":
            self._devices.lease_touched(key, obj, stored)
        elif kind == "resourceclaims":
            self._devices.claim_touched(key, obj, stored)

    # -- reading -------------------------------------------------------------------------------

    def _snapshot(self, kind: str) -> dict[Key, dict[str, Any]]:
        snapshot = self._snapshots.get(kind)
        if snapshot is None:
            snapshot = self._snapshots[kind] = dict(self.objects[kind])
        return snapshot

    def _pods_snapshot(self) -> dict[Key, PodFacts]:
        snapshot = self._snapshots.get("pods")
        if snapshot is None:
            snapshot = self._snapshots["pods"] = dict(self._pod_facts)
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

    def _kueue_admitted(self) -> frozenset[tuple[str, str]]:
        if self._admitted is None:
            self._admitted = admitted_owners(self.objects["workloads"].values())
        return self._admitted

    def view(self) -> ClusterView:
        """The view at the current version: the same object until something changes; mappings of
        kinds that did not change are shared with the previous view."""
        with self.lock:
            if self._devices.lapse(self.clock()):  # as an event would: a new version, usage rebuilt
                self._journal.unjournaled()
                self._view = None
                self.version += 1
            if self._devices.rebuild(self.objects["nodes"], self._journal, self.version):
                self._view = None
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
            kept = self._devices.current()
            self._view = ClusterView(
                version=version,
                nodes=self._devices.nodes_view,
                usage=self._devices.usage_view,
                pods=self._pods_snapshot(),
                claims=self._snapshot("resourceclaims"),
                templates=self._snapshot("resourceclaimtemplates"),
                classes=classes,
                jobsets=jobsets,
                pod_group_min=pod_groups,
                native_groups=native_groups,
                members=members,
                affinity_pods=frozenset(self._affinity_pods),
                reservations={r.preemptor: r for r in kept if not r.returning},
                returns={r.preemptor: r for r in kept if r.returning},
                budgets=self._snapshot("poddisruptionbudgets"),
                kueue_admitted=self._kueue_admitted(),
                unjournaled_version=self._journal.unjournaled_version,
                changes=lambda since: self.changes(since, version),
            )
            return self._view


def _read_slice(obj: dict[str, Any]) -> PublishedSlice | None:
    """A slice handed over as a dict; None (said in the log) when it cannot be read: the others stand."""
    try:
        return published_slice(obj)
    except SliceError as error:
        log.error("ignoring a ResourceSlice: %s", error)
        return None
