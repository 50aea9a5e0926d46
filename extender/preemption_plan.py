"""A preemption decision from one cluster view: which waiting pod or gang may preempt, which
lower-priority pods to evict for it, and which devices to keep for it while they end. Pure: the
view in, a decision out (extender.preemptor does the I/O).

Kubernetes 1.37 never preempts for devices (the DRA filter's failure is unresolvable), so this
stands in for DefaultPreemption where devices are what is missing. A pod preempts on one node; a
gang in one domain of its required level (anywhere without one), whole or not at all, with
exclusive parts (a JobSet's Jobs) each in a domain of its own. Victims are evicted whole: a running
gang costs all its placed members. Pods already being deleted count as gone, so nothing more is
evicted while they end, and devices kept for other preemptors stay theirs.

Stricter than DefaultPreemption where an eviction could not be defended: no set that breaks a
PodDisruptionBudget (the Eviction API would refuse part of it and split a gang), no Kueue-managed
pod (Kueue owns their admission and preemption), and only nodes where the preemptor then passes
the scheduler's taint, cordon and resource filters (extender.node_admission). Victims are recorded
by UID with the devices they held (extender.reservation.Victim).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from extender.capacity import Matcher, count_members
from extender.demand import Demand
from extender.eligibility import eligible, selector_matches
from extender.kueue import managed_by_kueue
from extender.lag import pod_key, timestamp
from extender.node_admission import (
    NONE,
    NodeAdmission,
    Requests,
    counts_on_node,
    members_that_fit,
    pod_requests,
    refusal,
)
from extender.node_usage import Node, Usage, allocated_results, partner_name, usage_from
from extender.plan_model import Gang
from extender.planner import gang_domains
from extender.reservation import Reservation, Reserved, Victim, lease_name
from extender.victims import EXACT_FIT_TESTS, NOTHING, Cost, Unit, cheapest, cost_of
from extender.view import ClusterView

Key = tuple[str, str]
Slots = dict[str, int]  # node -> members placed there
MIN_TESTS_PER_REGION = 64  # exact search in each region at least this far before the reprieve method
# Regions where eviction makes room that one decision searches, the cheapest to empty first: like
# DefaultPreemption's candidate limit (max(10% of nodes, 100), from a random offset), so a decision
# on a cluster of 10,000 single-node regions stays bounded.
CANDIDATE_REGIONS = 100
INFINITE_COST = Cost(2**62, 2**62, 2**62, 2**62, math.inf)


def name_of(key: Key) -> str:
    return f"{key[0]}/{key[1]}"


def priority_of(pod: dict[str, Any]) -> int:
    return int((pod.get("spec") or {}).get("priority") or 0)


def may_preempt(pod: dict[str, Any]) -> bool:
    return (pod.get("spec") or {}).get("preemptionPolicy") != "Never"


def unschedulable(pod: dict[str, Any]) -> bool:
    """The scheduler has tried the pod and found no node (its PodScheduled condition says so)."""
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def terminating(pod: dict[str, Any]) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def finished(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


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

    def covers(self, pod: dict[str, Any]) -> bool:
        metadata = pod["metadata"]
        return metadata["namespace"] == self.namespace and selector_matches(self.selector, metadata.get("labels") or {})


@dataclass(frozen=True)
class _ClaimFacts:
    ours: tuple[tuple[str, str], ...]  # (pool, device) of our driver
    partners: tuple[str, ...]  # other drivers' devices, as `partner_name`
    users: frozenset[str]  # namespace/name of the pods it is reserved for


@dataclass(frozen=True)
class _PodFacts:
    name: str
    priority: int
    started: float
    kueue: bool
    gone: bool  # being deleted or finished


class ReadMemo:
    """What preemption reads of each claim and pod, kept while the object is the same one: the
    state replaces an object that changes, so a decision reads again only what changed since the
    last. Entries of objects gone from the view go with the next read: bounded by the cluster."""

    def __init__(self, driver: str) -> None:
        self.driver = driver
        self._claims: dict[Key, tuple[dict[str, Any], _ClaimFacts | None]] = {}
        self._pods: dict[Key, tuple[dict[str, Any], _PodFacts]] = {}

    def claim(self, key: Key, claim: dict[str, Any]) -> _ClaimFacts | None:
        known = self._claims.get(key)
        if known is not None and known[0] is claim:
            return known[1]
        results = allocated_results(claim)
        facts = None
        if results:
            users = frozenset(
                f"{key[0]}/{c.get('name')}"
                for c in (claim.get("status") or {}).get("reservedFor") or []
                if c.get("resource") == "pods"
            )
            ours = tuple((pool, device) for driver, pool, device, _ in results if driver == self.driver)
            partners = tuple(partner_name(d, pool, device) for d, pool, device, _ in results if d != self.driver)
            facts = _ClaimFacts(ours, partners, users)
        self._claims[key] = (claim, facts)
        return facts

    def pod(self, key: Key, pod: dict[str, Any]) -> _PodFacts:
        known = self._pods.get(key)
        if known is not None and known[0] is pod:
            return known[1]
        facts = _PodFacts(
            name_of(key), priority_of(pod), _started(pod), managed_by_kueue(pod), terminating(pod) or finished(pod)
        )
        self._pods[key] = (pod, facts)
        return facts

    def forget_missing(self, view: ClusterView) -> None:
        if len(self._claims) > len(view.claims) + 64:
            self._claims = {k: v for k, v in self._claims.items() if k in view.claims}
        if len(self._pods) > len(view.pods) + 64:
            self._pods = {k: v for k, v in self._pods.items() if k in view.pods}


@dataclass
class Occupancy:
    """Who holds which devices on which node, as preemption reads it from one view."""

    view: ClusterView
    driver: str
    kept: Mapping[str, Usage]  # node -> devices kept for other preemptors
    claims_on: dict[str, dict[Key, dict[str, Any]]] = field(default_factory=lambda: defaultdict(dict))
    users: dict[Key, frozenset[str]] = field(default_factory=dict)  # claim -> pods it is reserved for
    placed: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # pod -> nodes of its claims
    held: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))  # pod -> driver/pool/device
    gone: frozenset[str] = frozenset()  # pods being deleted or finished: their devices count as free
    # Admission facts of the nodes and what every pod bound to each asks (the state's `node_room`);
    # empty: not known, nodes are judged by devices alone.
    admission: Mapping[str, NodeAdmission] = field(default_factory=dict)
    requested: Mapping[str, Requests] = field(default_factory=dict)
    # Members that fit on an emptied node, by node model: for one preemptor's decision only.
    emptied: dict[tuple[Any, int], int] = field(default_factory=dict)
    memo: ReadMemo | None = None
    _usage: dict[tuple[str, frozenset[Key]], Usage] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        view: ClusterView,
        driver: str,
        kept: Mapping[str, Usage],
        admission: Mapping[str, NodeAdmission] | None = None,
        requested: Mapping[str, Requests] | None = None,
        *,
        memo: ReadMemo | None = None,
    ) -> Occupancy:
        memo = memo if memo is not None else ReadMemo(driver)
        occupancy = cls(view, driver, kept, admission=admission or {}, requested=requested or {}, memo=memo)
        # Other drivers' devices our planning counts (a NIC aligned by NUMA node): a claim using one
        # holds its node too, so evicting its pod frees it.
        partner_nodes: dict[str, str] | None = None
        nodes = view.nodes
        claims_on, placed, held_by, users_of = occupancy.claims_on, occupancy.placed, occupancy.held, occupancy.users
        for key, claim in view.claims.items():
            facts = memo.claim(key, claim)
            if facts is None:
                continue
            pools = [pool for pool, _ in facts.ours if pool in nodes]
            held = [f"{driver}/{pool}/{device}" for pool, device in facts.ours if pool in nodes]
            if facts.partners:
                if partner_nodes is None:
                    partner_nodes = {d.name: node.name for node in nodes.values() for d in node.partners}
                for name in facts.partners:
                    node = partner_nodes.get(name)
                    if node is not None:
                        pools.append(node)
                        held.append(name)
            users = facts.users
            users_of[key] = users
            for pool in set(pools):
                claims_on[pool][key] = claim
                for user in users:
                    placed[user].add(pool)
            for user in users:
                held_by[user].extend(held)
        occupancy.gone = frozenset(read.name for key, pod in view.pods.items() if (read := memo.pod(key, pod)).gone)
        memo.forget_missing(view)
        return occupancy

    def usage(self, node: str, evicted: frozenset[str]) -> Usage:
        """The node's usage once `evicted` and every pod being deleted are gone, with what is kept
        for other preemptors. A claim stays in use while any pod it is reserved for stays."""
        away = evicted | self.gone
        claims = self.claims_on.get(node, {})
        staying = frozenset(k for k in claims if not self.users[k] or not self.users[k] <= away)
        if not staying and node not in self.kept:
            return NOTHING_USED  # one object for every emptied node: fits are counted once per model
        cache_key = (node, staying)
        usage = self._usage.get(cache_key)
        if usage is None:
            model = self.view.nodes[node]
            usage = usage_from([claims[k] for k in staying], {node: model}, self.driver)[node]
            if node in self.kept:
                usage = usage.plus(self.kept[node])
            self._usage[cache_key] = usage
        return usage

    def admits(self, pod_specs: Iterable[dict[str, Any]], node: str) -> bool:
        """Whether every spec passes the node's taints and cordon (evictions change neither)."""
        admission = self.admission.get(node)
        return admission is None or all(refusal(spec, node, admission) is None for spec in pod_specs)

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
            pod = self.view.pods.get(_key(name))
            if pod is not None and counts_on_node(pod):
                node = pod["spec"]["nodeName"]
                by_node[node] = by_node.get(node, NONE).plus(pod_requests(pod))
        return by_node

    def victim(self, name: str) -> Victim:
        pod = self.view.pods[_key(name)]
        return Victim(name, str(pod["metadata"].get("uid") or ""), tuple(sorted(self.held.get(name, ()))))


