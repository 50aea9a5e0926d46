"""Filter and prioritize answers from a cluster view and the current plan. No I/O: the app feeds it
a view; planning is extender.plan.current's, membership extender.cluster.membership's."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection, Mapping
from typing import Any

from extender.cluster.membership import node_of, sources_of
from extender.cluster.reservation import Reservation
from extender.cluster.view import ClusterView
from extender.devices.cel_eval import Selectors
from extender.devices.lru import LruCache
from extender.devices.node_usage import Usage
from extender.plan.capacity import Matcher, place
from extender.plan.config import ExtenderConfig
from extender.plan.current import CurrentPlan
from extender.plan.holds import kept_for_return, refused, refused_where_freed
from extender.plan.in_flight import InFlight, complete_offer
from extender.plan.node_groups import NodeGroups
from extender.plan.score_memo import Answer, Scorer, asks_of, moved
from extender.pods.asked import Asked, ask
from extender.pods.demand import Demand
from extender.pods.facts import PodFacts, facts_of
from extender.pods.gang import NATIVE, GangRef

log = logging.getLogger(__name__)

# The path of an answer that depends on an object the watches have not delivered yet (a claim
# template, a JobSet): the app answers it as an extender error, which the scheduler retries after
# a short backoff, instead of a rejection, which parks the pod until some cluster event (up to
# 5 minutes when none comes).
RETRY = "retry"


class Decider:
    SCORE_DEMANDS = 16  # demands whose node scores are remembered, at most

    def __init__(
        self, config: ExtenderConfig, matcher: Matcher | None = None, plans: CurrentPlan | None = None
    ) -> None:
        """`matcher` and `plans` are shared with preemption where the command line wires both."""
        self.config = config
        self.matcher = matcher or Matcher(Selectors(), config.driver)
        self.plans = plans or CurrentPlan(config, self.matcher)
        self._in_flight = InFlight()  # gang members admitted and not yet shown placed (extender.plan.in_flight)
        # What a demand asks besides its selectors (`asks_of`) -> (shape of the devices its selectors
        # match on a node, id of the usage) -> (usage, score): a score is read from those alone, so
        # one serves every node built and used alike, and every demand whose selectors match the
        # same devices there (two teams' templates selecting the same GPUs by other attributes). At
        # most SCORE_DEMANDS such asks (least recently used out), each at most twice the view's
        # nodes (cleared past that).
        self._shared_scores: LruCache[object, dict[tuple[object, ...], tuple[Usage, int]]] = LruCache(
            self.SCORE_DEMANDS
        )
        # demand -> its last answer, what `prioritize` starts the next one from. Bounded the same way.
        self._answers: LruCache[Demand, Answer] = LruCache(self.SCORE_DEMANDS)
        self._groups = NodeGroups()  # a new demand's first scores, by node model and usage
        self.warm = threading.Event()  # set by `warm_up`: the process reports ready from then on

    def warm_up(self, view: ClusterView) -> None:
        """What the first call after the LIST would otherwise pay (1.6 s at 10,000 nodes): every
        node's model and allocation count, the first plan, and the nodes' groups. Run before the process reports
        ready, so a restarted replica takes no call it would answer that slowly. Ready even if
        the plan fails: a call plans again, as it would have without this."""
        try:
            for node in view.nodes.values():
                node.work_out()
            self.plans.plan(view, None, time.time())
            self._groups.follow(view)
        except Exception:
            log.exception("the first plan failed; calls plan for themselves")
        finally:
            self.warm.set()

    def demand(self, view: ClusterView, pod: PodFacts | dict[str, Any]) -> Demand:
        return view.demand_of(facts_of(pod), self.config.driver)

    def gang(self, view: ClusterView, pod: PodFacts | dict[str, Any]) -> GangRef | None:
        return view.gang_of(facts_of(pod))

    def _ask(self, view: ClusterView, pod: PodFacts | dict[str, Any]) -> Asked:
        """The asked pod's gang, demand and placement, in one pass over what the view holds."""
        return ask(pod, view.claims, view.templates, sources_of(view, self.config.driver))

    def filter(
        self, view: ClusterView, asked: PodFacts | dict[str, Any], names: list[str], now: float | None = None
    ) -> tuple[list[str], dict[str, str], str]:
        """(passing nodes, failed node -> reason, path taken for metrics).

        A pod outside a gang is judged on held capacity alone: the scheduler sends only the nodes
        that passed its own filters, inter-pod affinity among them. A gang member's nodes come from
        its gang's plan, which weighs every member's affinity, since the scheduler sees one at a time."""
        now = time.time() if now is None else now
        found = self._ask(view, asked)
        pod, ref, demand = found.pod, found.gang, found.demand
        if ref is None and not demand.needs_devices:
            return names, {}, "fast"
        if ref is None and demand.unresolved:
            reason = f"waiting to see {', '.join(demand.unresolved)}"
            return [], dict.fromkeys(names, reason), RETRY
        reservation = view.reservations.get(ref.key if ref is not None else pod.name)
        if (
            reservation is not None
            and reservation.holds
            and not self._refused_where_freed(view, found, reservation, names)
        ):
            return self._preempting(found.placed, reservation, names)  # a lapsed one pins it to nothing
        if ref is None:
            return self._held_check(view, demand, names, now, pod.priority)
        cluster = self.plans.plan(view, pod, now)
        placed = found.placed
        if placed is not None:  # asked again after its claim was allocated: that node alone can take it
            reason = f"the claims of this pod are allocated on {placed}"
            return [n for n in names if n == placed], {n: reason for n in names if n != placed}, "gang"
        plan = cluster.plans[ref.key]
        if not plan.feasible:
            # A refusal where a returning gang's nodes are kept is retried after the scheduler's
            # backoff instead of parking the pod until some event.
            retry = plan.transient or kept_for_return(view, cluster, names, ref.key)
            return [], dict.fromkeys(names, plan.reason), RETRY if retry else "gang-rejected"
        slots = plan.part_slots.get(ref.part, plan.slots)  # a JobSet's Job: its own domain
        if not slots and plan.confine is not None:  # an elastic gang grows in its domain alone
            reason = f"gang {ref.key} has its minimum placed in {plan.domain}: more members go there only"
            return [n for n in names if n in plan.confine], {n: reason for n in names if n not in plan.confine}, "gang"
        if not slots:  # nothing left to hold (e.g. all members bound): no restriction
            return names, {}, "gang"
        # kube-scheduler places a native PodGroup whole in one cycle against its own cache: the lag
        # of the extender's watches cannot split it, and a retry would only send the group to backoff.
        gone = [] if ref.source == NATIVE else self._taken_since(view, demand, slots, names)
        if gone and len(gone) > self._in_flight.others(ref.key, pod.key, lambda key: self._is_placed(view, key)):
            self.plans.refresh_wanted.set()
            reason = (
                f"gang {ref.key} is planned onto {', '.join(gone)}, where the scheduler finds no room for this "
                "pod any more (taken since the extender's watches last heard): not admitting a member before "
                "the whole gang fits"
            )
            return [], dict.fromkeys(names, reason), RETRY
        planned = sorted(slots)
        passing = [name for name in names if name in slots]
        if passing:
            self._in_flight.admit(pod.key, ref.key)
        reason = f"gang {ref.key} is planned onto {plan.domain}: {', '.join(planned)}"
        return passing, {name: reason for name in names if name not in slots}, "gang"

    @staticmethod
    def _preempting(
        placed: str | None, reservation: Reservation, names: list[str]
    ) -> tuple[list[str], dict[str, str], str]:
        """A preemptor goes where its devices are kept (or, once its claim is allocated, there)."""
        nodes = {placed} if placed is not None else set(reservation.nodes)
        reason = (
            f"devices on {', '.join(sorted(nodes))} are being freed for {reservation.what}: "
            f"{len(reservation.victims)} pod(s) of lower priority preempted"
        )
        return [n for n in names if n in nodes], {n: reason for n in names if n not in nodes}, "preempting"

    def _refused_where_freed(self, view: ClusterView, found: Asked, reservation: Reservation, names: list[str]) -> bool:
        """The preemptor is pinned to its kept nodes no longer once the scheduler, offering every
        feasible node, refuses it on all of them with its devices free there (extender.plan.holds)."""
        if found.placed is not None or not complete_offer(
            len(names), len(view.nodes), self.config.percentage_of_nodes_to_score
        ):
            return False
        return refused_where_freed(view, reservation, found.demand, names, self.matcher)

    def _is_placed(self, view: ClusterView, key: tuple[str, str]) -> bool:
        return key in view.pods and node_of(view.pods[key], view.claims, self.config.driver) is not None

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
        self, view: ClusterView, demand: Demand, names: list[str], now: float, priority: int = 0
    ) -> tuple[list[str], dict[str, str], str]:
        """A pod outside every gang fails only on nodes whose free devices are held for gangs. From
        an older plan (see `held_plan`) it may go onto capacity a gang was just planned onto, or be
        kept off a node whose hold just ended, but never off every node: refused everywhere, it is
        judged again by a plan of this view, so it is not parked as unschedulable by a stale plan."""
        cluster, older = self.plans.held_plan(view, now)
        failed = refused(cluster, view, demand, names, self.matcher, priority=priority)
        if older and len(failed) == len(names):
            cluster = self.plans.plan(view, None, now)
            failed = refused(cluster, view, demand, names, self.matcher, priority=priority)
        if not failed:
            return names, failed, "pass"
        passing = [name for name in names if name not in failed]
        if not passing and kept_for_return(view, cluster, names):  # as for gangs
            return passing, failed, RETRY
        return passing, failed, "held-check"

    def prioritize(self, view: ClusterView, asked: PodFacts | dict[str, Any], names: list[str]) -> dict[str, int]:
        """Scores of `names`. The scheduler sends the same names for pod after pod while a watch
        event or two changes a node in between: only the names whose node or usage object changed
        since the demand's last answer are scored again (the rest are copied), so at 10,000 nodes a
        call costs one pass comparing objects, not one score lookup per node."""
        found = self._ask(view, asked)
        ref, demand = found.gang, found.demand
        if not demand.requests:
            return {}  # no preference: an unlisted host scores 0 (see wire.encode_priorities)
        # A gang member is scored on real usage: the capacity held for its own gang is meant for it.
        # Others on the plan's, which is the view's but where gangs hold capacity (`holders`).
        usage: Mapping[str, Usage] = view.usage
        differs: Collection[str] | None = ()
        if not ref:
            held = self.plans.held_plan(view, time.time())[0]
            usage = held.held
            differs = held.holders if held.made_on(view.usage) else None
        last = self._answers.get(demand)
        if last is None or last.names != names:
            scores = self._first_scores(view, usage, differs, demand, names)
        elif last.nodes is view.nodes and last.usage is usage:
            return last.scores
        else:
            scores = dict(last.scores)
            self._score(view, usage, demand, moved(names, view.nodes, last.nodes, usage, last.usage), scores)
        self._answers.put(demand, Answer(names, view.nodes, usage, scores))
        return scores

    def _first_scores(
        self,
        view: ClusterView,
        usage: Mapping[str, Usage],
        differs: Collection[str] | None,
        demand: Demand,
        names: list[str],
    ) -> dict[str, int]:
        """A demand's first answer for these names: by node group (`NodeGroups`) where nodes of one
        model score alike and `usage` is the view's but on the nodes `differs` names (None: not
        known), else node by node."""
        scorer = self._scorer(view, demand)
        if differs is not None and self.matcher.alike_by_model(demand):
            grouped = self._groups.scores(view, names, lambda name: scorer.value(name, view.usage[name]))
            if grouped is not None:
                scorer.fill(usage, [name for name in differs if name in grouped], grouped)
                return grouped
        scores: dict[str, int] = {}
        scorer.fill(usage, names, scores)
        return scores

    def _score(
        self, view: ClusterView, usage: Mapping[str, Usage], demand: Demand, names: list[str], scores: dict[str, int]
    ) -> None:
        self._scorer(view, demand).fill(usage, names, scores)

    def _scorer(self, view: ClusterView, demand: Demand) -> Scorer:
        asks = asks_of(demand)
        shared = self._shared_scores.get(asks)
        if shared is None or len(shared) > 2 * len(view.nodes):
            shared = {}
            self._shared_scores.put(asks, shared)
        return Scorer(view.nodes, demand, self.matcher, self.config.weights, shared)
