"""Who belongs to which gang: each gang pod's GangRef and Member, worked out from the pod, its claims
and templates, and the gang sources (DeviceClasses, JobSets, PodGroups of both kinds).

`MemberIndex` keeps them current as watch events arrive, the way a coscheduling plugin keeps its
per-group index: an event works out again only the pods it can change (the pod itself, the pods
whose claims or templates it is, every pod when a gang source changed), so a plan reads members
as they are and never re-validates a memo of them. `work_out` is the one definition of a member;
`gangs_of` groups the members of a view into gangs, with the pods the view does not hold yet.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from extender.cluster.view import ClusterView
from extender.pods.asked import GangSources
from extender.pods.demand import allocated_node, demand_of
from extender.pods.eligibility import PlacedPods
from extender.pods.facts import PodFacts
from extender.pods.gang import gang_of
from extender.pods.keys import Key, pod_key
from extender.pods.model import Entry, Gang, Member

Dependency = tuple[str, Key]  # ("resourceclaims" | "resourceclaimtemplates", (namespace, name))


def sources_of(view: ClusterView, driver: str) -> GangSources:
    return GangSources(view.classes, view.jobsets, view.pod_group_min, view.native_groups, driver)


def node_of(pod: PodFacts, claims: Mapping[Key, dict[str, Any]], driver: str) -> str | None:
    """The node the pod is placed on: bound there, or its claim allocated there."""
    return pod.node or allocated_node(pod, claims, driver)


def dependencies(pod: PodFacts) -> frozenset[Dependency]:
    """The claims and templates a pod's member is worked out from."""
    namespace = pod.key[0]
    read = pod.read_claims()
    claims = [("resourceclaims", (namespace, name)) for name in read.names]
    templates = [("resourceclaimtemplates", (namespace, ref.template)) for ref in read.refs if ref.template]
    return frozenset(claims + templates)


def work_out(
    pod: PodFacts,
    claims: Mapping[Key, dict[str, Any]],
    templates: Mapping[Key, dict[str, Any]],
    sources: GangSources,
) -> Entry:
    """The pod's gang and Member (its inter-pod affinity is worked out per plan: see `gangs_of`)."""
    if pod.phase == "Failed" or pod.terminating:
        return Entry(pod.obj, None, None)
    ref = gang_of(pod.obj, sources.jobsets, sources.pod_group_min, sources.native_groups)
    if ref is None:
        return Entry(pod.obj, None, None)
    read = pod.read_claims()
    member = Member(
        pod=pod.name,
        node=pod.node or allocated_node(pod, claims, sources.driver, read),
        demand=demand_of(pod, claims, templates, sources.classes, sources.driver, include_allocated=True, read=read),
        created=pod.created,
        bound_at=pod.bound_at,
        spec=pod.obj.get("spec") or {},
        done=pod.phase == "Succeeded",
        part=ref.part,
    )
    return Entry(pod.obj, ref, member)


def _same_entry(a: Entry, b: Entry) -> bool:
    """Entries a plan cannot tell apart (Member equality leaves out spec and affinity)."""
    if a.ref != b.ref or a.member != b.member:
        return False
    return a.member is None or b.member is None or a.member.spec == b.member.spec


class MemberIndex:
    """The members of every pod that may join a gang, kept current by `ClusterState` under its lock:
    events mark the pods they can change, and `refresh` (at view time) works out those alone and
    hands out a new mapping only when an entry changed, so an unchanged mapping is the very same
    object and "the members changed" is an identity test. Bounded by the watched pods."""

    def __init__(self) -> None:
        # Gang pods in the order they were first stored (a pod stored again keeps its place).
        self._pods: dict[Key, PodFacts] = {}
        self._entries: dict[Key, Entry] = {}
        self._dirty: set[Key] = set()  # pods to work out again at the next refresh
        self._depends: dict[Key, frozenset[Dependency]] = {}
        self._dependents: dict[Dependency, set[Key]] = defaultdict(set)
        self._sources: GangSources | None = None
        self._published: dict[Key, Entry] = {}
        self._changed = False

    def pod_stored(self, key: Key, pod: PodFacts) -> None:
        self._drop_dependencies(key)
        self._pods[key] = pod
        self._dirty.add(key)
        depends = self._depends[key] = dependencies(pod)
        for dependency in depends:
            self._dependents[dependency].add(key)

    def pod_forgotten(self, key: Key) -> None:
        if self._pods.pop(key, None) is not None:
            self._changed = True
        self._entries.pop(key, None)
        self._dirty.discard(key)
        self._drop_dependencies(key)

    def object_changed(self, kind: str, key: Key) -> None:
        """A claim or template changed: the pods worked out from it are worked out again."""
        self._dirty.update(self._dependents.get((kind, key), ()))

    def _drop_dependencies(self, key: Key) -> None:
        for dependency in self._depends.pop(key, frozenset()):
            dependents = self._dependents.get(dependency)
            if dependents is not None:
                dependents.discard(key)
                if not dependents:
                    del self._dependents[dependency]

    def refresh(
        self, claims: dict[Key, dict[str, Any]], templates: dict[Key, dict[str, Any]], sources: GangSources
    ) -> dict[Key, Entry]:
        """Every gang pod's entry, in the order the pods were first stored; the same mapping as last
        time unless an entry changed."""
        if sources != self._sources:
            self._sources = sources
            self._dirty = set(self._pods)
        for key in self._dirty:
            fresh = work_out(self._pods[key], claims, templates, sources)
            old = self._entries.get(key)
            if old is not None and _same_entry(old, fresh):
                continue
            self._entries[key] = fresh
            self._changed = True
        self._dirty.clear()
        if self._changed:
            self._published = {key: self._entries[key] for key in self._pods}
            self._changed = False
        return self._published


def entries_of(view: ClusterView, sources: GangSources) -> Mapping[Key, Entry]:
    """The view's gang pod entries: as its index kept them, else worked out from every pod."""
    if view.members is not None:
        return view.members
    return {key: work_out(pod, view.claims, view.templates, sources) for key, pod in view.pods.items()}


def placed_pods(view: ClusterView, driver: str) -> PlacedPods:
    """The view's placed pods as kube-scheduler's InterPodAffinity counts them: its pod informer
    leaves out Succeeded and Failed pods, while a pod being deleted still counts until it is gone."""
    placed = []
    for pod in view.pods.values():
        node = node_of(pod, view.claims, driver)
        if node in view.nodes and not pod.finished:
            placed.append((pod.obj, view.nodes[node].labels))
    return PlacedPods(placed)


def gangs_of(
    entries: Mapping[Key, Entry],
    extra: Iterable[Entry],
    placed: PlacedPods | None,
) -> list[Gang]:
    """Every gang with its members, in the order their pods were first seen; `extra` are pods the
    view lacks or holds another body of (asked about before the watch delivered them), each in its
    pod's place. With `placed` (some pod has inter-pod terms), each member's affinity is worked out."""
    extra_by_key = {pod_key(entry.pod): entry for entry in extra}
    if extra_by_key:
        merged = dict(entries)
        merged.update(extra_by_key)
        entries = merged
    gangs: dict[str, Gang] = {}
    for entry in entries.values():
        ref, member = entry.ref, entry.member
        if ref is None or member is None:
            continue
        if placed is not None:
            affinity = placed.of(entry.pod)
            if member.affinity != affinity:
                member = replace(member, affinity=affinity)
        gangs.setdefault(ref.key, Gang(ref)).members.append(member)
    return list(gangs.values())
