"""Does a pod's demand fit on a node, given what is in use? Greedy first-fit like the allocator."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from decimal import Decimal

from extender.devices.cel_eval import Selectors
from extender.devices.lru import GenerationalCache, Numbering
from extender.devices.node_usage import IDENTITY_ATTRIBUTES, Node, NodeDevice, Usage, take
from extender.devices.taints import Selection, all_tolerated
from extender.pods.demand import Demand, Partner, Request
from nativedra.base.kube.names import STANDARD_NUMA_ATTRIBUTE

FitKey = tuple[str | int, int, Demand, int]  # (node name or model, id of the usage, demand, limit)
# Shapes of matching devices, numbered once for every Matcher (nodes keep their numbers, see
# `Matcher.matching_shape`): equal numbers, equal shapes.
MAX_SHAPES = 65_536  # distinct shapes numbered at once
_SHAPES: Numbering[tuple[object, ...]] = Numbering(MAX_SHAPES)
MAX_SHAPES_PER_NODE = 64  # selector tuples whose shape a node keeps
PARTNERS = "\0partners"  # keys partner matches apart from ours in the Matcher's cache (no CEL text starts so)


class Matcher:
    """Devices of a node that match a selector tuple, computed once per node version; and how many
    pods of a demand fit on a node (`members_fit`), once per node and usage object. Both caches are
    keyed by what pods ask for, so both are bounded (extender.devices.lru.GenerationalCache: what was written
    or read lately stays): a stream of distinct selectors or demands costs recomputation, never
    memory. `fit_cache_size` is raised by the caller to what one plan of the cluster touches (nodes x
    gangs), so a re-plan finds every node it did not change; `fit_cache_size` bounds it all the same."""

    CACHE_SIZE = 65_536
    # The floor; the Decider sizes it to what one plan touches (nodes x gangs). Entries keep old
    # usage objects alive, so a floor far above a small cluster's needs only holds garbage.
    FIT_CACHE_SIZE = 1_024

    def __init__(
        self, selectors: Selectors, driver: str, cache_size: int = CACHE_SIZE, fit_cache_size: int = FIT_CACHE_SIZE
    ) -> None:
        self.selectors = selectors
        self.driver = driver
        self._cache: GenerationalCache[tuple[str, Selection], tuple[Node, list[NodeDevice], int]] = GenerationalCache(
            cache_size
        )

        # (node name, id of the usage object, demand, limit) -> (node, usage, count, usage after): the
        # entry keeps the usage object alive, so its id cannot be reused while the entry is there.
        self.fits: GenerationalCache[FitKey, tuple[Node | None, Usage, int, Usage]] = GenerationalCache(fit_cache_size)
        # (node model, selection) -> (names of the matching devices, their shape number): a new pod
        # shape's selectors run CEL on one node of each model, not on every device of every node.
        self._by_model: GenerationalCache[tuple[int, Selection], tuple[tuple[str, ...], int]] = GenerationalCache(
            cache_size
        )
        self._reads_no_identity: GenerationalCache[tuple[str, ...], bool] = GenerationalCache(cache_size)
        self._alike_by_model: GenerationalCache[Demand, bool] = GenerationalCache(cache_size)
        self._identity = frozenset(
            (domain, name) if domain else (driver, name)
            for domain, _, name in (attribute.rpartition("/") for attribute in IDENTITY_ATTRIBUTES)
        )

    def matching(self, node: Node, selection: Selection) -> list[NodeDevice]:
        return self._matching(node, selection)[1]

    def partners_matching(self, node: Node, expressions: tuple[str, ...]) -> list[NodeDevice]:
        """Other drivers' NUMA-placed devices on `node` that a partner request's selectors match."""
        key = (node.name, ((PARTNERS, *expressions), ()))
        cached = self._cache.get(key)
        if cached is not None and cached[0] is node:
            return cached[1]
        found = [d for d in node.partners if self.selectors.all_match(list(expressions), d.view)]
        self._cache.put(key, (node, found, -1))
        return found

    def matching_shape(self, node: Node, selection: Selection) -> int:
        """A number for what placing and scoring read of `matching`'s devices (names, NUMA node,
        type, sharing, capacities, the counters they draw on and those counters' totals): nodes
        with equal numbers and equal usage fit and score a pod of these selectors alike. Kept on
        the node object too (a new one comes with any change to its devices): asked for every
        node on every prioritize, a dictionary read there is what makes a new pod shape cheap."""
        shape = node.shapes.get(selection)
        if shape is None:
            alike = self._alike(node, selection)
            shape = alike[1] if alike is not None else self._matching(node, selection)[2]
            if len(node.shapes) >= MAX_SHAPES_PER_NODE:
                node.shapes.clear()
            node.shapes[selection] = shape
        return shape

    def _matching(self, node: Node, selection: Selection) -> tuple[Node, list[NodeDevice], int]:
        key = (node.name, selection)
        cached = self._cache.get(key)
        if cached is not None and cached[0] is node:
            return cached
        expressions, tolerations = selection
        shareable = self.shareable(expressions)
        alike = self._alike(node, selection) if shareable else None
        if alike is not None:
            entry = (node, [node.devices[name] for name in alike[0]], alike[1])
        else:
            # Selectors that read no identity see the device as its model publishes it (one view,
            # made once); the others see this node's identities too. A tainted device only for a
            # request that tolerates each of its NoSchedule and NoExecute taints, as the allocator.
            view_of = (lambda d: d.view) if shareable else node.view_of
            found = [
                d
                for d in node.devices.values()
                if (not d.tainted or all_tolerated(d.raw.get("taints") or (), tolerations))
                and self.selectors.all_match(list(expressions), view_of(d))
            ]
            entry = (node, found, self._shape_id(node, found))
            if shareable:
                self._by_model.put((node.model, selection), (tuple(d.name for d in found), entry[2]))
        self._cache.put(key, entry)
        return entry

    def _alike(self, node: Node, selection: Selection) -> tuple[tuple[str, ...], int] | None:
        """What the selectors matched on another node of `node`'s model (device names, shape number),
        when they read no device identity and such a node was matched."""
        return self._by_model.get((node.model, selection)) if self.shareable(selection[0]) else None

    def shareable(self, expressions: tuple[str, ...]) -> bool:
        """Whether the selectors read no device identity, so one node's matches serve its model's."""
        known = self._reads_no_identity.get(expressions)
        if known is None:
            known = self.selectors.reads_none_of(expressions, self._identity)
            self._reads_no_identity.put(expressions, known)
        return known

    def demand_key(self, node: Node, demand: Demand) -> object:
        """What a node's score reads of the devices its requests match (their shape), and the
        values of any attribute a request asks to be equal: nodes with equal keys score alike for
        equal usage. Scores that read other drivers' devices (partners) are the node's own."""
        if demand.partners:
            return node.name
        requests = demand.requests
        if len(requests) == 1 and not requests[0].match_attribute:  # most pods: one number
            return self.matching_shape(node, requests[0].selection)
        key: list[object] = []
        for request in requests:
            key.append(self.matching_shape(node, request.selection))
            if request.match_attribute:
                devices = self.matching(node, request.selection)
                key.append(tuple(device_attribute(node, d, request.match_attribute, self.driver) for d in devices))
        return tuple(key)

    def alike_by_model(self, demand: Demand) -> bool:
        """Whether every node of one model answers `demand` alike, for equal usage: it has no
        partner, asks no attribute value to be equal, and no selector reads device identity."""
        known = self._alike_by_model.get(demand)
        if known is None:
            known = not demand.partners and all(
                not request.match_attribute and self.shareable(request.selectors) for request in demand.requests
            )
            self._alike_by_model.put(demand, known)
        return known

    def _shape_id(self, node: Node, found: list[NodeDevice]) -> int:
        shape = tuple(
            (
                d.name,
                d.attribute("numaNode"),
                d.attribute("type"),
                d.multi,
                d.consumes,
                d.groups,
                tuple((s, tuple(sorted(node.counters.get(s, {}).items()))) for s, _ in d.consumes),
                tuple(sorted((n, str(c.get("value"))) for n, c in (d.raw.get("capacity") or {}).items()))
                if d.multi
                else (),
            )
            for d in found
        )
        return _SHAPES.number(shape)

    def __len__(self) -> int:
        return len(self._cache)


def _counters_allow(node: Node, usage: Usage, device: NodeDevice) -> bool:
    for counter_set, groups in device.groups:
        shared = usage.groups.get(counter_set)
        if shared is not None and not shared & groups:
            return False  # the set's devices in use are of another group (a GPU's mode is taken)
    for counter_set, counters in device.consumes:
        total = node.counters.get(counter_set, {})
        used = usage.counters.get(counter_set, {})
        for name, amount in counters:
            if used.get(name, Decimal(0)) + amount > total.get(name, Decimal(0)):
                return False
    return True


def consumed(node: Node, usage: Usage, device: NodeDevice, request: Request) -> dict[str, Decimal] | None:
    """What serving `request` takes of `device` (shared capacity by its request policy; a whole
    device takes nothing measurable), or None if the device is not free enough for it."""
    if device.multi:
        taken = device.consumption(dict(request.capacity))
        if taken is None:
            return None
        used = usage.shared.get(device.name, {})
        if any(used.get(name, Decimal(0)) + amount > (device.capacity(name) or 0) for name, amount in taken.items()):
            return None
    elif device.name in usage.devices:
        return None
    else:
        taken = {}
    return taken if _counters_allow(node, usage, device) else None


def available(node: Node, usage: Usage, device: NodeDevice, request: Request) -> bool:
    return consumed(node, usage, device, request) is not None


def _attribute_key(attribute: str, driver: str) -> str:
    domain, _, name = attribute.rpartition("/")
    return name if domain == driver else attribute


def device_attribute(node: Node, device: NodeDevice, attribute: str, driver: str) -> str:
    """A request's matchAttribute value on `device` of `node`, as allocation groups devices by it."""
    return str(node.attribute_of(device, _attribute_key(attribute, driver)))


