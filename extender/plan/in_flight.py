"""Gang members the extender admitted and the scheduler has not shown placed yet, and whether a
filter call's nodes are all the scheduler found: the request path's side of the watches' lag
(extender.cluster.lag has the other)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from extender.cluster.lag import LAG_SECONDS
from extender.pods.keys import Key

MIN_FEASIBLE_NODES_TO_FIND = 100  # kube-scheduler's minFeasibleNodesToFind
MIN_FEASIBLE_NODES_PERCENTAGE = 5  # and minFeasibleNodesPercentageToFind
# Members admitted within LAG_SECONDS: the scheduler admits far fewer (tens of pods a second); the
# oldest go first past this, so no stream of admissions grows memory.
IN_FLIGHT_MAX = 4096


def feasible_nodes_to_find(all_nodes: int, percentage: int = 0) -> int:
    """How many feasible nodes kube-scheduler looks for before it stops and asks the extenders
    (schedule_one.go numFeasibleNodesToFind): every node below 100, else a share of them."""
    if all_nodes < MIN_FEASIBLE_NODES_TO_FIND or percentage >= 100:
        return all_nodes
    if percentage <= 0:
        percentage = max(50 - all_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE)
    return max(all_nodes * percentage // 100, MIN_FEASIBLE_NODES_TO_FIND)


def complete_offer(offered: int, all_nodes: int, percentage: int) -> bool:
    """Whether a filter call's nodes are every feasible node the scheduler found, not a sample."""
    return offered < feasible_nodes_to_find(all_nodes, percentage)


class InFlight:
    """Gang members admitted (answered with their planned nodes) and not yet shown placed: a
    planned node the scheduler no longer offers may be taken by one of them, not by a pod outside
    the gang."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._admitted: dict[Key, tuple[str, float]] = {}  # pod -> (its gang, when, monotonic)

    def admit(self, pod: Key, gang: str) -> None:
        with self._lock:
            self._admitted.pop(pod, None)  # re-admitted: now the newest
            if len(self._admitted) >= IN_FLIGHT_MAX:
                self._admitted.pop(next(iter(self._admitted)))
            self._admitted[pod] = (gang, time.monotonic())

    def others(self, gang: str, asking: Key, placed: Callable[[Key], bool]) -> int:
        """Members of `gang` other than `asking` admitted in the last LAG_SECONDS and not `placed`."""
        now = time.monotonic()
        with self._lock:
            self._admitted = {
                key: (owner, at)
                for key, (owner, at) in self._admitted.items()
                if now - at <= LAG_SECONDS and not placed(key)
            }
            return sum(1 for key, (owner, _) in self._admitted.items() if owner == gang and key != asking)
