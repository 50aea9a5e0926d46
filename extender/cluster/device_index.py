"""Node models and usage, kept from the slices, claims and preemption holds the watches deliver and
rebuilt lazily, per node, when a slice, node, claim or hold of that node changed. The published
mappings are replaced by updated copies (a view holds the old ones), and each change is journaled.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import weakref
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from extender.cluster.journal import Journal
from extender.cluster.reservation import Reservation, ReservationError, from_lease
from extender.devices.node_usage import Allocated, Node, Usage, allocated_results, usage_of
from extender.devices.slices import PublishedSlice, nodes_from
from extender.pods.keys import Key
from nativedra.base.gcutil.collector import built_in_bulk

log = logging.getLogger(__name__)
Pool = tuple[str, str]  # (driver, pool name)


class PartnerPools:
    """Other drivers' pools of NUMA-placed devices (extender.devices.node_usage `Node.partners`):
    their claims, and the node each pool is on, so their claims count there."""

    def __init__(self, driver: str) -> None:
        self.driver = driver
        self._claims: dict[Pool, set[Key]] = defaultdict(set)
        self._node_of: dict[Pool, str] = {}
        self._pools_of: dict[str, set[Pool]] = {}

    def claim(self, pool: Pool, key: Key, stored: bool) -> str | None:
        """Count or forget claim `key` on `pool`; the pool's node, if known."""
        if stored:
            self._claims[pool].add(key)
        else:
            self._claims[pool].discard(key)
            if not self._claims[pool]:
                del self._claims[pool]
        return self._node_of.get(pool)

    def claims_on(self, node: str) -> set[Key]:
        found: set[Key] = set()
        for pool in self._pools_of.get(node, ()):
            found |= self._claims.get(pool, set())
        return found

    def place(self, node: str, slices: list[PublishedSlice]) -> None:
        """Remember which other drivers' pools `node`'s slices publish."""
        pools = {(s.driver, s.pool) for s in slices}
        pools = {pool for pool in pools if pool[0] != self.driver}
        for pool in self._pools_of.pop(node, set()) - pools:
            if self._node_of.get(pool) == node:
                del self._node_of[pool]
        if pools:
            self._pools_of[node] = pools
            for pool in pools:
                self._node_of[pool] = node


