"""Filter and prioritize answers from a cluster view. No I/O: the app feeds it a view."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from extender.capacity import Matcher, place
from extender.cel_eval import Selectors
from extender.config import ExtenderConfig
from extender.demand import Demand, allocated_node, demand_of
from extender.eligibility import ANY_NODE, PlacedPods
from extender.gang import NATIVE, GangRef, gang_of, may_belong_to_gang
from extender.heap import collector_paused, freeze_survivors
from extender.lag import InFlight, Unwatched, complete_offer, pod_key, timestamp
from extender.lru import LruCache
from extender.model import Node, Usage
from extender.plan_memo import PlanMemo
from extender.plan_model import Gang, HoldClock, Limits, Member, Plan
from extender.planner import ClusterPlan, plan_cluster
from extender.scoring import score
from extender.view import ClusterView
from kube.pods import pod_claim_names

plan_log = logging.getLogger("extender.plan")
# The path of an answer that depends on an object the watches have not delivered yet (a claim
# template, a JobSet): the app answers it as an extender error, which the scheduler retries after
# a short backoff, instead of a rejection, which parks the pod until some cluster event (up to
# 5 minutes when none comes).
RETRY = "retry"


def _bound_at(pod: dict[str, Any]) -> float | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            return timestamp(condition.get("lastTransitionTime"))
    return None


def _body(view: ClusterView, pod: dict[str, Any]) -> str | None:
    """What the pod being asked about adds to the view: nothing when the view holds this very pod
    (same uid and resourceVersion, or the same body); else a digest of the body, since anything
    in it (labels, claims, spec) can change the plan: two bodies with one name are two questions."""
    known = view.pods.get(pod_key(pod))
    if known is not None:
        mine, theirs = pod["metadata"], known["metadata"]
        version = mine.get("resourceVersion")
        same_version = version and (mine.get("uid"), version) == (theirs.get("uid"), theirs.get("resourceVersion"))
        if same_version or known == pod:
            return None
    return hashlib.sha256(json.dumps(pod, sort_keys=True, default=str).encode()).hexdigest()


def _held_nodes(
    cluster: ClusterPlan, view: ClusterView, demand: Demand, names: list[str], matcher: Matcher
) -> dict[str, str]:
    """Nodes of `names` where `demand` fits only in capacity held for gangs, with why. Only held
    nodes can fail, and they are few (the pending gangs' slots) against 5,000 names."""
    asked = set(names)
    failed = {}
    for name, holders in cluster.holders.items():
        node = view.nodes.get(name)
        if holders and node is not None and name in asked and place(node, cluster.held[name], demand, matcher) is None:
            failed[name] = f"the free devices on {name} are held for gang(s) {', '.join(sorted(holders))}"
    return failed


def _same(before: tuple[object, ...], now: tuple[object, ...]) -> bool:
    return len(before) == len(now) and all(a is b for a, b in zip(before, now, strict=True))


@dataclass
class _Known:
    """A pod's gang and Member as last worked out, with the objects they were worked out from,
    the keys of those claims and templates (`deps`), and the last view version it was found
    valid at (`valid_at`: a later view whose journal names none of `deps` finds it valid too)."""

    pod: dict[str, Any]
    claims: tuple[dict[str, Any] | None, ...]
    templates: tuple[dict[str, Any] | None, ...]
    context: tuple[object, ...]
    ref: GangRef | None
    member: Member | None
    deps: frozenset[tuple[str, tuple[str, str]]] = frozenset()
    valid_at: int = -1


def _summary(plan: Plan) -> tuple[object, ...]:
    return plan.feasible, plan.domain, tuple(sorted(plan.slots.items())), plan.reason


class Decider:
    MEMBER_CACHE_MIN = 4096
    SCORE_DEMANDS = 16  # demands whose node scores are remembered, at most
    FIT_CACHE_MAX = 1_000_000  # node fits remembered across plans, at most

    def __init__(self, config: ExtenderConfig) -> None:
        self.config = config
        self.matcher = Matcher(Selectors(), config.driver)
        self.limits = Limits(
            config.plan_timeout_seconds, config.plan_budget_seconds, config.max_gang_size, config.topology_levels
        )
        # One plan, for (view version, body of the pod asked about unless the view holds it); it
        # also depends on time only through holds expiring, so it is kept until the first does.
        # With when it was made (monotonic): answers outside gangs may use it for a while.
        self._plan_cache: tuple[tuple[int, str | None, int], ClusterPlan, float] | None = None
        self._lock = threading.Lock()
        self._planning = threading.Lock()  # held while a plan is made (see `plan`)
        # Set when an answer came from a plan older than its view: wakes `keep_fresh`.
        self.refresh_wanted = threading.Event()
        # What the scheduler knows before the watches do (see extender.lag).
        self._unwatched = Unwatched()
        self._in_flight = InFlight()
        # Hold clocks of the gangs in the last plan (expired holds wait for a change to hold again).
        self._clocks: dict[str, HoldClock] = {}
        # What was last logged per gang in the last plan, so a plan is logged when it changes.
        self._logged: dict[str, tuple[Plan, tuple[object, ...]]] = {}
        # demand -> node -> (node object, usage object, score): both objects are replaced on any
        # change. At most SCORE_DEMANDS demands (least recently used out), each at most twice the
        # view's nodes (cleared past that).
        self._scores: LruCache[Demand, dict[str, tuple[Node, Usage, int]]] = LruCache(self.SCORE_DEMANDS)
        # The placed pods of the last view (by version), for inter-pod affinity: built once per view.
        self._placed: tuple[int, PlacedPods] | None = None
        # Members by pod key, of the pods in the last `gangs` pass only: an entry holds its pod,
        # claims and templates, so one left behind per deleted pod grows memory with the churn.
        self._members: LruCache[tuple[str, str], _Known] = LruCache(self.MEMBER_CACHE_MIN)
        # What the last plan saw and decided: the next plan re-plans only the gangs that changed;
        # and the view version it was made from, to ask the view's journal what changed since.
        self._memo: PlanMemo | None = None
        self._memo_at = -1
        # `gangs` is serialized: the view version its last pass validated every member at, and
        # the context (classes, JobSets, PodGroups of both kinds) it saw, reused while equal.
        self._gangs_lock = threading.Lock()
        self._gangs_at = -1
        # What the last gangs pass was made from, for `_unaffected`: the candidate pods, the claims
        # and templates its members were worked out from, and the versions those are current at.
        self._candidate_keys: set[tuple[str, str]] = set()
        self._member_deps: set[tuple[str, tuple[str, str]]] = set()
        self._deps_at = -1
        self._unjournaled_at = -1
        self._context: tuple[object, ...] = ()
        self._last_gangs: list[Gang] = []  # what the last gangs pass found

    def demand(self, view: ClusterView, pod: dict[str, Any], include_allocated: bool = False) -> Demand:
        return demand_of(
            pod, view.claims, view.templates, view.classes, self.config.driver, include_allocated=include_allocated
        )

    def gang(self, view: ClusterView, pod: dict[str, Any]) -> GangRef | None:
        return gang_of(pod, view.jobsets, view.pod_group_min, view.native_groups)

    def node_of(self, view: ClusterView, pod: dict[str, Any]) -> str | None:
        """The node the pod is placed on: bound there, or its claim allocated there."""
        return (pod.get("spec") or {}).get("nodeName") or allocated_node(pod, view.claims, self.config.driver)

    def placed_pods(self, view: ClusterView) -> PlacedPods:
        """The view's placed pods as kube-scheduler's InterPodAffinity counts them: its pod informer
        leaves out Succeeded and Failed pods, while a pod being deleted still counts until it is gone."""
        cached = self._placed
        if cached is not None and cached[0] == view.version:
            return cached[1]
        placed = []
        for pod in view.pods.values():
            node = self.node_of(view, pod)
            if node in view.nodes and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                placed.append((pod, view.nodes[node].labels))
        index = PlacedPods(placed)
        self._placed = (view.version, index)
        return index

    def _candidates(self, view: ClusterView, extra: dict[str, Any] | None) -> list[dict[str, Any]]:
        """The pods that may be gang members (the watches index them), in the view's order, with
        the pod being asked about in its place, even if the watch has not delivered it yet."""
        keys = view.gang_pods if view.gang_pods is not None else tuple(view.pods)
        pods = {key: view.pods[key] for key in keys if key in view.pods}
        for pod in self._unwatched.pods(view):
            pods[pod_key(pod)] = pod
        if extra is not None:
            pods[pod_key(extra)] = extra
        return list(pods.values())

    def _member(
        self, view: ClusterView, pod: dict[str, Any], context: tuple[object, ...]
    ) -> tuple[GangRef | None, Member | None]:
        """The pod's gang and its Member (affinity not yet worked out), reused while the pod, its
        claims and templates are the same objects and the classes, JobSets and PodGroups are equal."""
        namespace = pod["metadata"]["namespace"]
        references = (pod.get("spec") or {}).get("resourceClaims") or []
        claims = tuple(view.claims.get((namespace, name)) for name in pod_claim_names(pod).values() if name)
        templates = tuple(
            view.templates.get((namespace, r["resourceClaimTemplateName"]))
            for r in references
            if r.get("resourceClaimTemplateName")
        )
        key = pod_key(pod)
        known = self._members.get(key)
        if (
            known is not None
            and known.pod is pod
            and _same(known.claims, claims)
            and _same(known.templates, templates)
            and known.context == context
        ):
            known.valid_at = view.version
            return known.ref, known.member
        ref = self.gang(view, pod)
        member = None
        if ref is not None:
            member = Member(
                pod=f"{namespace}/{pod['metadata']['name']}",
                node=self.node_of(view, pod),
                demand=self.demand(view, pod, include_allocated=True),
                created=timestamp(pod["metadata"].get("creationTimestamp")),
                bound_at=_bound_at(pod),
                spec=pod.get("spec") or {},
                done=(pod.get("status") or {}).get("phase") == "Succeeded",
                part=ref.part,
            )
        deps = frozenset(
            [("resourceclaims", (namespace, name)) for name in pod_claim_names(pod).values() if name]
            + [
                ("resourceclaimtemplates", (namespace, r["resourceClaimTemplateName"]))
                for r in references
                if r.get("resourceClaimTemplateName")
            ]
        )
        self._members.put(key, _Known(pod, claims, templates, context, ref, member, deps, view.version))
        return ref, member

    def gangs(self, view: ClusterView, extra: dict[str, Any] | None = None) -> list[Gang]:
        """Every gang with its members. A member is worked out again only when its pod, claims or
        templates changed (see `_member`), so a plan after an unrelated event costs a look-up per
        gang pod; the cache holds only the pods of this pass (those of deleted pods are dropped).
        When the view's journal reaches back to the last pass, a member found valid then whose
        claims and templates it does not name is taken as it is, without comparing them."""
        with self._gangs_lock:
            gangs = self._last_gangs = self._gangs(view, extra)
            self._gangs_at = self._deps_at = view.version
            self._unjournaled_at = view.unjournaled_version
            return gangs

    def _journal_stale(self, view: ClusterView) -> set[tuple[str, tuple[str, str]]] | None:
        changes = view.changes(self._gangs_at) if self._gangs_at >= 0 else None
        return None if changes is None else {c for c in changes if c[0] not in ("node", "usage")}

    def _gangs(self, view: ClusterView, extra: dict[str, Any] | None) -> list[Gang]:
        candidates = self._candidates(view, extra)
        self._members.capacity = max(self.MEMBER_CACHE_MIN, 2 * len(candidates))
        self._candidate_keys = {pod_key(pod) for pod in candidates}
        self._members.retain(self._candidate_keys)  # deleted pods (and plain ones asked before)
        deps: set[tuple[str, tuple[str, str]]] = set()
        # Inter-pod affinity needs the placed pods only when some pod has (anti-)affinity terms.
        affinity_matters = view.affinity_pods is None or bool(view.affinity_pods)
        placed = self.placed_pods(view) if affinity_matters else None
        context = (
            tuple(sorted(view.classes.items())),
            tuple(sorted(view.jobsets.items())),
            tuple(sorted(view.pod_group_min.items())),
            None if view.native_groups is None else tuple(sorted(view.native_groups.items())),
        )
        if context == self._context:
            context = self._context
        self._context = context
        stale = self._journal_stale(view)
        since = self._gangs_at
        gangs: dict[str, Gang] = {}
        for pod in candidates:
            phase = (pod.get("status") or {}).get("phase")
            if phase == "Failed" or pod["metadata"].get("deletionTimestamp"):
                continue  # gone for good; its controller creates a replacement if one is needed
            known = self._members.get(pod_key(pod)) if stale is not None else None
            if (
                known is not None
                and stale is not None
                and known.pod is pod
                and known.valid_at == since
                and known.context is context
                and stale.isdisjoint(known.deps)
            ):
                known.valid_at = view.version
                ref, member = known.ref, known.member
            else:
                ref, member = self._member(view, pod, context)
            if ref is None or member is None:
                continue
            worked_out = self._members.get(pod_key(pod))
            if worked_out is not None:
                deps |= worked_out.deps
            affinity = placed.of(pod) if placed is not None else ANY_NODE
            if member.affinity != affinity:
                member = replace(member, affinity=affinity)
                known = self._members.get(pod_key(pod))
                if known is not None and known.pod is pod:  # the same Member object next time
                    known.member = member
            gangs.setdefault(ref.key, Gang(ref)).members.append(member)
        self._member_deps = deps
        return list(gangs.values())

    def plan(self, view: ClusterView, pod: dict[str, Any] | None, now: float) -> ClusterPlan:
        """The plan of every gang at this view. `pod` is the pod being asked about: one that may
        join a gang is planned with its gang even before the watches deliver it; any other pod
        changes no gang's plan, so it is left out (and one plan answers every such pod)."""
        extra = pod if pod is not None and may_belong_to_gang(pod) else None
        unwatched = self._unwatched.note(view, extra, now)
        cache_key = (view.version, None if extra is None else _body(view, extra), unwatched)
        with self._lock:
            cached = self._plan_cache
        if cached and cached[0] == cache_key and now < cached[1].valid_until:
            return cached[1]
        # One plan at a time. Under the GIL a plan made beside another only shares its CPU, so both
        # answers wait for both (a request's plan beside the background planner's took 45 ms
        # instead of 20 at 5,000 nodes); made after it, a plan starts from its memo and redoes only
        # what changed since, or finds it is the very plan it needs.
        waiting = time.monotonic()
        with self._planning:  # the wait counts: a hold may have ended meanwhile
            return self._plan_after(view, extra, cache_key, now + time.monotonic() - waiting)

    def _plan_after(
        self, view: ClusterView, extra: dict[str, Any] | None, cache_key: tuple[int, str | None, int], now: float
    ) -> ClusterPlan:
        """`plan`, with the planning lock held: from the last plan's memo, or from scratch."""
        with self._lock:
            cached = self._plan_cache
            if cached and cached[0] == cache_key and now < cached[1].valid_until:
                return cached[1]
            clocks, memo, memo_at = self._clocks, self._memo, self._memo_at
        changes = view.changes(memo_at) if memo is not None else None
        if cached is not None and cached[0][1:] == cache_key[1:] and now < cached[1].valid_until:
            with self._gangs_lock:
                unaffected = self._unaffected(view, changes, memo_at)
                if unaffected:
                    self._deps_at = view.version
            if unaffected:
                # Nothing any gang's plan reads changed since it was made (e.g. status updates of
                # pods outside gangs): the same plan answers at this version, without a pass over
                # the gang pods and gangs.
                with self._lock:
                    if self._newer(view.version):
                        self._plan_cache = (cache_key, cached[1], cached[2])
                        self._memo_at = view.version
                return cached[1]
        changed = None if changes is None else {key[1] for kind, key in changes if kind in ("node", "usage")}
        gangs = None
        if cached is not None and cached[0][1:] == cache_key[1:]:
            with self._gangs_lock:
                if self._gangs_unchanged(view, changes, memo_at):
                    # Only usage moved (a GPU freed or taken outside every gang): the members are as
                    # the last pass found them, so the pass over every gang pod is skipped.
                    gangs, self._deps_at = self._last_gangs, view.version
        # A plan from scratch builds its members, fits and plans in bulk (see extender.heap).
        with collector_paused() if memo is None else contextlib.nullcontext():
            if gangs is None:
                gangs = self.gangs(view, extra)
            # Room for every (node, gang) fit of one plan, so the next finds all those it did not change.
            wanted = 2 * len(view.nodes) * (len(gangs) + 1)
            self.matcher.fits.capacity = min(max(Matcher.FIT_CACHE_SIZE, wanted), self.FIT_CACHE_MAX)
            result = plan_cluster(
                view.nodes,
                view.usage,
                gangs,
                self.matcher,
                now=now,
                limits=self.limits,
                clocks=clocks,
                memo=memo,
                changed=changed,
            )
            if memo is None:
                # A plan from scratch (after the LIST, a restart) leaves hundreds of thousands of
                # objects (members, fits, plans) that later plans reuse: a full collection walking
                # them stalled a call for ~270 ms at 5,000 nodes. They are acyclic; refcounting frees
                # them. Frozen before the collector resumes, whose first pass would walk them all.
                freeze_survivors()
        with self._lock:
            if self._newer(view.version):  # a slower plan of an older view does not replace a newer one
                self._plan_cache = (cache_key, result, time.monotonic())
                self._clocks = result.clocks
                self._memo = result.memo
                self._memo_at = view.version
                self._log_changes(result)
        return result

    def _newer(self, version: int) -> bool:
        """Whether a plan of `version` may replace the cached one (the lock is held)."""
        return self._plan_cache is None or version >= self._plan_cache[0][0]

    def held_plan(self, view: ClusterView, now: float) -> tuple[ClusterPlan, bool]:
        """The plan a pod outside every gang is judged by, and whether it is older than `view`: the
        cached one while it is younger than `stale_plan_seconds` and only usage moved since (no gang
        member, claim, class or JobSet changed), else a plan of this view. Serving an older one
        wakes the background planner (`keep_fresh`)."""
        limit = self.config.stale_plan_seconds
        with self._lock:
            cached = self._plan_cache
        if cached is None or limit <= 0 or now >= cached[1].valid_until or time.monotonic() - cached[2] > limit:
            return self.plan(view, None, now), False
        version, _, unwatched = cached[0]
        if unwatched != self._unwatched.note(view, None, now):
            return self.plan(view, None, now), False
        if version == view.version:
            return cached[1], False
        with self._gangs_lock:
            usage_only = self._gangs_unchanged(view, view.changes(version), version)
        if not usage_only:
            return self.plan(view, None, now), False
        self.refresh_wanted.set()
        return cached[1], True

    def keep_fresh(self, views: Callable[[], ClusterView], stop: threading.Event) -> None:
        """The background planner: plans the newest view whenever an answer was served from an
        older plan, at most every `refresh_interval_seconds`. Runs until `stop` is set."""
        while True:
            woken = self.refresh_wanted.wait(timeout=1.0)
            if stop.is_set():
                return
            if not woken:
                continue
            self.refresh_wanted.clear()
            started = time.monotonic()
            try:
                self.plan(views(), None, time.time())
            except Exception:  # noqa: BLE001 - the planner thread must outlive one bad plan
                plan_log.exception("background plan failed; answers wait for a plan of their own")
            stop.wait(max(0.0, self.config.refresh_interval_seconds - (time.monotonic() - started)))

    def _unaffected(self, view: ClusterView, changes: set[tuple[str, tuple[str, str]]] | None, memo_at: int) -> bool:
        """Whether `changes` (since the memo's version `memo_at`) leave every gang as planned: its
        members as they were (`_gangs_unchanged`), and no node or usage changed."""
        return (
            changes is not None
            and not any(kind in ("node", "usage") for kind, _ in changes)
            and self._gangs_unchanged(view, changes, memo_at)
        )

    def _gangs_unchanged(
        self, view: ClusterView, changes: set[tuple[str, tuple[str, str]]] | None, memo_at: int
    ) -> bool:
        """Whether `changes` (since the memo's version `memo_at`) leave every gang's members as the
        last pass found them: no unjournaled kind (classes, JobSets, PodGroups), no gang pod or a pod
        that may join a gang, no claim or template a member was worked out from, and no pod,
        claim or node at all while some pod has inter-pod terms (a placed pod or a node's labels can
        then change a member). Usage changes leave members as they are."""
        if changes is None or view.unjournaled_version != self._unjournaled_at or self._deps_at != memo_at:
            return False
        affinity = view.affinity_pods is None or bool(view.affinity_pods)
        for kind, key in changes:
            if kind == "pods":
                pod = view.pods.get(key)
                if affinity or key in self._candidate_keys or (pod is not None and may_belong_to_gang(pod)):
                    return False
            elif kind in ("node", "usage"):
                if affinity and kind == "node":
                    return False
            elif kind not in ("resourceclaims", "resourceclaimtemplates") or (kind, key) in self._member_deps:
                return False
            elif affinity and kind == "resourceclaims":
                return False  # an allocation places a pod, which inter-pod terms count
        return True

    def _log_changes(self, result: ClusterPlan) -> None:
        """Each gang's plan once per change: planned ones at INFO, rejections at DEBUG."""
        logged = {}
        for key, plan in result.plans.items():
            last = self._logged.get(key)
            if last is not None and last[0] is plan:  # a plan reused from the memo: logged already
                logged[key] = last
                continue
            summary = _summary(plan)
            logged[key] = (plan, summary)
            if last is not None and last[1] == summary:
                continue
            if plan.feasible and plan.slots:
                nodes = ", ".join(sorted(plan.slots))
                plan_log.info("gang %s planned onto %s: %s (%s)", key, plan.domain, nodes, plan.reason)
            elif not plan.feasible:
                plan_log.debug("gang %s not placed: %s", key, plan.reason)
        self._logged = logged

    def filter(
        self, view: ClusterView, pod: dict[str, Any], names: list[str], now: float | None = None
    ) -> tuple[list[str], dict[str, str], str]:
        """(passing nodes, failed node -> reason, path taken for metrics).

        A pod outside a gang is judged on held capacity alone: the scheduler sends only the nodes
        that passed its own filters, inter-pod affinity among them. A gang member's nodes come from
        its gang's plan, which weighs every member's affinity, since the scheduler sees one at a time."""
        now = time.time() if now is None else now
        ref = self.gang(view, pod)
        demand = self.demand(view, pod)
        if ref is None and not demand.needs_devices:
            return names, {}, "fast"
        if ref is None and demand.unresolved:
            reason = f"waiting to see {', '.join(demand.unresolved)}"
            return [], dict.fromkeys(names, reason), RETRY
        if ref is None:
            return self._held_check(view, demand, names, now)
        cluster = self.plan(view, pod, now)
        placed = allocated_node(pod, view.claims, self.config.driver)
        if placed is not None:  # asked again after its claim was allocated: that node alone can take it
            reason = f"the claims of this pod are allocated on {placed}"
            return [n for n in names if n == placed], {n: reason for n in names if n != placed}, "gang"
        plan = cluster.plans[ref.key]
        if not plan.feasible:
            return [], dict.fromkeys(names, plan.reason), RETRY if plan.transient else "gang-rejected"
        slots = plan.part_slots.get(ref.part, plan.slots)  # a JobSet's Job: its own domain
        if not slots:  # nothing left to hold (e.g. all members bound): no restriction
            return names, {}, "gang"
        # kube-scheduler places a native PodGroup whole in one cycle against its own cache: the lag
        # of the extender's watches cannot split it, and a retry would only send the group to backoff.
        gone = [] if ref.source == NATIVE else self._taken_since(view, demand, slots, names)
        if gone and len(gone) > self._in_flight.others(ref.key, pod_key(pod), lambda key: self._is_placed(view, key)):
            self.refresh_wanted.set()
            reason = (
                f"gang {ref.key} is planned onto {', '.join(gone)}, where the scheduler finds no room for this "
                "pod any more (taken since the extender's watches last heard): not admitting a member before "
                "the whole gang fits"
            )
            return [], dict.fromkeys(names, reason), RETRY
        planned = sorted(slots)
        passing = [name for name in names if name in slots]
        if passing:
            self._in_flight.admit(pod_key(pod), ref.key)
        reason = f"gang {ref.key} is planned onto {plan.domain}: {', '.join(planned)}"
        return passing, {name: reason for name in names if name not in slots}, "gang"

    def _is_placed(self, view: ClusterView, key: tuple[str, str]) -> bool:
        return key in view.pods and self.node_of(view, view.pods[key]) is not None

    def _taken_since(self, view: ClusterView, demand: Demand, slots: Mapping[str, int], names: list[str]) -> list[str]:
        """Planned nodes the scheduler no longer offers although the extender's view says this pod
        fits there: the scheduler counts allocations it has made but the watches have not shown yet
        (pods placed a moment ago). More of them than the gang's own members in flight means a pod
        outside the gang took one: admitting a member then could strand half a gang. Only when the
        offer is every feasible node the scheduler found, not a sample of a large cluster."""
        if not complete_offer(len(names), len(view.nodes), self.config.percentage_of_nodes_to_score):
            return []
        offered = set(names)
        return sorted(
            name
            for name in slots
            if name not in offered
            and name in view.nodes
            and place(view.nodes[name], view.usage[name], demand, self.matcher) is not None
        )

    def _held_check(
        self, view: ClusterView, demand: Demand, names: list[str], now: float
    ) -> tuple[list[str], dict[str, str], str]:
        """A pod outside every gang fails only on nodes whose free devices are held for gangs. From
        an older plan (see `held_plan`) it may go onto capacity a gang was just planned onto, or be
        kept off a node whose hold just ended, but never off every node: refused everywhere, it is
        judged again by a plan of this view, so it is not parked as unschedulable by a stale plan."""
        cluster, older = self.held_plan(view, now)
        failed = _held_nodes(cluster, view, demand, names, self.matcher)
        if older and len(failed) == len(names):
            failed = _held_nodes(self.plan(view, None, now), view, demand, names, self.matcher)
        if not failed:
            return names, failed, "pass"
        return [name for name in names if name not in failed], failed, "held-check"

    def prioritize(self, view: ClusterView, pod: dict[str, Any], names: list[str]) -> dict[str, int]:
        demand = self.demand(view, pod)
        if not demand.requests:
            return {}  # no preference: an unlisted host scores 0 (see wire.encode_priorities)
        # A gang member is scored on real usage: the capacity held for its own gang is meant for it.
        usage = view.usage if self.gang(view, pod) else self.held_plan(view, time.time())[0].held
        known = self._scores.get(demand)
        if known is None or len(known) > 2 * len(view.nodes):
            known = {}
            self._scores.put(demand, known)
        scores = {}
        for name in names:
            node = view.nodes.get(name)
            if node is None:
                scores[name] = 0
                continue
            used = usage[name]
            cached = known.get(name)
            if cached is not None and cached[0] is node and cached[1] is used:
                scores[name] = cached[2]
                continue
            value = score(node, used, demand, self.matcher, self.config.weights)
            known[name] = (node, used, value)
            scores[name] = value
        return scores
