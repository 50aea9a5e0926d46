"""Return records' I/O. The leading replica records where each gang runs whole, marks the record
vacated when the gang loses members (a fault evicted one, its JobSet restarts, its LWS group is
recreated), and lets it go when the gang is whole again, has finished, or is not back within the
hold; events and metrics say so. Records are Leases in the extender's namespace
(extender.cluster.reservation), watched by every replica, so a restarted replica or another one
answers the returning gang the same. Only the leader writes, proving it before each write."""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
from collections import Counter
from collections.abc import Callable

from kubernetes import client

from extender.cluster.reservation import ANNOTATIONS_LIMIT, Reservation, Reserved, annotation_bytes, lease_body
from extender.cluster.state import NATIVE_KINDS
from extender.cluster.view import ClusterView
from extender.plan.holds import recorded
from extender.pods.keys import key_of
from extender.pods.model import Gang
from extender.preempt.duty import API_TIMEOUT_S, CONFLICT, NOT_FOUND, LeaderDuty
from extender.recover.metrics import GANG_RECOVERY_SECONDS, GANG_RETURNS, GANGS_VACATED, count_held
from extender.recover.records import (
    RETURNING_SOURCES,
    Step,
    choose_spares,
    expects_return,
    members_of,
    next_step,
    outcome,
    owner,
    per_node_demand,
    placed_usage,
    record,
    spare_usage,
    spares_asked,
    vacated,
    whole,
)
from nativedra.base.kube.resources import LEADER_WORKER_SETS

log = logging.getLogger(__name__)
LEADER_LEASE = "nativedra-extender-returns"
STEP_EVERY_S = 1.0
SPARES_LOOK_EVERY_S = 10.0
BACK_OFF_S, BACK_OFF_MAX_S = 2.0, 300.0  # a gang whose record the API refused waits, doubling each time
# Listed before the first step, records being judged on them: the Leases themselves, and every kind
# that says whether a gang's owner still exists (a kind the server does not serve counts as listed).
WATCHED = ("pods", "resourceclaims", "preemptions")
OWNERS = ("jobsets", "podgroups", *NATIVE_KINDS)


class RecordTooLargeError(Exception):
    """A return record its Lease cannot hold: never sent, the gang backs off."""


