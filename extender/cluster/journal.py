"""Which objects, node models and usages changed between two versions of the state, so a reader
that kept an answer from an earlier view looks at those instead of every node."""

from __future__ import annotations

from bisect import bisect_right

from extender.pods.keys import Key

Change = tuple[str, Key]  # (kind, key); node models are kind "node" and usage "usage", key ("", node name)


class Journal:
    # Between two scheduling calls a busy cluster delivers tens of events, a burst a few thousand; a
    # reader further behind than this checks everything (correct, only slower).
    MAX = 8_192

    def __init__(self) -> None:
        # (version, change) in version order, at most MAX entries; changes at or before `floor` are
        # no longer listed (readers then look at everything).
        self._versions: list[int] = []
        self._changes: list[Change] = []
        self.floor = 0
        # Bumped by every change to a kind the journal does not list (see `ClusterView`).
        self.unjournaled_version = 0

    def note(self, change: Change, version: int) -> None:
        self._versions.append(version)
        self._changes.append(change)
        if len(self._versions) > self.MAX:
            drop = len(self._versions) // 2
            self.floor = self._versions[drop - 1]
            del self._versions[:drop]
            del self._changes[:drop]

    def unjournaled(self) -> None:
        self.unjournaled_version += 1

    def restart(self, version: int) -> None:
        """A whole kind was replaced: nothing before `version` is listed any more."""
        self.floor = version
        self.unjournaled_version += 1
        self._versions.clear()
        self._changes.clear()

    def changes(self, since: int, upto: int) -> set[Change] | None:
        """What changed after version `since` up to `upto`, or None when the journal no longer
        reaches back that far."""
        if since < self.floor or since > upto:
            return None
        low = bisect_right(self._versions, since)
        high = bisect_right(self._versions, upto)
        return set(self._changes[low:high])
