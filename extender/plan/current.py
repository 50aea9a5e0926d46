"""The extender's one current plan: made by one planner at a time, kept as one immutable
`PlanSnapshot`, and replaced whole. Requests and the background planner share it; a plan of an
older view never replaces a newer one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from extender.cluster.lag import Unwatched
from extender.cluster.membership import entries_of, gangs_of, placed_pods, sources_of, work_out
from extender.cluster.view import ClusterView
from extender.plan.capacity import Matcher
from extender.plan.config import ExtenderConfig
from extender.plan.incremental import IncrementalPlan, plan_incrementally
from extender.plan.planner import ClusterPlan
from extender.plan.snapshot import Depends, Kind, PlanInputs, PlanSnapshot, affinity_matters, classify, holding_of
from extender.pods.eligibility import PlacedPods
from extender.pods.facts import PodFacts, facts_of
from extender.pods.model import Gang, Plan, PlanLimits
from nativedra.base.gcutil.collector import built_in_bulk

plan_log = logging.getLogger("extender.plan")


def _body(view: ClusterView, pod: PodFacts) -> str | None:
    """What the pod being asked about adds to the view: nothing when the view holds this very pod
    (same uid and resourceVersion, or the same body); else a digest of the body, since anything
    in it (labels, claims, spec) can change the plan: two bodies with one name are two questions."""
    known = view.pods.get(pod.key)
    if known is not None:
        version = pod.obj["metadata"].get("resourceVersion")
        same_version = version and (pod.uid, version) == (known.uid, known.obj["metadata"].get("resourceVersion"))
        if same_version or known.obj == pod.obj:
            return None
    return hashlib.sha256(json.dumps(pod.obj, sort_keys=True, default=str).encode()).hexdigest()


def _summary(plan: Plan) -> tuple[object, ...]:
    return plan.feasible, plan.domain, tuple(sorted(plan.slots.items())), plan.reason


class CurrentPlan:
    FIT_CACHE_MAX = 1_000_000  # node fits remembered across plans, at most

    def __init__(self, config: ExtenderConfig, matcher: Matcher) -> None:
        self.config = config
        self.matcher = matcher
        self.limits = PlanLimits(
            config.plan_timeout_seconds,
            config.plan_budget_seconds,
            config.max_gang_size,
            config.topology_levels,
            config.max_namespace_hold_share,
        )
        self.snapshot: PlanSnapshot | None = None  # replaced whole, only under `_planning`
        self._planning = threading.Lock()
        # Set when an answer came from a plan older than its view: wakes `keep_fresh`.
        self.refresh_wanted = threading.Event()
        self.unwatched = Unwatched()  # gang pods the scheduler asked about before the watches had them
        # What was last logged per gang, so a plan is logged when it changes.
        self._logged: dict[str, tuple[Plan, tuple[object, ...]]] = {}
        self._placed: tuple[int, PlacedPods] | None = None  # the last view's placed pods (inter-pod terms)

    def gangs(self, view: ClusterView, extra: PodFacts | dict[str, Any] | None = None) -> list[Gang]:
        """Every gang with its members as the view holds them, with the gang pods the scheduler asked
        about before the watches delivered them (`extra` among them)."""
        sources = sources_of(view, self.config.driver)
        asked = self.unwatched.pods(view) + ([facts_of(extra)] if extra is not None else [])
        extras = [work_out(pod, view.claims, view.templates, sources) for pod in asked]
        return gangs_of(entries_of(view, sources), extras, self._placed_pods(view) if affinity_matters(view) else None)

    def _placed_pods(self, view: ClusterView) -> PlacedPods:
        cached = self._placed
        if cached is not None and cached[0] == view.version:
            return cached[1]
        placed = placed_pods(view, self.config.driver)
        self._placed = (view.version, placed)
        return placed

    def plan(self, view: ClusterView, pod: PodFacts | dict[str, Any] | None, now: float) -> ClusterPlan:
        """The plan of every gang at this view. `pod` is the pod being asked about: one that may
        join a gang is planned with its gang even before the watches deliver it; any other pod
        changes no gang's plan, so it is left out (and one plan answers every such pod)."""
        asked = None if pod is None else facts_of(pod)
        extra = asked if asked is not None and asked.may_join_gang else None
        inputs = PlanInputs(None if extra is None else _body(view, extra), self.unwatched.note(view, extra, now))
        found = self._answers(self.snapshot, view, inputs, now)
        if found is not None:
            return found
        # One plan at a time. Under the GIL a plan made beside another only shares its CPU, so both
        # answers wait for both; made after it, a plan starts from its memo and redoes only what
        # changed since, or finds it is the very plan it needs.
        waiting = time.monotonic()
        with self._planning:  # the wait counts: a hold may have ended meanwhile
            return self._plan_locked(view, extra, inputs, now + time.monotonic() - waiting)

    @staticmethod
    def _answers(
        snapshot: PlanSnapshot | None, view: ClusterView, inputs: PlanInputs, now: float
    ) -> ClusterPlan | None:
        """The snapshot's plan when it was made for this very view and inputs and no hold has ended."""
        if (
            snapshot is not None
            and (snapshot.version, snapshot.inputs) == (view.version, inputs)
            and now < snapshot.plan.valid_until
        ):
            return snapshot.plan
        return None

    def _plan_locked(self, view: ClusterView, extra: PodFacts | None, inputs: PlanInputs, now: float) -> ClusterPlan:
        last = self.snapshot
        found = self._answers(last, view, inputs, now)
        if found is not None:
            return found
        change = None if last is None else classify(last, view)
        # Another pod asked about (or the gang pods asked about before the watches) changes members.
        kind = Kind.MEMBERS if last is None or change is None or last.inputs != inputs else change.kind
        if last is not None and kind is Kind.SAME and now < last.plan.valid_until:
            # Nothing any gang's plan reads changed since it was made (e.g. status updates of pods
            # outside gangs): the same plan answers at this version.
            if view.version >= last.version:
                self.snapshot = PlanSnapshot(view.version, inputs, last.plan, last.gangs, last.depends, last.made_at)
            return last.plan
        # Only usage moved (a GPU freed or taken outside every gang), or nothing did and a hold has
        # ended: the same gangs. Either way only the nodes that moved are compared with the memo.
        gangs = last.gangs if last is not None and kind is not Kind.MEMBERS else None
        # Kept devices of returning gangs changed: what each gang is given back differs, which the
        # memo's reuse (by usage objects) cannot see; planned from scratch (rare: after a failure).
        reusable = last is not None and last.depends.holding == holding_of(view, last.depends.kept_for_lost)
        changed = None if change is None else change.nodes
        scratch = last is None
        # A plan from scratch (after the LIST, a restart) builds hundreds of thousands of objects
        # (members, fits, plans) that later plans reuse: a full collection walking them stalled a
        # call for ~270 ms at 5,000 nodes. They are acyclic (refcounting frees them), so they are
        # built in bulk (see nativedra.base.gcutil.collector).
        with built_in_bulk() if scratch else contextlib.nullcontext():
            if gangs is None:
                gangs = self.gangs(view, extra)
            # Room for every (node, gang) fit of one plan in the young half of the cache, so the next
            # plan finds all those it did not change.
            wanted = 2 * len(view.nodes) * (len(gangs) + 1)
            self.matcher.fits.capacity = min(max(Matcher.FIT_CACHE_SIZE, wanted), self.FIT_CACHE_MAX)
            result = plan_incrementally(
                view.nodes,
                view.usage,
                gangs,
                self.matcher,
                now=now,
                limits=self.limits,
                clocks=None if last is None else last.plan.clocks,
                memo=last.plan.memo
                if last is not None and reusable and isinstance(last.plan, IncrementalPlan)
                else None,
                changed=changed,
                returns=view.returns,
            )
        if last is None or view.version >= last.version:
            self.snapshot = PlanSnapshot(
                view.version, inputs, result, gangs, Depends.of(view, result.kept_for_lost), time.monotonic()
            )
            self._log_changes(result)
        return result

    def held_plan(self, view: ClusterView, now: float) -> tuple[ClusterPlan, bool]:
        """The plan a pod outside every gang is judged by, and whether it is older than `view`: the
        current one while it is younger than `stale_plan_seconds` and only usage moved since (no gang
        member, claim, class or JobSet changed), else a plan of this view. Serving an older one
        wakes the background planner (`keep_fresh`)."""
        limit = self.config.stale_plan_seconds
        last = self.snapshot
        if (
            last is None
            or limit <= 0
            or now >= last.plan.valid_until
            or time.monotonic() - last.made_at > limit
            or last.inputs.unwatched != self.unwatched.note(view, None, now)
        ):
            return self.plan(view, None, now), False
        if last.version == view.version:
            return last.plan, False
        if classify(last, view).kind is Kind.MEMBERS:
            return self.plan(view, None, now), False
        self.refresh_wanted.set()
        return last.plan, True

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
