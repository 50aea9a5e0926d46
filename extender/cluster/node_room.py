"""What decides a node's admission apart from devices (taints, cordon, allocatable), and what every
pod bound there asks, pods outside the view too: preemption evicts only where the preemptor would
then pass the scheduler's filters."""

from __future__ import annotations

from typing import Any

from extender.pods.keys import Key
from extender.pods.node_admission import NONE, NodeAdmission, Requests, counts_on_node, pod_requests


class NodeRoom:
    MAX_REQUEST_SHAPES = 65_536

    def __init__(self) -> None:
        self._admission: dict[str, NodeAdmission] = {}
        self._pod_requests: dict[Key, tuple[str, Requests]] = {}
        self._node_requested: dict[str, Requests] = {}
        self._requests_seen: dict[Requests, Requests] = {}  # one object per value: most pods ask alike

    def node_stored(self, name: str, node: dict[str, Any]) -> None:
        self._admission[name] = NodeAdmission.of(node)

    def node_gone(self, name: str) -> None:
        self._admission.pop(name, None)

    def pods_relisted(self) -> None:
        self._pod_requests.clear()
        self._node_requested.clear()

    def account(self, key: Key, pod: dict[str, Any] | None) -> None:
        """Keep the node's requested total current as a pod comes, changes or goes."""
        old = self._pod_requests.pop(key, None)
        if old is not None:
            node, requests = old
            left = self._node_requested[node].minus(requests)
            if left.pods > 0:
                self._node_requested[node] = left
            else:
                del self._node_requested[node]
        if pod is None or not counts_on_node(pod):
            return
        node, requests = pod["spec"]["nodeName"], pod_requests(pod)
        if len(self._requests_seen) < self.MAX_REQUEST_SHAPES:
            requests = self._requests_seen.setdefault(requests, requests)
        self._pod_requests[key] = (node, requests)
        self._node_requested[node] = self._node_requested.get(node, NONE).plus(requests)

    def copies(self) -> tuple[dict[str, NodeAdmission], dict[str, Requests]]:
        return dict(self._admission), dict(self._node_requested)