class Returns(LeaderDuty):
    """The leader's loop over return records (see the module docstring)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        # Per gang short of the spares it asks for: when the cluster was last searched for more.
        self._looked: dict[str, float] = {}
        # Per gang whose record could not be written: until when it waits, and how long it waited.
        self._backed_off: dict[str, tuple[float, float]] = {}

    @property
    def hold_seconds(self) -> int:
        return self.config.return_hold_seconds

    def run(self, stop: threading.Event) -> None:
        self.leader.lead(stop, self.step, "gang returns", STEP_EVERY_S, self._listed)

    def _listed(self) -> bool:
        return self.state.listed(*WATCHED) and self.state.settled(*OWNERS)

    def step(self) -> None:
        """Tend every record, then record every gang that runs whole and has none."""
        view = self.state.view()
        now = self.clock()
        gangs = {gang.ref.key: gang for gang in self.plans.gangs(view)}
        self._backed_off = {k: v for k, v in self._backed_off.items() if k in gangs or k in view.returns}
        for key, kept in list(view.returns.items()):
            self._each(key, now, functools.partial(self._tend, view, gangs.get(key), kept, now))
        count_held(recorded(view))
        if not self.hold_seconds:
            return  # returns off: records left from before are let go, none is written
        for key, gang in gangs.items():
            if key not in view.returns and gang.ref.source in RETURNING_SOURCES and whole(gang):
                self._each(key, now, functools.partial(self._record, view, gang, now, None))

    def _each(self, key: str, now: float, act: Callable[[], None]) -> None:
        """One gang's record: a refusal for it does not hold up the others, and it backs off (a
        record the API refuses is not searched for and sent again every step)."""
        until, waited = self._backed_off.get(key, (0.0, 0.0))
        if until > now:
            return
        try:
            act()
        except (client.ApiException, RecordTooLargeError) as error:
            delay = BACK_OFF_MAX_S if isinstance(error, RecordTooLargeError) else max(BACK_OFF_S, 2 * waited)
            self._backed_off[key] = (now + min(delay, BACK_OFF_MAX_S), min(delay, BACK_OFF_MAX_S))
            why = str(error) if isinstance(error, RecordTooLargeError) else f"{error.status} {error.reason}"
            log.warning("return record of gang %s: %s; tried again in %.0f s", key, why, min(delay, BACK_OFF_MAX_S))
            return
        self._backed_off.pop(key, None)

    def _tend(self, view: ClusterView, gang: Gang | None, kept: Reservation, now: float) -> None:
        key = kept.preemptor
        if not self.hold_seconds:
            self._delete(kept, "gang returns are off (returnHoldSeconds 0)")
            return
        members = members_of(view, gang) if gang is not None else ""
        step = next_step(kept, gang, expects_return(view, key), now, members)
        if step is Step.RECORD and gang is not None:
            self._record(view, gang, now, kept)
        elif step is Step.VACATE:
            if self._owner_exists(key):
                self._vacate(view, kept, now)
            else:
                self._delete(kept, f"gang {key} lost members and its LeaderWorkerSet is gone")
        elif step is Step.RETURNED and gang is not None:
            self._returned(view, gang, kept, now)
        elif step is Step.FINISHED:
            self._delete(kept, f"gang {key} finished")
        elif step is Step.GONE:
            self._delete(kept, f"gang {key} is not coming back: its owner is gone or suspended")
        elif step is Step.EXPIRED:
            GANG_RETURNS.labels("expired").inc()
            self._delete(kept, f"gang {key} was not whole again within {self.hold_seconds} s")
            for member in gang.members if gang is not None else []:
                self._event(
                    view,
                    member.pod,
                    "GangReturnExpired",
                    f"the nodes gang {key} ran on were kept for it {self.hold_seconds} s after it lost members; "
                    "it was not whole again in time, so they were let go and it is planned anew",
                )

    def _record(self, view: ClusterView, gang: Gang, now: float, earlier: Reservation | None) -> None:
        """Write where the running gang is, unless a record that keeps nothing says so already (a
        vacated one is always rewritten: its gang is back). Compared by pods and nodes first: most
        steps find most gangs where their record says, and read no claim. Spares it asks for and
        lacks are looked for again each step, written only once one is found."""
        members = members_of(view, gang)
        asked, error = spares_asked(view, gang, self.config.spares)
        if earlier is not None and earlier.running and earlier.members == members:
            slots = Counter(member.node for member in gang.placed if member.node in view.nodes)
            ran = {name: reserved for name, reserved in earlier.nodes.items() if reserved.slots}
            if {name: reserved.slots for name, reserved in ran.items()} == dict(slots) and (
                len(earlier.spares) == asked
                or (
                    len(earlier.spares) < asked
                    and (
                        not self._look_again(gang.ref.key, now)
                        or len(self._spares(view, gang, earlier, ran, asked)[0]) <= len(earlier.spares)
                    )
                )
            ):
                return
        placed = placed_usage(view, gang, self.config.driver)
        if not any(reserved.usage.devices or reserved.usage.counters for reserved in placed.values()):
            if earlier is not None:  # no devices of ours any more: nothing to come back to
                self._delete(earlier, f"gang {gang.ref.key} holds no devices")
            return
        if error is not None and earlier is None:
            log.warning("gang %s: %s; %d spare(s) kept for it", gang.ref.key, error, asked)
            for member in gang.placed[:1]:
                self._event(view, member.pod, "GangSparesRefused", error)
        spares, limit = self._spares(view, gang, earlier, placed, asked) if asked else ({}, None)
        if len(spares) < asked:
            log.info(
                "gang %s may have %d spare node(s); %d kept: %s",
                gang.ref.key,
                asked,
                len(spares),
                limit or "no more free of work of its priority in its domain",
            )
            if limit is not None and (earlier is None or len(earlier.spares) != len(spares)):
                told = f"{len(spares)} of {asked} spare(s) kept: {limit}"
                for member in gang.placed[:1]:
                    self._event(view, member.pod, "GangSparesLimited", told)
        kept = record(
            gang, placed, priority=gang.priority, now=now, hold=self.hold_seconds, members=members, spares=spares
        )
        try:
            self._write(kept, earlier)
        except RecordTooLargeError as error:
            if not spares:
                self._event(view, gang.placed[0].pod, "GangNotRecorded", f"{error}: no return hold is kept for it")
                raise
            self._event(view, gang.placed[0].pod, "GangSparesLimited", f"0 of {asked} spare(s) kept: {error}")
            self._write(dataclasses.replace(kept, nodes=placed), earlier)

    def _look_again(self, key: str, now: float) -> bool:
        """Whether a gang short of spares may have the cluster searched again (every
        SPARES_LOOK_EVERY_S: a search reads every pod and node)."""
        if now - self._looked.get(key, -SPARES_LOOK_EVERY_S) < SPARES_LOOK_EVERY_S:
            return False
        self._looked = {k: t for k, t in self._looked.items() if now - t < SPARES_LOOK_EVERY_S}  # bounded by gangs
        self._looked[key] = now
        return True

    def _spares(
        self,
        view: ClusterView,
        gang: Gang,
        earlier: Reservation | None,
        placed: dict[str, Reserved],
        asked: int,
    ) -> tuple[dict[str, Reserved], str | None]:
        """Its spares: those it keeps already, then new ones, none kept for another gang, within the
        grant's shares; with the limit that allowed fewer, if one did."""
        # Sized again: a vacated record kept only what was free of them.
        needed, kept = per_node_demand(placed), earlier.spares if earlier else {}
        busy = {name: usage.devices for name, usage in view.usage.items() if name in kept}
        own = {
            name: Reserved(0, spare_usage(view.nodes[name], needed, reserved.usage.devices, busy.get(name, ())))
            for name, reserved in kept.items()
            if name not in placed and name in view.nodes
        }
        if len(own) >= asked:
            return dict(list(own.items())[:asked]), None
        others = [other for key, other in view.returns.items() if key != gang.ref.key]
        taken = {name for other in others for name in other.nodes}
        held = {name for other in others for name in other.spares} | set(own)
        more, limit = choose_spares(
            view,
            gang,
            placed,
            asked=asked - len(own),
            levels=self.config.topology_levels,
            taken=taken | set(own),
            grant=self.config.spares,
            held=held,
        )
        return {**own, **more}, limit

    def _owner_exists(self, key: str) -> bool:
        """Asked of the API for an owner the extender does not watch (a LeaderWorkerSet); one that
        cannot be read is taken to exist (the hold is bounded)."""
        source, namespace, name = owner(key)
        if source != "lws":
            return True
        group = name.rpartition("/")[0]
        try:
            LEADER_WORKER_SETS.get(self.api, group, namespace, _request_timeout=API_TIMEOUT_S)
        except client.ApiException as error:
            if error.status == NOT_FOUND:
                return False
            log.warning(
                "LeaderWorkerSet %s/%s could not be read (%s): its group is held for", namespace, group, error.status
            )
        return True

    def _vacate(self, view: ClusterView, kept: Reservation, now: float) -> None:
        left = vacated(kept, view.nodes, now, self.hold_seconds, view.usage)
        GANGS_VACATED.inc()
        if left is None:
            self._delete(kept, f"gang {kept.preemptor} lost members and none of its nodes is fit for it any more")
            return
        self._write(left, kept)
        log.info(
            "gang %s lost members; %s kept for it for %d s",
            kept.preemptor,
            ", ".join(sorted(left.nodes)),
            self.hold_seconds,
        )

    def _returned(self, view: ClusterView, gang: Gang, kept: Reservation, now: float) -> None:
        # From when this replica saw it lose members, or, recreated before it looked, from its
        # first new pod's creation.
        since = now - (kept.vacated or min(member.created for member in gang.members))
        now_on = {member.node for member in gang.placed if member.node}
        # Recreated before the leader looked, the record still names the failed node: judged, as a
        # vacated record is, on the nodes still fit for the gang.
        fit = vacated(kept, view.nodes, now, 0) or kept
        ran = dataclasses.replace(fit, nodes={name: kept for name, kept in fit.nodes.items() if kept.slots})
        where = outcome(ran, now_on, view.nodes, self.config.topology_levels)
        GANG_RECOVERY_SECONDS.observe(max(0.0, since))
        GANG_RETURNS.labels(where.label).inc()
        domain = f"same {where.level}" if where.same_domain else "another domain"
        spares = f" ({len(set(fit.spares) & now_on)} of its {len(fit.spares)} spare(s))" if fit.spares else ""
        message = (
            f"gang {gang.ref.key} is whole again {since:.1f} s after it lost members: {where.reused} of the "
            f"{where.kept} node(s) kept for it taken again{spares}, {domain}"
        )
        log.info("%s", message)
        self._record(view, gang, now, kept)
        for member in gang.placed[:1]:  # one event per return, on its first member
            self._event(view, member.pod, "GangReturned", message, kind="Normal")

    def _write(self, kept: Reservation, earlier: Reservation | None) -> None:
        body = lease_body(kept, self.leader.identity)
        size = annotation_bytes(body)
        if size > ANNOTATIONS_LIMIT:
            raise RecordTooLargeError(
                f"gang {kept.preemptor}'s return record takes {size // 1024} KiB, over the "
                f"{ANNOTATIONS_LIMIT // 1024} KiB a Lease's annotations may hold"
            )
        timeout = self.leader.prove(f"recording gang {kept.preemptor}", API_TIMEOUT_S)
        try:
            if earlier is None:
                self.leases.create_namespaced_lease(self.namespace, body, _request_timeout=timeout)
            else:
                self.leases.patch_namespaced_lease(kept.lease, self.namespace, body, _request_timeout=timeout)
        except client.ApiException as error:
            if error.status not in (NOT_FOUND, CONFLICT):  # the watch shows the record as it is; the next step goes on
                raise

    def _delete(self, kept: Reservation, why: str) -> None:
        self.let_go(kept, f"letting the record of gang {kept.preemptor} go")
        log.info("%s: its return record is let go", why)

    def _event(self, view: ClusterView, pod: str, reason: str, message: str, kind: str = "Warning") -> None:
        facts = view.pods.get(key_of(pod))
        if facts is not None:
            self.tell(facts, kind, reason, message)