NOTHING_USED = Usage()


def _key(name: str) -> Key:
    namespace, _, pod = name.partition("/")
    return namespace, pod


def budgets_of(pdbs: Iterable[dict[str, Any]]) -> list[Budget]:
    return [Budget.from_api(pdb) for pdb in pdbs]


def victim_units(
    occupancy: Occupancy, preemptor: Preemptor, budgets: Sequence[Budget], blocked: frozenset[str] = frozenset()
) -> list[Unit]:
    """The running pods of lower priority holding our devices, a gang's placed members as one unit.
    A gang with any member at or above the preemptor's priority is no victim (not half of it), nor
    is a unit with a Kueue-managed pod, or one its budgets do not allow to go whole (a pod under
    two budgets the Eviction API refuses outright)."""
    return _candidates(occupancy, preemptor, budgets, blocked)[0]


def _candidates(
    occupancy: Occupancy, preemptor: Preemptor, budgets: Sequence[Budget], blocked: frozenset[str]
) -> tuple[list[Unit], set[str], int]:
    """`victim_units`, the budgets that kept some lower-priority unit from being one, and how many
    pods those units hold."""
    view = occupancy.view
    members = view.members or {}
    memo = occupancy.memo or ReadMemo(occupancy.driver)
    placed, own = occupancy.placed, preemptor.own
    by_gang: dict[str, list[tuple[dict[str, Any], _PodFacts]]] = defaultdict(list)
    singles: list[tuple[dict[str, Any], _PodFacts]] = []
    for key, pod in view.pods.items():
        facts = memo.pod(key, pod)
        name = facts.name
        if name not in placed or facts.gone or name in own:
            continue
        entry = members.get(key)
        if entry is not None and entry.ref is not None and entry.member is not None:
            by_gang[entry.ref.key].append((pod, facts))
        else:
            singles.append((pod, facts))
    groups = [(facts.name, [(pod, facts)]) for pod, facts in singles] + sorted(
        by_gang.items(), key=lambda item: item[0]
    )
    allowed = {budget.key: budget.allowed for budget in budgets}
    units = []
    protecting: set[str] = set()
    held_back = 0
    for unit_key, group in groups:
        pods = sorted(group, key=lambda item: item[1].name) if len(group) > 1 else group
        names = tuple(facts.name for _, facts in pods)
        priorities = tuple(facts.priority for _, facts in pods)
        if max(priorities) >= preemptor.priority or any(facts.kueue for _, facts in pods):
            continue
        if blocked and not blocked.isdisjoint(names):
            continue
        covered: dict[str, int] = defaultdict(int)
        twice = False
        for pod, _ in pods if budgets else ():
            covering = [budget.key for budget in budgets if budget.covers(pod)]
            twice = twice or len(covering) > 1
            for budget_key in covering:
                covered[budget_key] += 1
        if twice or any(count > allowed[budget_key] for budget_key, count in covered.items()):
            protecting.update(covered)
            held_back += len(pods)
            continue
        started = min(facts.started for _, facts in pods)
        units.append(Unit(unit_key, names, priorities, started, tuple(sorted(covered.items()))))
    return units, protecting, held_back


