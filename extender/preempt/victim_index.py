"""Who holds devices where, as preemption reads it, kept between decisions and brought up to date
from the view's journal: a decision on a busy cluster of 10,000 nodes reads again only the claims and
pods that changed since the last one, not every claim and pod of the cluster.

Per claim: the nodes its devices are on (ours by pool, other drivers' NUMA-placed devices through the
node that publishes them) and the pods it is reserved for. Per pod: its priority, start, whether
Kueue manages it and whether it is going (being deleted or finished). From those: each node's claims,
each pod's nodes and claims, and per node the lower-priority pods there, as the cheapest-first order
of regions reads them (`costs`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import astuple, dataclass, field
from typing import Any

from extender.cluster.view import ClusterView
from extender.devices.node_usage import Node, allocated_results, partner_name
from extender.pods.facts import PodFacts
from extender.pods.keys import Key, key_of, name_of
from extender.pods.kueue import admitted_by_kueue
from extender.preempt.victims import NOTHING, PRIORITY_OFFSET

CostFields = tuple[int, int, int, int, float]  # a `Cost` as a plain tuple: sorts and compares fast
INFINITE: CostFields = (2**62, 2**62, 2**62, 2**62, math.inf)


@dataclass(frozen=True)
class ClaimFacts:
    ours: tuple[tuple[str, str], ...]  # (pool, device) of our driver
    partners: tuple[str, ...]  # other drivers' devices, as `partner_name`
    users: frozenset[str]  # namespace/name of the pods it is reserved for

    @classmethod
    def of(cls, key: Key, claim: dict[str, Any], driver: str) -> ClaimFacts | None:
        results = allocated_results(claim)
        if not results:
            return None
        users = frozenset(
            f"{key[0]}/{c.get('name')}"
            for c in (claim.get("status") or {}).get("reservedFor") or []
            if c.get("resource") == "pods"
        )
        ours = tuple((pool, device) for d, pool, device, _ in results if d == driver)
        partners = tuple(partner_name(d, pool, device) for d, pool, device, _ in results if d != driver)
        return cls(ours, partners, users)


@dataclass(frozen=True)
class Holder:
    """What preemption reads of a pod that may hold devices."""

    name: str
    priority: int
    started: float
    kueue: bool
    gone: bool  # being deleted or finished: its devices count as free

    @classmethod
    def of(cls, pod: PodFacts, admitted: frozenset[tuple[str, str]]) -> Holder:
        """`admitted`: the owners of Kueue's admitted Workloads; a Kueue label alone proves nothing."""
        kueue = pod.managed_by_kueue and admitted_by_kueue(pod.obj, admitted)
        return cls(pod.name, pod.priority, pod.started, kueue, pod.terminating or pod.finished)


@dataclass
class _NodeHolders:
    """The pods holding devices on one node, for the order of regions; per preemptor priority, what
    evicting all of them below it costs and the least any one of them costs."""

    pods: tuple[Holder, ...]
    below: dict[int, tuple[int, int, int, float, CostFields]] = field(default_factory=dict)

    def costs(self, priority: int) -> tuple[int, int, int, float, CostFields]:
        """(highest, priority sum, pods, earliest start among the highest, least single cost)."""
        found = self.below.get(priority)
        if found is None:
            lower = [p for p in self.pods if p.priority < priority and not p.kueue]
            if not lower:
                found = (NOTHING.highest, 0, 0, math.inf, INFINITE)
            else:
                highest = max(p.priority for p in lower)
                found = (
                    highest,
                    sum(p.priority + PRIORITY_OFFSET for p in lower),
                    len(lower),
                    min(p.started for p in lower if p.priority == highest),
                    min((0, p.priority, p.priority + PRIORITY_OFFSET, 1, -p.started) for p in lower),
                )
            self.below[priority] = found
        return found


