"""Everything `nativedra map` shows, read from the API once: the objects the extender watches,
listed as its informers list them into the same ClusterState, and the extender's plan made from
them (extender.plan.current), so the holds shown are the ones every replica derives."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from kubernetes import client

from extender.cluster.informer import list_kind, lister_of
from extender.cluster.reservation import Reservation
from extender.cluster.state import ClusterState
from extender.plan.config import ExtenderConfig
from extender.plan.decide import Decider
from nativedra.map.clustermap import ClusterMap, build_map
from nativedra.map.report import GangRow, gang_rows

log = logging.getLogger(__name__)
MISSING = (403, 404)  # an optional kind not served, or not readable with these credentials


@dataclass(frozen=True)
class Reading:
    cluster: ClusterMap
    gangs: list[GangRow]
    reservations: list[Reservation]
    seconds: dict[str, float]  # what each step took


def read_cluster(api: client.ApiClient, config: ExtenderConfig, namespace: str) -> Reading:
    """`namespace`: the extender's, where the devices kept for preemptors are recorded."""
    started = time.monotonic()
    state = ClusterState(config.driver)
    for kind in ClusterState.KINDS:
        try:
            list_kind(lister_of(api, kind, namespace), state, kind)
        except client.ApiException as error:
            if error.status not in MISSING or kind not in ClusterState.OPTIONAL_KINDS:
                raise
            state.absent(kind)
    reading = reading_of(state, config)
    reading.seconds["list"] = time.monotonic() - started - sum(reading.seconds.values())
    return reading


def reading_of(state: ClusterState, config: ExtenderConfig) -> Reading:
    """The map and the extender's plan of a state that holds every kind."""
    seconds: dict[str, float] = {}
    started = time.monotonic()
    view = state.view()
    decider = Decider(config)
    now = time.time()
    plan = decider.plans.plan(view, None, now)
    gangs = gang_rows(decider.plans.gangs(view), plan.plans, plan.clocks, now)
    seconds["plan"] = time.monotonic() - started
    started = time.monotonic()
    cluster = build_map(
        list(state.objects["nodes"].values()),
        [published.as_api() for published in state.slices.values()],
        list(view.claims.values()),
        [pod.obj for pod in view.pods.values()],
    )
    seconds["map"] = time.monotonic() - started
    return Reading(cluster, gangs, list(view.reservations.values()), seconds)
