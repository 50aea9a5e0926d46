"""Preemption's I/O: the leading replica finds pods and gangs waiting for devices that lower-priority
pods hold, records the decision (extender.cluster.reservation), evicts the victims through the Eviction
API, and says so in events and metrics. The decision itself is extender.preempt.preemption_plan's.

Every eviction can be defended:
- Victims are pods by UID (the Lease records them): a pod recreated under a victim's name is
  another pod and is never evicted for that decision; each eviction carries the UID as precondition.
- Only the leader acts, and it proves it before each write (`LeaderLease.fence`): a replica that
  stalled (a pause, CPU starvation, a slow API server) and lost the lead meanwhile finds its renewal
  refused and drops its decision before evicting anything more.
- Whole or nothing: every victim is evicted as a dry run first, so a decision a budget (or anything
  else) refuses is dropped before the first pod goes; a refusal that comes later all the same
  withdraws what is left, and the next decision leaves that pod out for a while.

The Lease is written before the first eviction, so a replica that takes over mid-preemption finds
it and evicts what is left, never more: pods already being deleted count as gone. The Lease goes
once its preemptor is placed, gone, or has waited past the hold.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
import time
from collections.abc import Callable

from kubernetes import client

from extender.cluster.reservation import (
    ANNOTATIONS_LIMIT,
    Reservation,
    Victim,
    annotation_bytes,
    lease_body,
)
from extender.cluster.view import ClusterView
from extender.plan.holds import kept_from_preemptor
from extender.pods.demand import allocated_node
from extender.pods.facts import PodFacts
from extender.pods.keys import key_of
from extender.pods.model import Gang
from extender.preempt.duty import API_TIMEOUT_S, CONFLICT, NOT_FOUND, LeaderDuty
from extender.preempt.metrics import EVICTIONS, PREEMPTION_DECISIONS, PREEMPTION_SECONDS
from extender.preempt.preemption_plan import (
    Budget,
    Decision,
    NoHelp,
    Occupancy,
    Preemptor,
    gang_preemptor,
    pod_preemptor,
)
from extender.preempt.preemption_plan import decide as decide_preemption
from extender.preempt.victim_index import VictimIndex

log = logging.getLogger(__name__)
LEADER_LEASE = "nativedra-extender-preemption"
STEP_EVERY_S = 1.0
BLOCKED_FOR_S = 60.0  # a pod whose budget refused its eviction is left out of decisions this long
REPEAT_AFTER_S = 600.0  # the same "would not help" is told to a pod again after this long
JUDGE_AGAIN_S = 10.0  # a preemptor eviction would not help is judged again after this long
TOO_LARGE_AGAIN_S = 300.0  # a decision too large for its Lease is judged again after this long
BACK_OFF_S, BACK_OFF_MAX_S = 10.0, 300.0  # a decision the API did not record: its preemptor waits
# A preemptor its hold lapsed for, still unplaced: something its decision could not see keeps it out
# (a volume's node, a spread), so evicting again at once would evict for nothing. It waits, longer
# each time in a row, until it is placed.
LAPSED_BACK_OFF_S, LAPSED_BACK_OFF_MAX_S = 30.0, 1_800.0
COURTESY_S = 0.001  # a decision lets requests run at least this often
DRY_RUN = "All"


class EvictionRefusedError(Exception):
    """The API refused an eviction; the pod is left out of decisions for a while."""


def identity() -> str:
    return os.environ.get("NATIVEDRA_POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"


class Preemption(LeaderDuty):
    def __post_init__(self) -> None:
        super().__post_init__()
        self.hold_seconds = self.config.preemption_hold_seconds
        self._blocked: dict[str, float] = {}  # pod -> until (clock) it is left out
        self._told: dict[tuple[str, str], float] = {}  # (preemptor, message) -> when told
        # Preemptors eviction would not help, not judged again before then (a full cluster's
        # waiting gangs would otherwise be judged every step).
        self._unhelped: dict[str, float] = {}
        self._backed_off: dict[str, float] = {}  # preemptor -> its last back-off (s), while they fail in a row
        self._lapsed: dict[str, float] = {}  # preemptor -> its last back-off (s) after holds lapsed in a row
        self._index = VictimIndex(self.config.driver)  # who holds what, brought up to each view

    def run(self, stop: threading.Event) -> None:
        self.leader.lead(stop, self.step, "preemption", STEP_EVERY_S, lambda: True)

    def step(self) -> None:
        view = self.state.view()
        now = self.clock()
        gangs = {gang.ref.key: gang for gang in self.plans.gangs(view)}
        withdrawn = [r for r in list(view.reservations.values()) if self._tend(view, gangs, r, now)]
        if withdrawn:
            return  # this view still counts their devices as kept: decide on one without them
        waiting = [(p, pods) for p, pods in self._waiting(view, gangs, now) if self._unhelped.get(p.key, 0) <= now]
        if not waiting:
            return
        blocked = frozenset(pod for pod, until in self._blocked.items() if until > now)
        budgets = [Budget.from_api(pdb) for pdb in view.budgets.values()]
        admission, requested = self.state.node_room()
        cluster = self.plans.plan(view, None, now)
        seen: Occupancy | None = None
        for preemptor, pods in waiting:
            # Every hold kept from it (extender.plan.holds): evicting there frees nothing it may take.
            kept = kept_from_preemptor(view, cluster, preemptor.key, preemptor.priority, view.nodes)
            if seen is None or seen.kept != kept:
                seen = Occupancy.of(view, self.config.driver, kept, admission, requested, index=self._index)
            decision = decide_preemption(seen, preemptor, budgets, self.plans.matcher, blocked, pause=_courteous())
            if isinstance(decision, NoHelp):
                self._not_helpful(decision, pods, now)
                continue
            if self._start(view, decision, pods, now):
                return  # one at a time: the next step plans with its Lease in the view

    # -- who waits -----------------------------------------------------------------------------

    def _waiting(self, view: ClusterView, gangs: dict[str, Gang], now: float) -> list[tuple[Preemptor, list[PodFacts]]]:
        """Pods and gangs the scheduler found no node for, that may preempt and hold no devices
        kept for them yet: the highest priority first, then the oldest."""
        found: list[tuple[int, float, Preemptor, list[PodFacts]]] = []
        driver = self.config.driver
        for pod in view.pods.values():
            if not self._may_wait(pod) or pod.managed_by_kueue or view.gang_of(pod) is not None:
                continue
            if pod.name in view.reservations or allocated_node(pod, view.claims, driver) is not None:
                continue
            demand = view.demand_of(pod, driver)
            if demand.requests and not demand.unresolved:
                found.append((pod.priority, pod.created, pod_preemptor(pod, demand, view), [pod]))
        plans = self.plans.plan(view, None, now).plans if gangs else {}
        for gang_key, gang in gangs.items():
            plan = plans.get(gang_key)
            if gang_key in view.reservations or plan is None or plan.feasible or plan.transient or not gang.remaining:
                continue
            pods = [view.pods[key_of(m.pod)] for m in gang.members if key_of(m.pod) in view.pods]
            waiting = [pod for pod in pods if not pod.node]
            if not waiting or not any(pod.unschedulable for pod in waiting):
                continue
            if not all(pod.may_preempt and not pod.terminating and not pod.managed_by_kueue for pod in pods):
                continue
            priority = min(pod.priority for pod in pods)
            found.append((priority, min(p.created for p in pods), gang_preemptor(gang, view, priority), waiting))
        found.sort(key=lambda item: (-item[0], item[1], item[2].key))
        return [(preemptor, pods) for _, _, preemptor, pods in found]

    @staticmethod
    def _may_wait(pod: PodFacts) -> bool:
        return not pod.node and not pod.terminating and pod.may_preempt and pod.unschedulable

    # -- a decision ------------------------------------------------------------------------------

    def _start(self, view: ClusterView, decision: Decision, pods: list[PodFacts], now: float) -> bool:
        """Record the decision and evict its victims; False when it was not recorded and the
        next preemptor may be decided on (this one backs off)."""
        reservation = decision.reservation(now, self.hold_seconds)
        body = lease_body(reservation, self.leader.identity)
        size = annotation_bytes(body)
        if size > ANNOTATIONS_LIMIT:
            self._too_large(decision, pods, size, now)
            return False
        victims = self._covered_first(decision)
        try:
            self._dry_run(view, victims)
        except EvictionRefusedError:
            return True  # nothing was evicted; the next step decides without that pod
        timeout = self.leader.prove("recording a decision", API_TIMEOUT_S)
        try:
            created = self.leases.create_namespaced_lease(self.namespace, body, _request_timeout=timeout)
        except client.ApiException as error:
            if error.status == CONFLICT:
                return True  # decided already (another replica, or this one before a restart)
            self._back_off(decision.preemptor.key, now, f"its decision could not be recorded ({error.status})")
            return False
        self._backed_off.pop(decision.preemptor.key, None)
        reservation = dataclasses.replace(reservation, uid=created.metadata.uid or "")
        PREEMPTION_DECISIONS.labels("evicting").inc()
        nodes = ", ".join(sorted(decision.reserved))
        names = decision.evicted
        shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
        what = decision.preemptor.what
        message = f"preempting {len(names)} pod(s) of lower priority on {nodes} for {what}: {shown}"
        log.info("%s", message)
        for pod in pods:
            self.tell(pod, "Normal", "Preempting", message)
        self._evict(view, reservation, victims)
        return True

    def _too_large(self, decision: Decision, pods: list[PodFacts], size: int, now: float) -> None:
        """A decision its Lease cannot hold is never tried: nothing is dry-run or evicted for it."""
        self._unhelped[decision.preemptor.key] = now + TOO_LARGE_AGAIN_S
        PREEMPTION_DECISIONS.labels("too_large").inc()
        message = (
            f"preempting for {decision.preemptor.what} would evict {len(decision.evicted)} pod(s); its record "
            f"takes {size // 1024} KiB, over the {ANNOTATIONS_LIMIT // 1024} KiB a Lease's annotations may hold: "
            f"nothing is evicted, and it is judged again in {TOO_LARGE_AGAIN_S:.0f} s"
        )
        log.warning("%s", message)
        for pod in pods:
            self.tell(pod, "Warning", "PreemptionTooLarge", message)

    def _back_off(self, key: str, now: float, why: str) -> None:
        """A preemptor whose decision failed for a reason of the API's waits, longer each time in
        a row (BACK_OFF_S doubling up to BACK_OFF_MAX_S), while others are decided on."""
        delay = self._wait_longer(
            self._backed_off, key, now, back_off(self._backed_off.get(key), BACK_OFF_S, BACK_OFF_MAX_S)
        )
        log.warning("preemption for %s: %s; judged again in %.0f s", key, why, delay)

    def _wait_longer(self, streaks: dict[str, float], key: str, now: float, delay: float) -> float:
        """Record `delay` as `key`'s latest in `streaks` (bounded by the cluster) and keep it from
        preempting until then."""
        if len(streaks) > 4 * len(self.state.objects["pods"]) + 64:
            streaks.clear()
        streaks[key] = delay
        self._unhelped[key] = max(self._unhelped.get(key, 0.0), now + delay)
        return delay

    def _after_lapse(self, key: str, now: float) -> float:
        """How long a preemptor whose hold lapsed unplaced waits before it may preempt again."""
        return self._wait_longer(self._lapsed, key, now, lapsed_back_off(self._lapsed.get(key)))

    @staticmethod
    def _covered_first(decision: Decision) -> list[Victim]:
        """The victims, those a budget covers first: if one is refused, nothing else was evicted."""
        covered = {pod for unit in decision.victims if unit.budgets for pod in unit.pods}
        return sorted(decision.identities, key=lambda victim: (victim.pod not in covered, victim.pod))

    @staticmethod
    def _target(view: ClusterView, victim: Victim) -> PodFacts | None:
        """The victim's pod if it is still there, that very pod, and not going already."""
        pod = view.pods.get(key_of(victim.pod))
        if pod is None or pod.terminating:
            return None  # gone or going: counted as free already
        if not victim.uid or pod.uid != victim.uid:
            return None  # another pod of that name (or a victim recorded without UID): never a victim
        return pod

    def _eviction(self, victim: Victim, *, dry_run: bool, timeout_s: float = API_TIMEOUT_S) -> None:
        namespace, name = key_of(victim.pod)
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": {"preconditions": {"uid": victim.uid}, **({"dryRun": [DRY_RUN]} if dry_run else {})},
        }
        extra = {"dry_run": DRY_RUN} if dry_run else {}
        self.core.create_namespaced_pod_eviction(name, namespace, body, _request_timeout=timeout_s, **extra)

    def _dry_run(self, view: ClusterView, victims: list[Victim]) -> None:
        """Every victim evicted as a dry run: the API's budgets and checks say no before any goes."""
        for victim in victims:
            if self._target(view, victim) is None:
                continue
            try:
                self._eviction(victim, dry_run=True)
            except client.ApiException as error:
                if error.status in (NOT_FOUND, CONFLICT):
                    continue  # gone, or replaced: the real eviction passes it over as well
                self._refused(victim, error, "a dry run of its eviction")
                raise EvictionRefusedError(victim.pod) from error

    def _refused(self, victim: Victim, error: client.ApiException, what: str) -> None:
        EVICTIONS.labels("blocked").inc()
        now = self.clock()  # expired entries go as one is added: bounded by the last minute's refusals
        self._blocked = {pod: until for pod, until in self._blocked.items() if until > now}
        self._blocked[victim.pod] = now + BLOCKED_FOR_S
        log.info("%s of %s refused (%s %s): deciding again without it", what, victim.pod, error.status, error.reason)

    def _evict(self, view: ClusterView, reservation: Reservation, victims: list[Victim]) -> None:
        for victim in victims:
            pod = self._target(view, victim)
            if pod is None:
                continue
            refusal = not_a_victim(pod, reservation)
            if refusal is not None:
                log.warning("%s is not evicted for %s: %s", victim.pod, reservation.what, refusal)
                continue
            timeout = self.leader.prove(f"evicting {victim.pod}", API_TIMEOUT_S)
            try:
                self._eviction(victim, dry_run=False, timeout_s=timeout)
            except client.ApiException as error:
                if error.status in (NOT_FOUND, CONFLICT):  # gone, or replaced by a pod of the same name
                    EVICTIONS.labels("gone").inc()
                    continue
                # Refused after its dry run passed (a budget spent meanwhile, a policy, two budgets):
                # what is left of the decision is dropped, not tried again every step.
                self._refused(victim, error, "the eviction")
                self.let_go(reservation, f"letting the preemption for {reservation.what} go")
                return
            EVICTIONS.labels("evicted").inc()
            nodes = ", ".join(sorted(set(reservation.nodes)))
            self.tell(
                pod,
                "Normal",
                "Preempted",
                f"Preempted by {reservation.what} (priority {reservation.priority}) to free devices on {nodes}",
            )

    def _not_helpful(self, decision: NoHelp, pods: list[PodFacts], now: float) -> None:
        self._unhelped[decision.preemptor.key] = now + JUDGE_AGAIN_S
        if len(self._unhelped) > 4 * len(self.state.objects["pods"]) + 64:  # bounded by the cluster
            self._unhelped = {k: v for k, v in self._unhelped.items() if v > now}
        if not decision.candidates:
            return  # nothing of lower priority holds devices: no preemption to speak of
        told = (decision.preemptor.key, decision.reason)
        if now - self._told.get(told, -REPEAT_AFTER_S) < REPEAT_AFTER_S:
            return
        self._told[told] = now
        if len(self._told) > 4 * len(self.state.objects["pods"]) + 64:  # bounded by the cluster
            self._told = {told: now}
        PREEMPTION_DECISIONS.labels("not_helpful").inc()
        for pod in pods:
            self.tell(pod, "Normal", "PreemptionNotHelpful", decision.reason)

    # -- a decision under way ----------------------------------------------------------------------

    def _tend(self, view: ClusterView, gangs: dict[str, Gang], reservation: Reservation, now: float) -> bool:
        """Let a preemption go once its preemptor is placed, gone or past the hold; else evict what
        a replica that led before could not (it may have stopped between two evictions). True when
        it let one go."""
        pods = self._preemptor_pods(view, gangs, reservation)
        if pods and min(pod.priority for pod in pods) != reservation.priority:
            log.warning(
                "Lease %s says %s has priority %d, its pods %d: not the extender's decision, let go unevicted",
                reservation.lease,
                reservation.what,
                reservation.priority,
                min(pod.priority for pod in pods),
            )
            self.let_go(reservation, f"letting the Lease {reservation.lease} go")
            return True
        driver = self.config.driver
        placed = [pod for pod in pods if pod.node or allocated_node(pod, view.claims, driver)]
        gang = gangs.get(reservation.preemptor)
        done = not pods or (gang.remaining == 0 if gang is not None else len(placed) == len(pods))
        if done:
            if pods:
                PREEMPTION_SECONDS.observe(max(0.0, now - reservation.created))
                log.info("%s placed %.1f s after preempting", reservation.what, now - reservation.created)
            self._lapsed.pop(reservation.preemptor, None)
            self.let_go(reservation, f"letting the preemption for {reservation.what} go")
            return True
        if now >= reservation.expires:
            delay = self._after_lapse(reservation.preemptor, now)
            message = (
                f"devices freed by preemption were kept {self.hold_seconds} s for {reservation.what}, "
                f"which was not placed meanwhile: they are let go, and nothing is preempted for it for "
                f"{delay:.0f} s (longer each time in a row until it is placed)"
            )
            log.info("%s", message)
            for pod in pods:
                self.tell(pod, "Warning", "PreemptionExpired", message)
            self.let_go(reservation, f"letting the preemption for {reservation.what} go")
            return True
        self._evict(view, reservation, list(reservation.victims))
        return False

    @staticmethod
    def _preemptor_pods(view: ClusterView, gangs: dict[str, Gang], reservation: Reservation) -> list[PodFacts]:
        gang = gangs.get(reservation.preemptor)
        names = [m.pod for m in gang.members] if gang is not None else [reservation.preemptor]
        return [view.pods[key_of(name)] for name in names if key_of(name) in view.pods]


