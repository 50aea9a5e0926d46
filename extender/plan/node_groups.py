"""The view's nodes grouped by node model and usage object, kept up to date from the state's journal.

Nodes of one model with one usage object score alike for any demand that reads no device identity
(`Matcher.alike_by_model`), so a pod shape never seen before is scored once per group, and the
scores of the group's nodes are filled in by set and dict operations: a new shape's first
prioritize at 10,000 nodes looked up each node on its own, most of its 15-20 ms.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping

from extender.cluster.view import ClusterView
from extender.devices.node_usage import Node, Usage

GroupKey = tuple[int, int]  # (node model, id of the usage object)
NODE_KINDS = ("node", "usage")  # journal kinds that regroup a node


class NodeGroups:
    """One grouping, moved to each newer view by the nodes the journal says changed; rebuilt when
    the journal no longer reaches back. It holds the view's usage mapping, so every usage object a
    key names stays alive and its id is not reused. Its size is the view's: one entry per node."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._version = -1
        self._nodes: Mapping[str, Node] = {}
        self._usage: Mapping[str, Usage] = {}
        self._key_of: dict[str, GroupKey] = {}
        self._members: dict[GroupKey, set[str]] = {}

    def scores(self, view: ClusterView, names: Iterable[str], value: Callable[[str], int]) -> dict[str, int] | None:
        """Each name's score on the view's usage, `value` asked for one node of each group that holds
        one of them (0 for a name not in the view); None when `view` is older than the grouping (a
        call that raced a newer one)."""
        with self._lock:
            if not self._move_to(view):
                return None
            scores = dict.fromkeys(names, 0)
            wanted = set(scores)
            for members in self._members.values():
                found = members & wanted  # C loops over the smaller set
                if found:
                    name = next(iter(found))
                    scores.update(dict.fromkeys(found, value(name)))
            return scores

    def follow(self, view: ClusterView) -> None:
        """Group the view's nodes now, off the request path (`Decider.warm_up`)."""
        with self._lock:
            self._move_to(view)

    def _move_to(self, view: ClusterView) -> bool:
        if view.version < self._version:
            return False
        same = view.nodes is self._nodes and view.usage is self._usage
        if view.version == self._version and same:
            return True
        # A view of the same version with other mappings (made by hand, not by the state) has no
        # journal to go by.
        changes = view.changes(self._version) if self._version >= 0 and view.version > self._version else None
        if changes is None:
            self._regroup_all(view)
        else:
            for name in {key[1] for kind, key in changes if kind in NODE_KINDS}:
                self._regroup(view, name)
        self._version, self._nodes, self._usage = view.version, view.nodes, view.usage
        return True

    def _regroup_all(self, view: ClusterView) -> None:
        """Built aside and swapped in: a failure halfway leaves the previous grouping, and its
        version, to be moved along or rebuilt by the next call."""
        key_of: dict[str, GroupKey] = {}
        members: dict[GroupKey, set[str]] = {}
        usage = view.usage
        for name, node in view.nodes.items():
            used = usage.get(name)
            if used is not None:
                key = key_of[name] = (node.model, id(used))
                members.setdefault(key, set()).add(name)
        self._key_of, self._members = key_of, members

    def _regroup(self, view: ClusterView, name: str) -> None:
        old = self._key_of.pop(name, None)
        if old is not None:
            members = self._members[old]
            members.discard(name)
            if not members:
                del self._members[old]
        node, used = view.nodes.get(name), view.usage.get(name)
        if node is None or used is None:
            return
        key = (node.model, id(used))
        self._key_of[name] = key
        self._members.setdefault(key, set()).add(name)
