"""One replica at a time does what must not happen twice (evicting pods), as client-go's leader
election arranges it: a Lease names the holder, who renews it; another replica takes it over only
after seeing it unchanged for a whole lease duration, timed on its own clock (never compared with
another machine's), and every write carries the resourceVersion read, so two writers never both win.

Leader election alone does not fence: a holder that stalls (a pause, CPU starvation, a slow API
server) past the duration wakes up believing it still leads. So before each action on other
people's objects the holder calls `fence`: a renewal carrying the resourceVersion of its own last
write, which the API refuses once any other replica has written the Lease. A stall between a
fence and the action it guards is caught by the clock: a fence older than FENCE_S (on the
monotonic clock, which runs on while a process is stopped) is made again.

A fence is a proof for a while only. Its age counts from when the renewal was sent (the API may
have written it any time after), so no other replica can take the Lease over before a whole
duration from then; a margin of a third of the duration is kept for a stall, a GC pause or clocks
that run at different rates. A renewal that returns with less than MIN_LEFT_S of that left proves
nothing, and every call made under a proof has its timeout cut to what is left (`prove`): a call
cannot outlive the lead it was made under. (The client gives up and closes its connection; the
API server then cancels the request's context.)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from nativedra.base.kube.micro_time import micro_time

log = logging.getLogger(__name__)
API_TIMEOUT_S = 5.0
FENCE_S = 1.0  # a fence proves leadership this long (well inside a lease duration) on this clock
MIN_LEFT_S = 1.0  # a renewal that leaves less of its proof than this proves nothing
CONFLICT, NOT_FOUND = 409, 404


class LeadLostError(Exception):
    """This replica can no longer prove it leads: whatever it decided is dropped."""


class LeaderLease:
    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        name: str,
        identity: str,
        *,
        duration_s: int = 15,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.leases = client.CoordinationV1Api(api)
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration_s = duration_s
        self.clock = clock
        self._seen: tuple[str, str] | None = None  # (holder, resourceVersion) last read
        self._seen_at = 0.0  # when it last changed, on our clock
        self._held_until = 0.0  # our clock: we hold it until then without asking
        self._version: str | None = None  # resourceVersion of our own last write, while we lead
        self._fenced_at: float | None = None  # when the last fence's write was sent, our clock
        self._proven_until = 0.0  # our clock: what the last proof allows a call, margin kept

    def holding(self) -> bool:
        """Whether this replica leads now: renews (or takes) the Lease when due."""
        now = self.clock()
        if now < self._held_until - self.duration_s / 3:
            return True  # renewed recently: a third of the duration is left in hand
        try:
            return self._try(now)
        except client.ApiException as error:
            log.warning("leader Lease %s/%s: %s %s", self.namespace, self.name, error.status, error.reason)
        except Exception as error:  # noqa: BLE001 - a dropped connection: not leading until it answers
            log.warning("leader Lease %s/%s: %s", self.namespace, self.name, error)
        self._lost()
        return False

    def fence(self) -> bool:
        """Whether this replica provably leads now: True only if a renewal guarded by the
        resourceVersion of its own last write went through less than FENCE_S ago."""
        started = self.clock()
        if self._fenced_at is not None and started - self._fenced_at < FENCE_S:
            return True
        if self._version is None:
            return False
        stamp = micro_time(time.time())
        body = {
            "metadata": {"name": self.name, "namespace": self.namespace, "resourceVersion": self._version},
            "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": self.duration_s, "renewTime": stamp},
        }
        timeout = min(API_TIMEOUT_S, self._margined(started) - started)
        try:
            lease = self.leases.patch_namespaced_lease(self.name, self.namespace, body, _request_timeout=timeout)
        except Exception as error:  # noqa: BLE001 - refused (another replica wrote) or not answered: not proven
            log.warning("leader Lease %s/%s: renewal refused, not leading: %s", self.namespace, self.name, error)
            self._lost()
            return False
        self._version = lease.metadata.resource_version
        self._held_until = started + self.duration_s
        took = self.clock() - started
        if self._margined(started) - self.clock() < MIN_LEFT_S:
            log.warning(
                "leader Lease %s/%s: renewal took %.1f s, too little of its proof left to act on",
                self.namespace,
                self.name,
                took,
            )
            self._fenced_at = None
            return False
        self._fenced_at, self._proven_until = started, self._margined(started)
        return True

    def time_left(self) -> float:
        """What the last proof still allows a call made now, margin kept (0: none)."""
        return max(0.0, self._proven_until - self.clock()) if self._fenced_at is not None else 0.0

    def _margined(self, sent: float) -> float:
        """Until when a renewal sent at `sent` proves the lead, a third of the duration kept."""
        return sent + self.duration_s * 2 / 3

    def lead(
        self, stop: threading.Event, step: Callable[[], None], what: str, every_s: float, ready: Callable[[], bool]
    ) -> None:
        """Run `step` every `every_s` while this replica leads and `ready` says the state is: a
        step that finds the lead lost drops what it decided; any other failure is logged and tried
        again."""
        while not stop.wait(every_s):
            if not ready() or not self.holding():
                continue
            try:
                step()
            except LeadLostError as error:
                log.warning("no longer leading %s, decision dropped: %s", what, error)
            except Exception:
                log.exception("%s step failed; trying again", what)

    def prove(self, before: str, timeout_s: float) -> float:
        """`fence`, or LeadLostError naming the write it was to allow; the timeout the write may
        have: `timeout_s` at most, and no longer than the proof lasts."""
        if not self.fence():
            raise LeadLostError(f"the leader Lease could not be renewed before {before}")
        left = self.time_left()
        if left <= 0:
            raise LeadLostError(f"the proof of the lead ran out before {before}")
        return min(timeout_s, left)

    def _lost(self) -> None:
        self._held_until = 0.0
        self._version = None
        self._fenced_at = None
        self._proven_until = 0.0

    def _try(self, now: float) -> bool:
        try:
            lease = self.leases.read_namespaced_lease(self.name, self.namespace, _request_timeout=API_TIMEOUT_S)
        except client.ApiException as error:
            if error.status != NOT_FOUND:
                raise
            return self._write(None, now)
        holder = lease.spec.holder_identity or "" if lease.spec else ""
        seen = (holder, lease.metadata.resource_version)
        if seen != self._seen:
            self._seen, self._seen_at = seen, now
        if holder and holder != self.identity and now - self._seen_at < self.duration_s:
            self._lost()
            return False
        return self._write(lease, now)

    def _write(self, lease: Any, now: float) -> bool:
        stamp = micro_time(time.time())
        taking = lease is None or (lease.spec.holder_identity if lease.spec else None) != self.identity
        spec: dict[str, Any] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.duration_s,
            "renewTime": stamp,
        }
        body: dict[str, Any] = {"metadata": {"name": self.name, "namespace": self.namespace}, "spec": spec}
        try:
            if lease is None:
                spec.update(acquireTime=stamp, leaseTransitions=0)
                written = self.leases.create_namespaced_lease(self.namespace, body, _request_timeout=API_TIMEOUT_S)
            else:
                body["metadata"]["resourceVersion"] = lease.metadata.resource_version
                if taking:
                    spec.update(acquireTime=stamp, leaseTransitions=(lease.spec.lease_transitions or 0) + 1)
                written = self.leases.patch_namespaced_lease(
                    self.name, self.namespace, body, _request_timeout=API_TIMEOUT_S
                )
        except client.ApiException as error:
            if error.status == CONFLICT:
                self._lost()
                return False  # another replica wrote first
            raise
        if taking:
            log.info("leading preemption now (Lease %s/%s)", self.namespace, self.name)
        self._held_until = now + self.duration_s
        self._version = written.metadata.resource_version
        self._fenced_at, self._proven_until = now, self._margined(now)
        return True
