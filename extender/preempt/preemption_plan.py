"""A preemption decision from one cluster view: which waiting pod or gang may preempt, which
lower-priority pods to evict for it, and which devices to keep for it while they end. Pure: the
view in, a decision out (extender.preempt.preemptor does the I/O).

Kubernetes 1.37 never preempts for devices (the DRA filter's failure is unresolvable), so this
stands in for DefaultPreemption where devices are what is missing. A pod preempts on one node; a
gang in one domain of its required level (anywhere without one), whole or not at all, with
exclusive parts (a JobSet's Jobs) each in a domain of its own. Victims are evicted whole: a running
gang costs all its placed members. Pods already being deleted count as gone, so nothing more is
evicted while they end, and devices kept for other preemptors stay theirs.

Stricter than DefaultPreemption where an eviction could not be defended: no set that breaks a
PodDisruptionBudget (the Eviction API would refuse part of it and split a gang), no Kueue-managed
pod (Kueue owns their admission and preemption), and only nodes where the preemptor then passes
the scheduler's taint, cordon and resource filters (extender.pods.node_admission). Victims are recorded
by UID with the devices they held (extender.cluster.reservation.Victim).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import astuple, dataclass, field
from typing import Any

from extender.cluster.reservation import Reservation, Reserved, Victim, lease_name
from extender.cluster.view import ClusterView
from extender.devices.node_usage import Node, Usage, usage_from
from extender.plan.capacity import Matcher, count_members
from extender.plan.planner import gang_domains
from extender.pods.demand import Demand
from extender.pods.eligibility import eligible, selection_key, selector_matches
from extender.pods.facts import PodFacts
from extender.pods.keys import Key, key_of
from extender.pods.model import Gang
from extender.pods.node_admission import (
    NONE,
    NodeAdmission,
    Requests,
    counts_on_node,
    members_that_fit,
    pod_requests,
    refusal,
)
from extender.preempt.victim_index import CostFields, VictimIndex
from extender.preempt.victims import EXACT_FIT_TESTS, Cost, Unit, cheapest

Slots = dict[str, int]  # node -> members placed there
MIN_TESTS_PER_REGION = 64  # exact search in each region at least this far before the reprieve method
# Regions where eviction makes room that one decision searches, the cheapest to empty first: like
# DefaultPreemption's candidate limit (max(10% of nodes, 100), from a random offset), so a decision
# on a cluster of 10,000 single-node regions stays bounded.
CANDIDATE_REGIONS = 100


@dataclass(frozen=True)
class Preemptor:
    """A pod, or the members of a gang still to place, waiting for devices."""

    key: str  # namespace/name of a pod, or the gang's key
    what: str  # how events name it: "pod team/a", "gang team/jobset:train"
    priority: int
    demand: Demand
    need: int
    regions: Mapping[str, tuple[str, ...]]  # where it may go whole: a node each for a pod, a domain each for a gang
    level: str | None = None  # the topology level of the regions (None: single nodes, or anywhere)
    parts: tuple[tuple[int, str], ...] = ()  # exclusive parts: (members, level), each in a domain of its own
    own: frozenset[str] = frozenset()  # its pods, never its victims
    requests: Requests = NONE  # what each member asks of a node's CPU, memory and pod slots (the most)
    specs: tuple[dict[str, Any], ...] = ()  # the waiting pods' specs: their tolerations decide nodes


@dataclass(frozen=True)
class Decision:
    preemptor: Preemptor
    victims: tuple[Unit, ...]
    cost: Cost
    region: str
    reserved: dict[str, Reserved]
    exact: bool
    identities: tuple[Victim, ...] = ()  # each evicted pod by UID, with the devices it held

    @property
    def evicted(self) -> tuple[str, ...]:
        return tuple(sorted(pod for unit in self.victims for pod in unit.pods))

    def reservation(self, now: float, hold_seconds: float) -> Reservation:
        preemptor = self.preemptor
        return Reservation(
            lease_name(preemptor.key),
            preemptor.key,
            preemptor.what,
            preemptor.priority,
            self.reserved,
            self.identities,
            now,
            now + hold_seconds,
        )


@dataclass(frozen=True)
class NoHelp:
    preemptor: Preemptor
    reason: str
    candidates: int  # lower-priority pods it could have evicted (0: preemption is beside the point)


@dataclass(frozen=True)
class Budget:
    """A PodDisruptionBudget as preemption counts it."""

    key: str
    namespace: str
    selector: dict[str, Any]
    allowed: int

    @classmethod
    def from_api(cls, pdb: dict[str, Any]) -> Budget:
        metadata = pdb["metadata"]
        selector = (pdb.get("spec") or {}).get("selector")
        return cls(
            f"{metadata['namespace']}/{metadata['name']}",
            metadata["namespace"],
            selector if selector is not None else {"matchLabels": {"\0never": "\0"}},  # a nil selector: no pod
            int((pdb.get("status") or {}).get("disruptionsAllowed") or 0),
        )

    def covers(self, pod: PodFacts) -> bool:
        return pod.key[0] == self.namespace and selector_matches(self.selector, pod.labels)


@dataclass
class Occupancy:
    """Who holds which devices on which node, as preemption reads it from one view (through a
    `VictimIndex` brought up to that view: a replica keeps one for its life)."""

    view: ClusterView
    driver: str
    kept: Mapping[str, Usage]  # node -> devices kept for other preemptors
    index: VictimIndex
    # Admission facts of the nodes and what every pod bound to each asks (the state's `node_room`);
    # empty: not known, nodes are judged by devices alone.
    admission: Mapping[str, NodeAdmission] = field(default_factory=dict)
    requested: Mapping[str, Requests] = field(default_factory=dict)
    # Members that fit on an emptied node, by node model: for one preemptor's decision only.
    emptied: dict[tuple[Any, int], int] = field(default_factory=dict)
    _usage: dict[tuple[str, frozenset[Key]], Usage] = field(default_factory=dict)
    _gangs: dict[str, list[Key]] | None = None

    @classmethod
    def of(
        cls,
        view: ClusterView,
        driver: str,
        kept: Mapping[str, Usage],
        admission: Mapping[str, NodeAdmission] | None = None,
        requested: Mapping[str, Requests] | None = None,
        *,
        index: VictimIndex | None = None,
    ) -> Occupancy:
        index = index if index is not None else VictimIndex(driver)
        index.update(view)
        return cls(view, driver, kept, index, admission or {}, requested or {})

    @property
    def placed(self) -> Mapping[str, set[str]]:
        """pod -> the nodes its claims hold devices on."""
        return self.index.placed

    @property
    def gone(self) -> set[str]:
        """Pods being deleted or finished: their devices count as free."""
        return self.index.gone

    def usage(self, node: str, evicted: frozenset[str]) -> Usage:
        """The node's usage once `evicted` and every pod being deleted are gone, with what is kept
        for other preemptors. A claim stays in use while any pod it is reserved for stays."""
        index = self.index
        keys = index.node_claims.get(node, ())
        staying = frozenset(
            key
            for key in keys
            if not (users := index.users(key)) or any(user not in evicted and user not in index.gone for user in users)
        )
        if not staying and node not in self.kept:
            return NOTHING_USED  # one object for every emptied node: fits are counted once per model
        cache_key = (node, staying)
        usage = self._usage.get(cache_key)
        if usage is None:
            model = self.view.nodes[node]
            usage = usage_from([self.view.claims[k] for k in staying], {node: model}, self.driver)[node]
            if node in self.kept:
                usage = usage.plus(self.kept[node])
            self._usage[cache_key] = usage
        return usage

    def admits(self, pod_specs: Iterable[dict[str, Any]], node: str) -> bool:
        """Whether every spec passes the node's taints and cordon (evictions change neither)."""
        admission = self.admission.get(node)
        return admission is None or admission.open or all(refusal(spec, node, admission) is None for spec in pod_specs)

    def room(self, node: str, freed: Requests, each: Requests, need: int) -> int:
        """How many members asking `each` the node has CPU, memory and pod slots for once pods
        asking `freed` in all are gone."""
        admission = self.admission.get(node)
        if admission is None:
            return need
        return members_that_fit(admission, self.requested.get(node, NONE).minus(freed), each, need)

    def freed(self, evicted: frozenset[str]) -> dict[str, Requests]:
        """What the evicted pods ask of their nodes, by node: it is free once they are gone."""
        by_node: dict[str, Requests] = {}
        for name in evicted:
            pod = self.view.pods.get(key_of(name))
            if pod is not None and pod.node and counts_on_node(pod.obj):
                by_node[pod.node] = by_node.get(pod.node, NONE).plus(pod_requests(pod.obj))
        return by_node

    def victim(self, name: str) -> Victim:
        return Victim(name, self.view.pods[key_of(name)].uid, tuple(sorted(self.index.held(name))))

    def gang_pods(self, gang: str) -> list[Key]:
        """The pods of a gang (as the view's membership has them), worked out once per decision."""
        if self._gangs is None:
            self._gangs = defaultdict(list)
            for key, entry in (self.view.members or {}).items():
                if entry.ref is not None and entry.member is not None:
                    self._gangs[entry.ref.key].append(key)
        return self._gangs.get(gang, [])


