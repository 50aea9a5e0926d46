"""Does a pod's demand fit on a node, given what is in use? Greedy first-fit like the allocator."""

from __future__ import annotations

import threading
from collections import defaultdict
from decimal import Decimal

from extender.cel_eval import Selectors
from extender.demand import Demand, Request
from extender.model import Node, NodeDevice, Usage, take


class Matcher:
    """Devices of a node that match a selector tuple, computed once per node version."""

    def __init__(self, selectors: Selectors, driver: str) -> None:
        self.selectors = selectors
        self.driver = driver
        self._cache: dict[tuple[str, tuple[str, ...]], tuple[Node, list[NodeDevice]]] = {}
        self._lock = threading.Lock()

    def matching(self, node: Node, expressions: tuple[str, ...]) -> list[NodeDevice]:
        key = (node.name, expressions)
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None and cached[0] is node:
            return cached[1]
        found = [
            d for d in node.devices.values() if not d.tainted and self.selectors.all_match(list(expressions), d.view)
        ]
        with self._lock:
            self._cache[key] = (node, found)
        return found


def _counters_allow(node: Node, usage: Usage, device: NodeDevice) -> bool:
    for counter_set, counters in device.consumes:
        total = node.counters.get(counter_set, {})
        used = usage.counters.get(counter_set, {})
        for name, amount in counters:
            if used.get(name, Decimal(0)) + amount > total.get(name, Decimal(0)):
                return False
    return True


def available(node: Node, usage: Usage, device: NodeDevice, request: Request) -> bool:
    if device.multi:
        used = usage.shared.get(device.name, {})
        for name, amount in request.capacity:
            limit = device.capacity(name)
            if limit is None or used.get(name, Decimal(0)) + amount > limit:
                return False
    elif device.name in usage.devices:
        return False
    return _counters_allow(node, usage, device)


def _attribute_key(attribute: str, driver: str) -> str:
    domain, _, name = attribute.rpartition("/")
    return name if domain == driver else attribute


def _pick(
    node: Node, usage: Usage, request: Request, candidates: list[NodeDevice], driver: str
) -> list[NodeDevice] | None:
    groups: list[list[NodeDevice]] = [candidates]
    if request.match_attribute:
        key = _attribute_key(request.match_attribute, driver)
        by_value: dict[object, list[NodeDevice]] = defaultdict(list)
        for device in candidates:
            by_value[str(device.attribute(key))].append(device)
        groups = sorted(by_value.values(), key=len)  # the tightest group that fits keeps bigger ones whole
    for group in groups:
        working = usage.copy()
        picked: list[NodeDevice] = []
        for device in group:
            if available(node, working, device, request):
                take(working, device, dict(request.capacity))
                picked.append(device)
                if not request.all_devices and len(picked) == request.count:
                    return picked
        if request.all_devices and picked and len(picked) == len(group):
            return picked
    return None


def place(node: Node, usage: Usage, demand: Demand, matcher: Matcher) -> Usage | None:
    """Usage after placing one pod with `demand` on `node`, or None if it does not fit."""
    working = usage.copy()
    for request in demand.requests:
        picked = _pick(node, working, request, matcher.matching(node, request.selectors), matcher.driver)
        if picked is None:
            return None
        for device in picked:
            take(working, device, dict(request.capacity))
    return working


def members_fit(node: Node, usage: Usage, demand: Demand, limit: int, matcher: Matcher) -> tuple[int, Usage]:
    """How many pods of `demand` fit on `node` (at most `limit`), and the usage after placing them."""
    count = 0
    working = usage
    while count < limit:
        after = place(node, working, demand, matcher)
        if after is None:
            break
        working = after
        count += 1
    return count, working


def free_matching(node: Node, usage: Usage, request: Request, matcher: Matcher) -> list[NodeDevice]:
    return [d for d in matcher.matching(node, request.selectors) if available(node, usage, d, request)]