def _pick(
    node: Node,
    usage: Usage,
    request: Request,
    candidates: list[NodeDevice],
    driver: str,
    *,
    beside: Callable[[object], frozenset[str] | None] | None = None,
) -> tuple[list[tuple[NodeDevice, dict[str, Decimal]]], frozenset[str]] | None:
    """The devices that serve `request`, each with what it takes of them, and the partner devices
    `beside` picks for their group's attribute value (None: no partners fit beside that group)."""
    groups: list[list[NodeDevice]] = [candidates]
    if request.match_attribute:
        by_value: dict[object, list[NodeDevice]] = defaultdict(list)
        for device in candidates:
            by_value[device_attribute(node, device, request.match_attribute, driver)].append(device)
        groups = sorted(by_value.values(), key=len)  # the tightest group that fits keeps bigger ones whole
    for group in groups:
        partners: frozenset[str] | None = frozenset()
        if beside is not None and group:
            partners = beside(device_attribute(node, group[0], STANDARD_NUMA_ATTRIBUTE, driver))
        if partners is None:
            continue
        working = usage.copy()
        picked: list[tuple[NodeDevice, dict[str, Decimal]]] = []
        for device in group:
            taken = consumed(node, working, device, request)
            if taken is not None:
                take(working, device, taken)
                picked.append((device, taken))
                if not request.all_devices and len(picked) == request.count:
                    return picked, partners
        if request.all_devices and picked and len(picked) == len(group):
            return picked, partners
    return None