def _started(pod: dict[str, Any]) -> float:
    status = pod.get("status") or {}
    return timestamp(status.get("startTime") or pod["metadata"].get("creationTimestamp"))


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
        counts = self.counts(chosen)
        if self.preemptor.parts:
            return _parts_slots(self.preemptor.parts, counts, self.occupancy.view.nodes)
        return _slots(counts, self.preemptor.need)

    def room(self, chosen: frozenset[int]) -> int:
        return min(self.preemptor.need, sum(self.counts(chosen).values()))


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
    units, protecting, held_back = _candidates(occupancy, preemptor, budgets, blocked)
    allowed = {budget.key: budget.allowed for budget in budgets}
    best: Decision | None = None
    most_room = 0
    budgets_refused = False
    # One search budget for the whole decision, so many domains (a gang's racks) stay cheap, and
    # each domain searched only for sets cheaper than the best found so far.
    tests = max(MIN_TESTS_PER_REGION, EXACT_FIT_TESTS // max(1, len(preemptor.regions)))
    found = 0
    for region, nodes, region_units, least in _regions_in_order(occupancy, preemptor, units, allowed):
        if best is not None and least >= best.cost:
            continue  # no set here can cost less than the best found: not worth a fit test
        fit = _RegionFit(occupancy, preemptor, nodes, region_units, matcher)
        if nodes and fit(frozenset()) is not None:
            pause()
            return NoHelp(
                preemptor,
                f"{preemptor.what} fits in {region} without evicting anything: "
                "what keeps it waiting is not devices, so no pod is preempted for it",
                sum(len(unit.pods) for unit in units),
            )
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
        if found >= CANDIDATE_REGIONS:
            break
    if best is not None:
        return best
    reason = _why_not(preemptor, most_room)
    if budgets_refused or protecting:
        named = f" ({', '.join(sorted(protecting))})" if protecting else ""
        reason = (
            f"{preemptor.what}: evicting the lower-priority pods that would make room would break a "
            f"PodDisruptionBudget{named}, and nativedra evicts none of them rather than part; {reason}"
        )
    return NoHelp(preemptor, reason, sum(len(unit.pods) for unit in units) + held_back)


def _regions_in_order(
    occupancy: Occupancy, preemptor: Preemptor, units: Sequence[Unit], allowed: Mapping[str, int]
) -> Iterator[tuple[str, tuple[str, ...], list[Unit], Cost]]:
    """Each region with the nodes the preemptor may use there, the units holding devices on them
    and the least any set of them can cost (its cheapest single unit: every unit added raises the
    priority sum); those whose every unit costs least to evict first (then by name): the likeliest
    to hold the cheapest choice come first, so the candidate limit and the bound cut off the rest."""
    by_node = units_by_node(units, occupancy)
    # A unit alone breaks no budget (`victim_units` leaves out those that would).
    alone = [Cost(0, unit.highest, unit.total, len(unit.pods), -unit.started) for unit in units]
    ordered = []
    for region, all_nodes in preemptor.regions.items():
        nodes = tuple(node for node in all_nodes if occupancy.admits(preemptor.specs, node))
        mine = _freeing_indexed(by_node, nodes)
        region_units = [units[i] for i in mine]
        if any(unit.budgets for unit in region_units):
            emptied = cost_of(region_units, frozenset(range(len(region_units))), allowed)
        else:  # the same figures, without counting budgets
            highest = max((unit.highest for unit in region_units), default=NOTHING.highest)
            emptied = Cost(
                0,
                highest,
                sum(unit.total for unit in region_units),
                sum(len(unit.pods) for unit in region_units),
                -min((unit.started for unit in region_units if unit.highest == highest), default=-NOTHING.latest_start),
            )
        least = min((alone[i] for i in mine), default=INFINITE_COST)
        ordered.append((emptied, region, nodes, region_units, least))
    ordered.sort(key=lambda item: (item[0], item[1]))
    for _, region, nodes, region_units, least in ordered:
        yield region, nodes, region_units, least


def units_by_node(units: Sequence[Unit], occupancy: Occupancy) -> dict[str, list[int]]:
    """Each node's units (those holding devices there), in unit order: built once per decision, so
    a region looks at its own nodes' units, not at every unit of the cluster."""
    found: dict[str, list[int]] = defaultdict(list)
    for index, unit in enumerate(units):
        for node in {node for pod in unit.pods for node in occupancy.placed[pod]}:
            found[node].append(index)
    return found


def _freeing(units: Sequence[Unit], occupancy: Occupancy, nodes: tuple[str, ...]) -> list[int]:
    """Units holding devices on one of `nodes`: the others free nothing there."""
    return _freeing_indexed(units_by_node(units, occupancy), nodes)


def _freeing_indexed(by_node: Mapping[str, list[int]], nodes: tuple[str, ...]) -> list[int]:
    if len(nodes) == 1:
        return by_node.get(nodes[0], [])
    return sorted({index for node in nodes for index in by_node.get(node, ())})


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


def pod_preemptor(pod: dict[str, Any], demand: Demand, view: ClusterView) -> Preemptor:
    """A pod outside gangs: each eligible node with our devices is a region of its own."""
    spec = pod.get("spec") or {}
    name = name_of(pod_key(pod))
    regions = {
        node.name: (node.name,)
        for node in view.nodes.values()
        if node.devices and eligible(spec, node.name, node.labels)
    }
    return Preemptor(
        name,
        f"pod {name}",
        priority_of(pod),
        demand,
        1,
        regions,
        own=frozenset({name}),
        requests=pod_requests(pod),
        specs=(spec,),
    )


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
        pod
        for member in gang.members
        if (pod := view.pods.get(_key(member.pod))) is not None and not (pod.get("spec") or {}).get("nodeName")
    ]
    asks = [pod_requests(pod) for pod in waiting] or [NONE]
    most = Requests(max(r.cpu for r in asks), max(r.memory for r in asks), 1)
    specs = tuple(pod.get("spec") or {} for pod in waiting)
    what = f"gang {ref.key}"
    return Preemptor(
        ref.key, what, priority, gang.demand(), gang.remaining, regions, level, exclusive, own, most, specs
    )
