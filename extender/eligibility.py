"""Which nodes a pod may use by its nodeSelector and required node affinity (labels only). Pure."""

from __future__ import annotations

from typing import Any


def _expression_matches(labels: dict[str, str], expression: dict[str, Any]) -> bool:
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
