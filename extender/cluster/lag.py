"""What kube-scheduler knows before the extender's watches do, and how the extender allows for it.

The scheduler counts an allocation the moment it assumes it and can ask about a pod the watches
have not delivered yet; the extender sees both tens of milliseconds later. Left alone, that gap lets
a gang start on capacity that is already gone. Two records close it: gang pods asked about before
the watch has them (`Unwatched`, here), and gang members admitted and not yet shown placed
(`InFlight`, extender.plan.in_flight).
"""

from __future__ import annotations

import threading

from extender.cluster.view import ClusterView
from extender.pods.facts import PodFacts
from extender.pods.keys import Key

LAG_SECONDS = 30.0  # a record outlives the watches' lag by far, and no longer
UNWATCHED_MAX = 1024


class Unwatched:
    """Gang pods asked about before the watches delivered them: every plan counts them until the
    watch does, so a pod asked about next cannot take what their gang was just planned (and
    admitted) onto. Only a pod created in the last LAG_SECONDS is taken: one created earlier and
    absent has been deleted (the scheduler can still ask about a pod it is dropping)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pods: dict[Key, tuple[PodFacts, float]] = {}  # pod, created (unix s)
        self.version = 0  # bumped on every change: plans made with another version differ
        self._journal_at = -1  # the view version the journal was last read up to

    def note(self, view: ClusterView, asked: PodFacts | None, now: float) -> int:
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
            if asked is not None and asked.key not in view.pods:
                key, created = asked.key, asked.created
                known = self._pods.get(key)
                if now - created <= LAG_SECONDS and (known is None or known[0].obj != asked.obj):
                    if len(self._pods) >= UNWATCHED_MAX:
                        self._pods.pop(next(iter(self._pods)))
                    self._pods[key] = (asked, created)
                    changed = True
            if changed:
                self.version += 1
            return self.version

    def pods(self, view: ClusterView) -> list[PodFacts]:
        with self._lock:
            return [pod for key, (pod, _) in self._pods.items() if key not in view.pods]