NOTHING_USED = Usage()


def budgets_of(pdbs: Iterable[dict[str, Any]]) -> list[Budget]:
    return [Budget.from_api(pdb) for pdb in pdbs]


def victim_units(
    occupancy: Occupancy, preemptor: Preemptor, budgets: Sequence[Budget], blocked: frozenset[str] = frozenset()
) -> list[Unit]:
    """The running pods of lower priority holding our devices, a gang's placed members as one unit.
    A gang with any member at or above the preemptor's priority is no victim (not half of it), nor
    is a unit with a Kueue-managed pod, or one its budgets do not allow to go whole (a pod under
    two budgets the Eviction API refuses outright)."""
    candidates = _Candidates(occupancy, preemptor, budgets, blocked)
    return candidates.on(tuple(occupancy.view.nodes))


class _Candidates:
    """The victim units of one decision, worked out node by node as regions are searched: each unit
    once (the same object in every region it spans), with the budgets that held some back."""

    def __init__(
        self, occupancy: Occupancy, preemptor: Preemptor, budgets: Sequence[Budget], blocked: frozenset[str]
    ) -> None:
        self.occupancy = occupancy
        self.preemptor = preemptor
        self.budgets = budgets
        self.blocked = blocked
        self.allowed = {budget.key: budget.allowed for budget in budgets}
        self._units: dict[str, Unit | None] = {}
        self.protecting: set[str] = set()
        self.held_back = 0

    def on(self, nodes: tuple[str, ...]) -> list[Unit]:
        """The units holding devices on one of `nodes`, in a stable order."""
        index, members = self.occupancy.index, self.occupancy.view.members or {}
        found: dict[str, Unit] = {}
        for node in nodes:
            for facts in index.holders(node):
                if facts.name in self.preemptor.own:
                    continue
                key = key_of(facts.name)
                entry = members.get(key)
                gang = entry.ref.key if entry is not None and entry.ref is not None and entry.member else None
                unit_key = gang or facts.name
                if unit_key not in self._units:
                    self._units[unit_key] = self._unit(unit_key, gang, key)
                unit = self._units[unit_key]
                if unit is not None:
                    found[unit_key] = unit
        return [found[key] for key in sorted(found)]

    def _unit(self, unit_key: str, gang: str | None, key: Key) -> Unit | None:
        occupancy, index = self.occupancy, self.occupancy.index
        keys = occupancy.gang_pods(gang) if gang is not None else [key]
        pods = [
            (occupancy.view.pods[k], facts)
            for k in keys
            if (facts := index.pods.get(k)) is not None and facts.name in index.placed and not facts.gone
        ]
        pods.sort(key=lambda item: item[1].name)
        names = tuple(facts.name for _, facts in pods)
        priorities = tuple(facts.priority for _, facts in pods)
        if not pods or max(priorities) >= self.preemptor.priority or any(facts.kueue for _, facts in pods):
            return None
        if self.blocked and not self.blocked.isdisjoint(names):
            return None
        covered: dict[str, int] = defaultdict(int)
        twice = False
        for pod, _ in pods if self.budgets else ():
            covering = [budget.key for budget in self.budgets if budget.covers(pod)]
            twice = twice or len(covering) > 1
            for budget_key in covering:
                covered[budget_key] += 1
        if twice or any(count > self.allowed[budget_key] for budget_key, count in covered.items()):
            self.protecting.update(covered)
            self.held_back += len(pods)
            return None
        started = min(facts.started for _, facts in pods)
        return Unit(unit_key, names, priorities, started, tuple(sorted(covered.items())))

    def seen(self) -> int:
        """Pods of the units met so far: what the preemptor could have had evicted."""
        return sum(len(unit.pods) for unit in self._units.values() if unit is not None) + self.held_back


