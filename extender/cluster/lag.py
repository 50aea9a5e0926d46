"""What kube-scheduler knows before the extender's watches do, and how the extender allows for it.

The scheduler counts an allocation the moment it assumes it and can ask about a pod the watches
have not delivered yet; the extender sees both tens of milliseconds later. Left alone, that gap lets
a gang start on capacity that is already gone. Two records close it: gang pods asked about before
the watch has them (`Unwatched`), and gang members admitted and not yet shown placed (`InFlight`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from extender.cluster.view import ClusterView
from extender.pods.keys import Key, created_at, pod_key

MIN_FEASIBLE_NODES_TO_FIND = 100  # kube-scheduler's minFeasibleNodesToFind
MIN_FEASIBLE_NODES_PERCENTAGE = 5  # and minFeasibleNodesPercentageToFind
LAG_SECONDS = 30.0  # a record outlives the watches' lag by far, and no longer
UNWATCHED_MAX = 1024
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


class Unwatched:
    """Gang pods asked about before the watches delivered them: every plan counts them until the
    watch does, so a pod asked about next cannot take what their gang was just planned (and
    admitted) onto. Only a pod created in the last LAG_SECONDS is taken: one created earlier and
    absent has been deleted (the scheduler can still ask about a pod it is dropping)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pods: dict[Key, tuple[dict[str, Any], float]] = {}  # pod, created (unix s)
        self.version = 0  # bumped on every change: plans made with another version differ
        self._journal_at = -1  # the view version the journal was last read up to

    def note(self, view: ClusterView, asked: dict[str, Any] | None, now: float) -> int:
        """Take `asked` while the view lacks it; forget what the view now has, what the journal
        saw come and go, and what is older than LAG_SECONDS. Returns `version`."""
        changes = view.changes(self._journal_at) if self._journal_at >= 0 else None
        with self._lock:
            self._journal_at = max(self._journal_at, view.version)
            kept = {
                key: entry
                for key, entry in self._pods.items()
                if key not in view.pods
                and (changes is None or ("pods", key) not in changes)
                and now - entry[1] <= LAG_SECONDS
            }
            changed = len(kept) != len(self._pods)
            self._pods = kept
            if asked is not None and pod_key(asked) not in view.pods:
                key, created = pod_key(asked), created_at(asked)
                known = self._pods.get(key)
                if now - created <= LAG_SECONDS and (known is None or known[0] != asked):
                    if len(self._pods) >= UNWATCHED_MAX:
                        self._pods.pop(next(iter(self._pods)))
                    self._pods[key] = (asked, created)
                    changed = True
            if changed:
                self.version += 1
            return self.version

    def pods(self, view: ClusterView) -> list[dict[str, Any]]:
        with self._lock:
            return [pod for key, (pod, _) in self._pods.items() if key not in view.pods]


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