class DeviceIndex:
    # Node models rebuilt at once past which the collector is paused (see nativedra.base.gcutil.collector).
    BULK_NODES = 256

    def __init__(self, driver: str) -> None:
        self.driver = driver
        self._nodes: dict[str, Node] = {}
        self._usage: dict[str, Usage] = {}
        self._slices_by_node: dict[str, dict[Key, PublishedSlice]] = defaultdict(dict)
        self._claims_by_node: dict[str, set[Key]] = defaultdict(set)
        self._claim_results: dict[Key, tuple[Allocated, ...]] = {}  # allocated claims' `allocated_results`
        self._partners = PartnerPools(driver)
        self._dirty_nodes: set[str] = set()
        self._dirty_usage: set[str] = set()
        # Devices kept for preemptors (extender.cluster.reservation), by Lease; added to their nodes' usage.
        self.reservations: dict[Key, Reservation] = {}
        # Holds past their `expires` (by Lease), and the first moment another one lapses.
        self._lapsed: set[Key] = set()
        self._next_lapse = -math.inf
        # One usage object per value, while some node has it (see `_canonical`).
        self._usages: weakref.WeakValueDictionary[tuple[Any, ...], Usage] = weakref.WeakValueDictionary()
        # What the last view handed out, replaced (never changed) when something changed since.
        self.nodes_view: dict[str, Node] = {}
        self.usage_view: dict[str, Usage] = {}

    # -- what the watches deliver (an object leaving, deleted or replaced, is touched with stored=False)

    def node_touched(self, name: str) -> None:
        self._dirty_nodes.add(name)

    def slice_touched(self, key: Key, published: PublishedSlice, stored: bool) -> None:
        if stored:
            self._slices_by_node[published.node][key] = published
        else:
            self._slices_by_node[published.node].pop(key, None)
        self._dirty_nodes.add(published.node)

    def claim_touched(self, key: Key, obj: dict[str, Any], stored: bool) -> None:
        # An object leaving takes along what was read of it when it arrived.
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
            node = self._partners.claim(partner_pool, key, stored)
            if node is not None:
                self._dirty_usage.add(node)

    def lease_touched(self, key: Key, lease: dict[str, Any], stored: bool) -> None:
        self._lapsed.discard(key)
        self._next_lapse = -math.inf  # worked out again at the next `lapse`
        old = self.reservations.pop(key, None)
        if old is not None:
            self._dirty_usage.update(old.nodes)
        if not stored:
            return
        try:
            reservation = from_lease(lease)
        except ReservationError as error:
            log.error("ignoring a Lease of kept devices: %s", error)
            return
        self.reservations[key] = reservation
        self._dirty_usage.update(reservation.nodes)

    def lapse(self, now: float) -> bool:
        """Let the holds whose `expires` has passed go from usage, on every replica (the leader
        deletes their Leases when it can); True when one did. Cheap when none is due."""
        if now < self._next_lapse:
            return False
        due = [
            key
            for key, kept in self.reservations.items()
            if key not in self._lapsed and kept.holds and kept.expires <= now
        ]
        for key in due:
            self._lapsed.add(key)
            self._dirty_usage.update(self.reservations[key].nodes)
        self._next_lapse = min(
            (kept.expires for key, kept in self.reservations.items() if key not in self._lapsed and kept.holds),
            default=math.inf,
        )
        return bool(due)

    def current(self) -> list[Reservation]:
        """The reservations as decisions read them: a lapsed one says so, and holds nothing."""
        return [
            dataclasses.replace(kept, lapsed=True) if key in self._lapsed else kept
            for key, kept in self.reservations.items()
        ]

    # -- rebuilding ----------------------------------------------------------------------------------

    def rebuild(self, node_objects: Mapping[Key, dict[str, Any]], journal: Journal, version: int) -> bool:
        """Node models and usage of the nodes touched since the last call; True when a published
        mapping was replaced."""
        if not self._dirty_nodes and not self._dirty_usage:
            return False
        if len(self._dirty_nodes) + len(self._dirty_usage) > self.BULK_NODES:
            with built_in_bulk():
                return self._rebuild_dirty(node_objects, journal, version)
        return self._rebuild_dirty(node_objects, journal, version)

    def _rebuild_dirty(self, node_objects: Mapping[Key, dict[str, Any]], journal: Journal, version: int) -> bool:
        nodes: dict[str, Node | None] = {}
        usage: dict[str, Usage | None] = {}
        for name in self._dirty_nodes:
            node_object = node_objects.get(("", name))
            if node_object is None:
                if name in self._nodes:
                    nodes[name] = usage[name] = None
                continue
            slices = list(self._slices_by_node[name].values())
            nodes.update(nodes_from([node_object], slices, self.driver))
            self._partners.place(name, slices)
            self._dirty_usage.add(name)
        self._dirty_nodes.clear()
        for name, node in nodes.items():
            if node is None:
                self._nodes.pop(name, None)
                self._usage.pop(name, None)
                self._partners.place(name, [])
            else:
                self._nodes[name] = node
            journal.note(("node", ("", name)), version)
        for name in self._dirty_usage:
            if name not in self._nodes:
                if self._usage.pop(name, None) is not None:
                    usage[name] = None
                continue
            keys = self._claims_by_node[name] | self._partners.claims_on(name)
            allocated = [self._claim_results[k] for k in keys if k in self._claim_results]
            claimed = usage_of(allocated, {name: self._nodes[name]}, self.driver)[name]
            rebuilt = self._canonical(self._kept(name, claimed))
            if self._usage.get(name) != rebuilt:  # an update that changes nothing keeps the object
                self._usage[name] = usage[name] = rebuilt
        self._dirty_usage.clear()
        for name in usage:
            journal.note(("usage", ("", name)), version)
        if nodes:
            self.nodes_view = dict(self._nodes)
        if usage:
            self.usage_view = dict(self._usage)
        return bool(nodes or usage)

    def _canonical(self, usage: Usage) -> Usage:
        """The one object of this value: nodes used alike share it, so a score or fit worked out
        for one serves them all, and thousands of full nodes hold one usage, not thousands."""
        key = usage.fingerprint()
        found = self._usages.get(key)
        if found is None:
            self._usages[key] = found = usage
        return found

    def _kept(self, node: str, usage: Usage) -> Usage:
        """`usage` with the devices kept on `node` for preemptors and returning gangs."""
        for key, reservation in self.reservations.items():
            reserved = reservation.nodes.get(node) if reservation.holds and key not in self._lapsed else None
            if reserved is not None:
                usage = usage.plus(reserved.usage)
        return usage