class _RegionFit:
    """Whether the preemptor fits in one region once some units are evicted, and where."""

    def __init__(
        self,
        occupancy: Occupancy,
        preemptor: Preemptor,
        nodes: tuple[str, ...],
        units: Sequence[Unit],
        matcher: Matcher,
    ) -> None:
        self.occupancy = occupancy
        self.preemptor = preemptor
        self.nodes = nodes
        self.units = units
        self.matcher = matcher
        self._counted: dict[tuple[Any, int], int] = {}  # (node, id of a usage Occupancy keeps) -> fits

    def evicted(self, chosen: frozenset[int]) -> frozenset[str]:
        return frozenset(pod for i in chosen for pod in self.units[i].pods)

    def counts(self, chosen: frozenset[int]) -> dict[str, int]:
        """Members that fit per node; a node's count is worked out once per usage it can have
        (a set of units frees only its own nodes, so most tests find most nodes counted)."""
        evicted = self.evicted(chosen)
        occupancy, preemptor = self.occupancy, self.preemptor
        view, need = occupancy.view, preemptor.need
        freed = occupancy.freed(evicted) if occupancy.admission else {}
        counts = {}
        for name in self.nodes:
            usage = occupancy.usage(name, evicted)  # one object per usage the node can have
            # An emptied node fits as its model does (`Node.model`: selectors read no identity).
            cache, key = (occupancy.emptied, view.nodes[name].model) if usage is NOTHING_USED else (self._counted, name)
            fits = cache.get((key, id(usage)))
            if fits is None:
                fits, _ = count_members(view.nodes[name], usage, preemptor.demand, need, self.matcher)
                cache[(key, id(usage))] = fits
            if fits and occupancy.admission:
                fits = occupancy.room(name, freed.get(name, NONE), preemptor.requests, fits)
            if fits:
                counts[name] = fits
        return counts

    def __call__(self, chosen: frozenset[int]) -> Slots | None:
        return _placement(self.preemptor, self.counts(chosen), self.occupancy.view.nodes)

    def room(self, chosen: frozenset[int]) -> int:
        return min(self.preemptor.need, sum(self.counts(chosen).values()))


