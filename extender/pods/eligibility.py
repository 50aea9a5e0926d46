"""Which nodes a pod may use: by its nodeSelector and required node affinity (labels only), and by
required inter-pod affinity and anti-affinity against the pods already placed. Pure.

Inter-pod (anti-)affinity follows kube-scheduler's InterPodAffinity filter: the incoming pod's
affinity terms need a placed pod matching all of them in the node's domain (first-pod rule: when
no placed pod matches and the pod matches its own terms, any node carrying the topology labels
will do); its anti-affinity terms exclude a domain holding a matching placed pod; a placed pod's
own anti-affinity terms that match the incoming pod exclude that pod's domain (symmetry). Only
placed pods count (bound, or with a claim allocated for them): a gang's members planned but not
placed yet are not visible to the scheduler either. The cluster view holds only pods with claims
or gang labels, so affinity to other pods is judged against those alone; the scheduler enforces
the rest on the nodes it sends.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


def _expression_matches(labels: Mapping[str, str], expression: dict[str, Any]) -> bool:
    key, operator, values = expression.get("key", ""), expression.get("operator"), expression.get("values") or []
    if operator == "In":
        return labels.get(key) in values
    if operator == "NotIn":
        return labels.get(key) not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    if operator in ("Gt", "Lt") and key in labels and values:
        try:
            value, bound = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return value > bound if operator == "Gt" else value < bound
    return False


def selector_matches(selector: dict[str, Any], labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector: {} selects everything."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    return all(_expression_matches(labels, e) for e in selector.get("matchExpressions") or [])


def selection_key(pod_spec: dict[str, Any]) -> str:
    """Equal for pod specs that `eligible` judges alike on every node: what it reads of them."""
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    selector = pod_spec.get("nodeSelector")
    return json.dumps([selector, required], sort_keys=True) if selector or required else ""


def eligible(pod_spec: dict[str, Any], node_name: str, labels: dict[str, str]) -> bool:
    """By selector and affinity only: a placed member's nodeName says nothing about its siblings."""
    selector = pod_spec.get("nodeSelector") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return False
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    for term in terms:  # terms are ORed, expressions within a term ANDed
        expressions_ok = all(_expression_matches(labels, e) for e in term.get("matchExpressions") or [])
        fields_ok = all(_expression_matches({"metadata.name": node_name}, f) for f in term.get("matchFields") or [])
        if expressions_ok and fields_ok:
            return True
    return False


@dataclass(frozen=True)
class _Term:
    """One required pod (anti-)affinity term, resolved against the namespace of the pod that has it.

    `namespaces` None means every namespace: a `namespaceSelector` of {} selects all of them, and a
    non-empty one is treated as all of them too, because the view holds no namespace labels to
    evaluate it: for anti-affinity that refuses more domains than the scheduler would (never a plan
    it refuses), for affinity it may accept a domain the scheduler then refuses on its own filter."""

    selector: dict[str, Any] | None  # labelSelector; None matches no pod, {} every pod
    namespaces: frozenset[str] | None
    key: str  # topologyKey

    @classmethod
    def parse(cls, term: dict[str, Any], namespace: str) -> _Term:
        names = frozenset(term.get("namespaces") or ()) or frozenset((namespace,))
        everywhere = term.get("namespaceSelector") is not None
        return cls(term.get("labelSelector"), None if everywhere else names, term.get("topologyKey", ""))

    def matches(self, namespace: str, labels: Mapping[str, str]) -> bool:
        if self.selector is None or (self.namespaces is not None and namespace not in self.namespaces):
            return False
        return selector_matches(self.selector, labels)


