"""What the leader's loops (preemption, gang returns) work from, and the writes both make: letting
one of their Leases go, and telling a pod what happened to it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

from kubernetes import client

from extender.cluster.reservation import Reservation
from extender.cluster.state import ClusterState
from extender.plan.config import ExtenderConfig
from extender.plan.current import CurrentPlan
from extender.pods.facts import PodFacts
from extender.preempt.leader import LeaderLease
from nativedra.base.kube.events import post_pod_event
from nativedra.base.kube.names import DRIVER_NAME

COMPONENT = f"{DRIVER_NAME}/extender"
API_TIMEOUT_S = 10.0
NOT_FOUND, CONFLICT = 404, 409


@dataclass(eq=False)
class LeaderDuty:
    """A leader loop's inputs; a subclass sets up its own state in `__post_init__`."""

    api: client.ApiClient
    state: ClusterState
    config: ExtenderConfig
    _: KW_ONLY
    plans: CurrentPlan
    namespace: str
    leader: LeaderLease
    clock: Callable[[], float] = time.time
    core: client.CoreV1Api = field(init=False)
    leases: client.CoordinationV1Api = field(init=False)

    def __post_init__(self) -> None:
        self.core = client.CoreV1Api(self.api)
        self.leases = client.CoordinationV1Api(self.api)

    def let_go(self, kept: Reservation, what: str) -> None:
        """That very Lease goes (its UID the precondition), proven first: a later one for the same
        preemptor or gang keeps its own. One already gone or replaced is left as it is."""
        timeout = self.leader.prove(what, API_TIMEOUT_S)
        options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=kept.uid or None))
        try:
            self.leases.delete_namespaced_lease(kept.lease, self.namespace, body=options, _request_timeout=timeout)
        except client.ApiException as error:
            if error.status not in (NOT_FOUND, CONFLICT):
                raise

    def tell(self, pod: PodFacts, kind: str, reason: str, message: str) -> None:
        post_pod_event(self.core, pod.obj, kind, reason, message, component=COMPONENT, timeout_s=API_TIMEOUT_S)