def _placement(preemptor: Preemptor, counts: Mapping[str, int], nodes: Mapping[str, Node]) -> Slots | None:
    """Where the preemptor's members go given how many fit on each node: each exclusive part in a
    domain of its own, or all of them onto the tightest nodes."""
    if preemptor.parts:
        return _parts_slots(preemptor.parts, counts, nodes)
    return _slots(counts, preemptor.need)


def _slots(counts: Mapping[str, int], need: int) -> Slots | None:
    """Members onto the tightest nodes first (so roomier nodes stay whole), or None."""
    if sum(counts.values()) < need:
        return None
    slots: Slots = {}
    left = need
    for name, fits in sorted(counts.items(), key=lambda item: (item[1], item[0])):
        if left == 0:
            break
        slots[name] = min(fits, left)
        left -= slots[name]
    return slots


def _parts_slots(
    parts: Sequence[tuple[int, str]], counts: Mapping[str, int], nodes: Mapping[str, Node]
) -> Slots | None:
    """Each exclusive part in a domain of its own, the largest part first into the tightest domain
    that holds it."""
    domains: dict[str, dict[str, int]] = defaultdict(dict)
    for level in {level for _, level in parts}:
        for name, fits in counts.items():
            value = nodes[name].labels.get(level)
            if value is not None:
                domains[f"{level}={value}"][name] = fits
    used: set[str] = set()
    slots: Slots = {}
    for size, level in sorted(parts, key=lambda part: -part[0]):
        options = sorted(
            (sum(room.values()), domain)
            for domain, room in domains.items()
            if domain.startswith(f"{level}=") and domain not in used and sum(room.values()) >= size
        )
        if not options:
            return None
        domain = options[0][1]
        used.add(domain)
        for name, members in (_slots(domains[domain], size) or {}).items():
            slots[name] = slots.get(name, 0) + members
    return slots