def _terms(pod: dict[str, Any], kind: str) -> tuple[_Term, ...]:
    """The pod's required terms of `kind` (podAffinity or podAntiAffinity)."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get(kind) or {}
    namespace = pod["metadata"]["namespace"]
    return tuple(
        _Term.parse(term, namespace) for term in affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or []
    )


@dataclass(frozen=True)
class _Placed:
    namespace: str
    labels: Mapping[str, str]
    node_labels: Mapping[str, str]
    anti: tuple[_Term, ...]  # its own required anti-affinity terms

    def pairs(self, terms: Iterable[_Term]) -> set[tuple[str, str]]:
        """The (topology key, value) domains this pod is in, for the terms' keys its node carries."""
        return {(t.key, self.node_labels[t.key]) for t in terms if t.key in self.node_labels}


@dataclass(frozen=True)
class PodAffinity:
    """Where one pod may go by inter-pod (anti-)affinity: the domains it must join and those it
    must avoid, already worked out, so each node costs a few set lookups."""

    keys: tuple[str, ...] = ()  # topology keys of its affinity terms: a node needs every one
    joined: frozenset[tuple[str, str]] = frozenset()  # domains holding a pod that matches all terms
    first: bool = False  # first-pod rule: nothing placed matches, the pod matches its own terms
    refused: frozenset[tuple[str, str]] = frozenset()  # domains anti-affinity (either side) excludes

    def allows_any(self) -> bool:
        """Whether `allows` accepts every node, whatever its labels."""
        return not self.refused and not self.keys

    def allows(self, labels: Mapping[str, str]) -> bool:
        if self.refused and any((key, value) in self.refused for key, value in labels.items()):
            return False
        if any(key not in labels for key in self.keys):
            return False
        return self.first or all((key, labels[key]) in self.joined for key in self.keys)


ANY_NODE = PodAffinity()


class PlacedPods:
    """The placed pods of one cluster view, against which pods' (anti-)affinity is worked out: built
    once per view, and each distinct pod shape (namespace, labels, affinity) is worked out once,
    in time bounded by the placed pods and the terms."""

    def __init__(self, placed: Iterable[tuple[dict[str, Any], Mapping[str, str]]]) -> None:
        """`placed`: each placed pod with the labels of its node."""
        self._pods = [
            _Placed(
                pod["metadata"]["namespace"],
                pod["metadata"].get("labels") or {},
                node_labels,
                _terms(pod, "podAntiAffinity"),
            )
            for pod, node_labels in placed
        ]
        self._with_anti = [p for p in self._pods if p.anti]
        self._shapes: dict[str, PodAffinity] = {}

    def of(self, pod: dict[str, Any]) -> PodAffinity:
        namespace, labels = pod["metadata"]["namespace"], pod["metadata"].get("labels") or {}
        affinity = (pod.get("spec") or {}).get("affinity") or {}
        terms = {kind: affinity.get(kind) for kind in ("podAffinity", "podAntiAffinity")}
        shape = json.dumps([namespace, labels, terms], sort_keys=True, default=str)
        known = self._shapes.get(shape)
        if known is None:
            known = self._shapes[shape] = self._work_out(pod, namespace, labels)
        return known

    def _work_out(self, pod: dict[str, Any], namespace: str, labels: Mapping[str, str]) -> PodAffinity:
        wanted, avoided = _terms(pod, "podAffinity"), _terms(pod, "podAntiAffinity")
        refused: set[tuple[str, str]] = set()
        for placed in self._with_anti:  # symmetry: placed pods whose own anti-affinity matches this pod
            refused |= placed.pairs(t for t in placed.anti if t.matches(namespace, labels))
        for placed in self._pods if avoided else ():
            refused |= placed.pairs(t for t in avoided if t.matches(placed.namespace, placed.labels))
        if not wanted and not refused:
            return ANY_NODE
        joined: set[tuple[str, str]] = set()
        for placed in self._pods if wanted else ():  # a placed pod counts only if it matches every term
            if all(t.matches(placed.namespace, placed.labels) for t in wanted):
                joined |= placed.pairs(wanted)
        first = bool(wanted) and not joined and all(t.matches(namespace, labels) for t in wanted)
        return PodAffinity(tuple(t.key for t in wanted), frozenset(joined), first, frozenset(refused))