def free_partners(node: Node, usage: Usage, partner: Partner, matcher: Matcher) -> list[NodeDevice]:
    return [d for d in matcher.partners_matching(node, partner.selectors) if d.multi or d.name not in usage.partners]


def _partners_beside(
    node: Node, usage: Usage, partners: tuple[Partner, ...], matcher: Matcher
) -> Callable[[object], frozenset[str] | None]:
    """For a NUMA node (the standard attribute's value): the partner devices that serve each
    aligned partner request there, or None if some request finds too few."""

    def beside(numa: object) -> frozenset[str] | None:
        chosen: set[str] = set()
        for partner in partners:
            free = [
                d.name
                for d in free_partners(node, usage, partner, matcher)
                if str(d.attribute(STANDARD_NUMA_ATTRIBUTE)) == numa and d.name not in chosen
            ]
            if len(free) < partner.count:
                return None
            chosen.update(free[: partner.count])
        return frozenset(chosen)

    return beside


def place(node: Node, usage: Usage, demand: Demand, matcher: Matcher) -> Usage | None:
    """Usage after placing one pod with `demand` on `node`, or None if it does not fit. A request's
    partners (tied to it on the standard NUMA attribute) must fit on the NUMA node of the devices
    picked for it, and take their partner devices."""
    working = usage.copy()
    for request in demand.requests:
        beside = _partners_beside(node, working, request.partners, matcher) if request.partners else None
        found = _pick(node, working, request, matcher.matching(node, request.selection), matcher.driver, beside=beside)
        if found is None:
            return None
        picked, partners = found
        for device, taken in picked:
            take(working, device, taken)
        if partners:
            working.partners = working.partners | partners
    return working