def decide(
    occupancy: Occupancy,
    preemptor: Preemptor,
    budgets: Sequence[Budget],
    matcher: Matcher,
    blocked: frozenset[str] = frozenset(),
    *,
    pause: Callable[[], None] = lambda: None,
) -> Decision | NoHelp:
    """The cheapest region and victims for the preemptor, or why evicting would not help.
    `pause` runs after each region: the caller's chance to let requests have the interpreter."""
    candidates = _Candidates(occupancy, preemptor, budgets, blocked)
    allowed = candidates.allowed
    best: Decision | None = None
    most_room = 0
    budgets_refused = False
    # One search budget for the whole decision, so many domains (a gang's racks) stay cheap, and
    # each domain searched only for sets cheaper than the best found so far.
    tests = max(MIN_TESTS_PER_REGION, EXACT_FIT_TESTS // max(1, len(preemptor.regions)))
    found = 0
    walk = _RegionWalk(occupancy, preemptor, pause)
    free = _fits_without_evicting(occupancy, preemptor, walk.regions(), matcher)
    pause()
    if free is not None:
        return NoHelp(
            preemptor,
            f"{preemptor.what} fits in {free} without evicting anything: "
            "what keeps it waiting is not devices, so no pod is preempted for it",
            candidates.seen(),
        )
    for region, nodes in walk:
        region_units = candidates.on(nodes)
        fit = _RegionFit(occupancy, preemptor, nodes, region_units, matcher)
        choice = cheapest(region_units, allowed, fit, exact_tests=tests, bound=None if best is None else best.cost)
        pause()
        if choice is not None and choice.cost.violations:
            budgets_refused = True  # the least a set that makes room here breaks is a budget
            continue
        if choice is None:
            if best is None:  # (with a best found, None may only mean "not cheaper here")
                most_room = max(most_room, fit.room(frozenset(range(len(region_units)))))
            continue
        found += 1
        if best is None or choice.cost < best.cost:
            victims = tuple(region_units[i] for i in sorted(choice.chosen))
            evicted = fit.evicted(choice.chosen)
            reserved = _reserve(occupancy, preemptor, evicted, choice.placement, matcher)
            identities = tuple(occupancy.victim(name) for name in sorted(evicted))
            best = Decision(preemptor, victims, choice.cost, region, reserved, choice.exact, identities)
            walk.best = best.cost
        if found >= CANDIDATE_REGIONS:
            break
    if best is not None:
        return best
    reason = _why_not(preemptor, most_room)
    if budgets_refused or candidates.protecting:
        protecting = candidates.protecting
        named = f" ({', '.join(sorted(protecting))})" if protecting else ""
        reason = (
            f"{preemptor.what}: evicting the lower-priority pods that would make room would break a "
            f"PodDisruptionBudget{named}, and nativedra evicts none of them rather than part; {reason}"
        )
    return NoHelp(preemptor, reason, candidates.seen())


class _RegionWalk:
    """The regions in the order a decision searches them, with the nodes the preemptor may use in
    each; `best` is the cost of the best choice found so far, set by the decision as it goes.

    First those whose lower-priority pods cost least to evict all, the likeliest to hold the
    cheapest choice, until a choice is found; then only those whose cheapest single pod costs less
    than the best (no set there can cost less than that pod: every unit added raises the priority
    sum), cheapest first, so the rest of a large cluster is never looked at. Read from the index's
    per-node summaries: no unit is made for the order."""

    def __init__(self, occupancy: Occupancy, preemptor: Preemptor, pause: Callable[[], None]) -> None:
        self.best: Cost | None = None
        self._regions: list[tuple[CostFields, str, tuple[str, ...], CostFields]] = []
        for count, (region, all_nodes) in enumerate(preemptor.regions.items()):
            if count % 64 == 0:
                pause()
            nodes = tuple(node for node in all_nodes if occupancy.admits(preemptor.specs, node))
            emptied, least = occupancy.index.region_costs(nodes, preemptor.priority)
            self._regions.append((emptied, region, nodes, least))

    def regions(self) -> list[tuple[str, tuple[str, ...]]]:
        """Every region with the nodes the preemptor may use there, in no particular order."""
        return [(region, nodes) for _, region, nodes, _ in self._regions]

    def __iter__(self) -> Iterator[tuple[str, tuple[str, ...]]]:
        regions = self._regions
        heapq.heapify(regions)
        taken = set()
        while regions and self.best is None:
            _, region, nodes, _ = heapq.heappop(regions)
            taken.add(region)
            yield region, nodes
        cheapest = [(least, region, nodes) for _, region, nodes, least in regions]
        heapq.heapify(cheapest)  # no sort of the whole cluster: only as far as the bound lets it go
        while cheapest and self.best is not None:
            least, region, nodes = heapq.heappop(cheapest)
            if least >= astuple(self.best):
                return
            if region not in taken:
                yield region, nodes


def _fits_without_evicting(
    occupancy: Occupancy, preemptor: Preemptor, regions: Sequence[tuple[str, tuple[str, ...]]], matcher: Matcher
) -> str | None:
    """A region where the preemptor fits as things are, looked for in every region (each node
    counted once), not only in those the walk visits: it orders them by what emptying them costs,
    so a free device among costly pods would come last or never, and a pod still marked
    unschedulable from before the device freed (the scheduler's backoff) would get victims."""
    nodes = tuple(dict.fromkeys(node for _, region_nodes in regions for node in region_nodes))
    counts = _RegionFit(occupancy, preemptor, nodes, (), matcher).counts(frozenset())
    for region, region_nodes in regions:
        here = {node: counts[node] for node in region_nodes if node in counts}
        if here and _placement(preemptor, here, occupancy.view.nodes) is not None:
            return region
    return None


def _freeing(units: Sequence[Unit], occupancy: Occupancy, nodes: tuple[str, ...]) -> list[int]:
    """Units holding devices on one of `nodes`: the others free nothing there."""
    region = set(nodes)
    return [i for i, unit in enumerate(units) if any(occupancy.placed.get(pod, set()) & region for pod in unit.pods)]


def _reserve(
    occupancy: Occupancy, preemptor: Preemptor, evicted: frozenset[str], slots: Slots, matcher: Matcher
) -> dict[str, Reserved]:
    """What the preemptor's members take on each node once the victims are gone."""
    reserved = {}
    for name, members in sorted(slots.items()):
        before = occupancy.usage(name, evicted)
        fits, after = count_members(occupancy.view.nodes[name], before, preemptor.demand, members, matcher)
        reserved[name] = Reserved(fits, after.minus(before))
    return reserved


def _why_not(preemptor: Preemptor, room: int) -> str:
    per_member = f"{preemptor.demand.devices} device(s)"
    if preemptor.parts:
        levels = " / ".join(sorted({level for _, level in preemptor.parts}))
        where = f"with each exclusive part in a {levels} of its own"
    elif preemptor.level:
        where = f"in one {preemptor.level}"
    elif len(preemptor.regions) > 1 or preemptor.need == 1:
        where = "on one node"
    else:
        where = "in the cluster"
    return (
        f"{preemptor.what} needs {preemptor.need} x {per_member} {where}; even evicting every lower-priority pod "
        f"leaves room for {room}"
    )


def pod_preemptor(pod: PodFacts, demand: Demand, view: ClusterView) -> Preemptor:
    """A pod outside gangs: each eligible node with our devices is a region of its own."""
    return Preemptor(
        pod.name,
        f"pod {pod.name}",
        pod.priority,
        demand,
        1,
        _single_nodes(pod.spec, view.nodes),
        own=frozenset({pod.name}),
        requests=pod_requests(pod.obj),
        specs=(pod.spec,),
    )


# Regions of pods by what selects their nodes, while the nodes are the same mapping (the state hands
# out a new one when any node changes): a waiting pod is judged every step, over every node.
_SINGLE_NODES: dict[tuple[str, int], tuple[Mapping[str, Node], dict[str, tuple[str, ...]]]] = {}
SINGLE_NODES_KEPT = 16


def _single_nodes(spec: dict[str, Any], nodes: Mapping[str, Node]) -> dict[str, tuple[str, ...]]:
    """Each eligible node with our devices, a region of its own."""
    key = (selection_key(spec), id(nodes))
    known = _SINGLE_NODES.get(key)
    if known is not None and known[0] is nodes:
        return known[1]
    regions: dict[str, tuple[str, ...]] = {
        node.name: (node.name,) for node in nodes.values() if node.devices and eligible(spec, node.name, node.labels)
    }
    if len(_SINGLE_NODES) >= SINGLE_NODES_KEPT:
        _SINGLE_NODES.clear()
    _SINGLE_NODES[key] = (nodes, regions)
    return regions


def gang_preemptor(gang: Gang, view: ClusterView, priority: int) -> Preemptor:
    """A gang's members still to place, in one domain of its required level (its placed members'
    domain once it has some), or anywhere; exclusive parts each in a domain of their own (while
    none is placed: a placed part has its domain already)."""
    ref = gang.ref
    exclusive = () if gang.placed else tuple((p.size, p.exclusive) for p in gang.parts if p.exclusive)
    level = None if exclusive else ref.required_topology
    regions = {domain: tuple(names) for domain, names in gang_domains(view.nodes, level, gang).items()}
    own = frozenset(m.pod for m in gang.members)
    waiting = [
        pod for member in gang.members if (pod := view.pods.get(key_of(member.pod))) is not None and not pod.node
    ]
    asks = [pod_requests(pod.obj) for pod in waiting] or [NONE]
    most = Requests(
        max(r.cpu for r in asks), max(r.memory for r in asks), 1, frozenset().union(*(r.host_ports for r in asks))
    )
    specs = tuple(pod.spec for pod in waiting)
    what = f"gang {ref.key}"
    return Preemptor(
        ref.key, what, priority, gang.demand(), gang.remaining, regions, level, exclusive, own, most, specs
    )