class VictimIndex:
    """Kept by the deciding replica for its life; `update` brings it to a view."""

    def __init__(self, driver: str) -> None:
        self.driver = driver
        self.version: int | None = None
        self.claims: dict[Key, tuple[ClaimFacts | None, frozenset[str]]] = {}  # facts, nodes
        self.pods: dict[Key, Holder] = {}
        self.node_claims: dict[str, set[Key]] = defaultdict(set)
        self.placed: dict[str, set[str]] = defaultdict(set)  # pod -> nodes where its claims hold devices
        self.pod_claims: dict[str, set[Key]] = defaultdict(set)
        self.gone: set[str] = set()
        self._partnered: set[Key] = set()  # claims with other drivers' devices
        self._nodes: Mapping[str, Node] | None = None
        self._partner_nodes: dict[str, str] = {}
        self._holders: dict[str, _NodeHolders] = {}
        self._admitted: frozenset[tuple[str, str]] = frozenset()

    def update(self, view: ClusterView) -> None:
        changes = view.changes(self.version) if self.version is not None else None
        if view.kueue_admitted is not self._admitted:
            self._admitted = view.kueue_admitted
            changes = None  # who is Kueue's changed: every holder is read again
        if changes is None:
            self._rebuild(view)
        else:
            self._follow_nodes(view)
            for kind, key in changes:
                if kind == "resourceclaims":
                    self._claim(key, view.claims.get(key))
                elif kind == "pods":
                    self._pod(key, view.pods.get(key))
        self.version = view.version

    def _rebuild(self, view: ClusterView) -> None:
        self.claims.clear()
        self.pods.clear()
        self.node_claims.clear()
        self.placed.clear()
        self.pod_claims.clear()
        self.gone.clear()
        self._partnered.clear()
        self._holders.clear()
        self._nodes = None
        self._follow_nodes(view)
        for key, pod in view.pods.items():
            self._pod(key, pod)
        for key, claim in view.claims.items():
            self._claim(key, claim)

    def _follow_nodes(self, view: ClusterView) -> None:
        """Other drivers' devices are found through the nodes that publish them: when the nodes
        change, the claims naming such devices are placed again."""
        if view.nodes is self._nodes:
            return
        self._nodes = view.nodes
        self._partner_nodes = {d.name: node.name for node in view.nodes.values() for d in node.partners}
        for key in list(self._partnered):
            facts, _ = self.claims.get(key, (None, frozenset()))
            self._set_claim(key, facts)

    def _claim(self, key: Key, claim: dict[str, Any] | None) -> None:
        self._set_claim(key, ClaimFacts.of(key, claim, self.driver) if claim is not None else None, claim is None)

    def _set_claim(self, key: Key, facts: ClaimFacts | None, gone: bool = False) -> None:
        old_facts, old_nodes = self.claims.pop(key, (None, frozenset()))
        if old_facts is not None:
            for node in old_nodes:
                self.node_claims[node].discard(key)
                if not self.node_claims[node]:
                    del self.node_claims[node]
                self._holders.pop(node, None)
            for user in old_facts.users:
                self.pod_claims[user].discard(key)
                self._place(user)
        self._partnered.discard(key)
        if gone:
            return
        nodes: frozenset[str] = frozenset()
        if facts is not None:
            found = {pool for pool, _ in facts.ours}
            if facts.partners:
                self._partnered.add(key)
                found.update(n for name in facts.partners if (n := self._partner_nodes.get(name)) is not None)
            nodes = frozenset(found)
        self.claims[key] = (facts, nodes)
        if facts is not None:
            for node in nodes:
                self.node_claims[node].add(key)
                self._holders.pop(node, None)
            for user in facts.users:
                self.pod_claims[user].add(key)
                self._place(user)

    def _place(self, user: str) -> None:
        nodes: set[str] = set()
        for key in self.pod_claims.get(user, ()):
            nodes |= self.claims.get(key, (None, frozenset()))[1]
        if nodes:
            self.placed[user] = nodes
        else:
            self.placed.pop(user, None)
            self.pod_claims.pop(user, None)

    def _pod(self, key: Key, pod: PodFacts | None) -> None:
        name = name_of(key)
        if pod is None:
            self.pods.pop(key, None)
            self.gone.discard(name)
        else:
            facts = self.pods[key] = Holder.of(pod, self._admitted)
            if facts.gone:
                self.gone.add(name)
            else:
                self.gone.discard(name)
        for node in self.placed.get(name, ()):
            self._holders.pop(node, None)

    def held(self, pod: str) -> list[str]:
        """driver/pool/device of what the pod's claims hold."""
        found: list[str] = []
        for key in self.pod_claims.get(pod, ()):
            facts, _ = self.claims[key]
            if facts is not None:
                found.extend(f"{self.driver}/{pool}/{device}" for pool, device in facts.ours)
                found.extend(facts.partners)
        return found

    def holders(self, node: str) -> tuple[Holder, ...]:
        """The pods in the view, not going, whose claims hold devices on the node."""
        known = self._holders.get(node)
        if known is None:
            names = {user for key in self.node_claims.get(node, ()) for user in self.users(key)}
            pods = tuple(
                facts for name in sorted(names) if (facts := self.pods.get(key_of(name))) is not None and not facts.gone
            )
            known = self._holders[node] = _NodeHolders(pods)
        return known.pods

    def users(self, key: Key) -> frozenset[str]:
        """The pods the claim is reserved for."""
        facts, _ = self.claims[key]
        return facts.users if facts is not None else frozenset()

    def region_costs(self, nodes: Sequence[str], priority: int) -> tuple[CostFields, CostFields]:
        """What evicting every pod below `priority` on the nodes would cost, as the fields of a
        `Cost` (gangs not made whole: an order, not a decision; a plain tuple sorts fast), and the
        least any set of them can cost (no set costs less than its cheapest single pod)."""
        if len(nodes) == 1:  # a pod's region: one node, its summary as it is
            self.holders(nodes[0])
            highest, total, pods, earliest, least = self._holders[nodes[0]].costs(priority)
            return ((0, highest, total, pods, -earliest) if pods else astuple(NOTHING)), least
        highest, total, pods, earliest, least = NOTHING.highest, 0, 0, math.inf, INFINITE
        for node in nodes:
            self.holders(node)
            h, t, n, e, low = self._holders[node].costs(priority)
            if h > highest:
                highest, earliest = h, e
            elif h == highest:
                earliest = min(earliest, e)
            total, pods, least = total + t, pods + n, min(least, low)
        if not pods:
            return astuple(NOTHING), INFINITE
        return (0, highest, total, pods, -earliest), least