def back_off(previous: float | None, first: float, most: float) -> float:
    """`first`, then twice the previous wait each time in a row, never more than `most`."""
    return first if previous is None else min(most, 2 * previous)


def lapsed_back_off(previous: float | None) -> float:
    """The wait after a hold lapsed unplaced: LAPSED_BACK_OFF_S, doubling each time in a row."""
    return back_off(previous, LAPSED_BACK_OFF_S, LAPSED_BACK_OFF_MAX_S)


def not_a_victim(pod: PodFacts, reservation: Reservation) -> str | None:
    """Why a pod its decision names may not be evicted now, re-checked before each eviction (a
    decision is read from a Lease, which outlives the view it was made on): only a pod of lower
    priority than the preemptor's, on a node the decision keeps, is evicted for it."""
    if pod.priority >= reservation.priority:
        return f"its priority {pod.priority} is not lower than the preemptor's {reservation.priority}"
    if pod.node not in reservation.nodes:
        return f"it runs on {pod.node or 'no node'}, none of the nodes the decision keeps"
    return None


def _courteous(every_s: float = COURTESY_S) -> Callable[[], None]:
    """A pause that hands the interpreter to the request threads whenever the decision has held it
    `every_s`: a decision over hundreds of nodes must not add its length to filter calls' latency."""
    last = time.monotonic()

    def pause() -> None:
        nonlocal last
        if time.monotonic() - last >= every_s:
            time.sleep(0)  # releases the GIL: a waiting request thread takes it
            last = time.monotonic()

    return pause