def members_fit(node: Node, usage: Usage, demand: Demand, limit: int, matcher: Matcher) -> tuple[int, Usage]:
    """How many pods of `demand` fit on `node` (at most `limit`), and the usage after placing them.

    Never more rounds than the node's devices can hold allocations: each pod placed takes at
    least one. A pod that takes nothing measurable (a shared device without capacities) fits as
    often as asked, so it is not counted out one by one.

    Remembered per (node object, usage object, demand, limit) in `matcher.fits`: the same inputs
    give the same answer and the same usage object back, so the usage a plan holds on a node is the
    same object in the next plan too, and later gangs find their fits there as well. Usage objects
    are never changed in place (`place` works on copies), and the state gives nodes used alike one
    usage object: where nodes of one model answer the demand alike, one entry serves every node of
    that model with that usage (a first plan of 10,000 nodes counted each node's room on its own)."""
    alike = matcher.alike_by_model(demand)
    key = (node.model if alike else node.name, id(usage), demand, limit)
    cached = matcher.fits.get(key)
    if cached is not None and (alike or cached[0] is node) and cached[1] is usage:
        return cached[2], cached[3]
    count, after = count_members(node, usage, demand, limit, matcher)
    matcher.fits.put(key, (None if alike else node, usage, count, after))
    return count, after


def count_members(node: Node, usage: Usage, demand: Demand, limit: int, matcher: Matcher) -> tuple[int, Usage]:
    """`members_fit` without its cache: for usages made once and dropped (preemption's trials)."""
    if node.allocations is not None:
        limit = min(limit, node.allocations)
    count = 0
    working = usage
    while count < limit:
        after = place(node, working, demand, matcher)
        if after is None:
            break
        if after == working:
            return limit, working
        working = after
        count += 1
    return count, working


def free_matching(node: Node, usage: Usage, request: Request, matcher: Matcher) -> list[NodeDevice]:
    """The matching devices `available` finds free. A whole device none of whose counter sets is
    drawn on needs no counting: it is free where it is not in use and fits its sets unused (worked
    out once per model). A new pod shape's first scores ask this of every matching device of a
    thousand or more node groups at 10,000 nodes."""
    used, counters, grouped = usage.devices, usage.counters, usage.groups
    free = []
    for device in matcher.matching(node, request.selection):
        if device.multi:
            if available(node, usage, device, request):
                free.append(device)
        elif device.name in used:
            continue
        elif any(counter_set in counters or counter_set in grouped for counter_set in device.counter_sets):
            if _counters_allow(node, usage, device):
                free.append(device)
        elif node.fits_unused(device):
            free.append(device)
    return free


def _servings(device: NodeDevice, request: Request) -> int | None:
    """How many allocations for `request` an idle `device` holds (None: no capacity bounds it)."""
    if not device.multi:
        return 1
    taken = device.consumption(dict(request.capacity))
    if taken is None:
        return 0
    bounds = [int((device.capacity(name) or 0) // amount) for name, amount in taken.items() if amount > 0]
    return min(bounds) if bounds else None


def most_members(demand: Demand, nodes: dict[str, Node], matcher: Matcher) -> int | None:
    """The most pods of `demand` the whole cluster could hold with nothing else running: per
    request, the allocations its matching devices can hold over those one pod takes. None when
    no request is bounded (devices shared without capacities)."""
    most: int | None = None
    for request in demand.requests:
        servings = [_servings(d, request) for node in nodes.values() for d in matcher.matching(node, request.selection)]
        if None in servings:
            continue
        members = sum(s for s in servings if s is not None) // (1 if request.all_devices else max(1, request.count))
        most = members if most is None else min(most, members)
    return most
