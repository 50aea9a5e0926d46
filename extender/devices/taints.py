"""Taints and tolerations, read as the scheduler reads them: the same rule for a node's taints and
the pod's tolerations (v1 Toleration.ToleratesTaint) and for a device's taints and a claim request's
tolerations (the DRA allocator's DeviceToleration, a copy of that rule). Only NoSchedule and
NoExecute keep work off; other effects (None) are ignored, as both do."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple, TypeVar

FILTERING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
Taint = TypeVar("Taint", bound=Mapping[str, Any])


class Toleration(NamedTuple):
    """One toleration, hashable: a claim request's key its matches are cached by."""

    key: str
    operator: str  # Equal (the default) or Exists
    value: str
    effect: str  # empty: every effect

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> Toleration:
        key, value, effect = (raw.get(field) or "" for field in ("key", "value", "effect"))
        return cls(key, raw.get("operator") or "Equal", value, effect)

    def tolerates(self, taint: Mapping[str, Any]) -> bool:
        if self.effect and self.effect != taint.get("effect"):
            return False
        if self.key and self.key != taint.get("key"):
            return False
        if not self.key and self.operator != "Exists":
            return False
        return self.operator == "Exists" or (self.operator == "Equal" and self.value == (taint.get("value") or ""))


# What a claim request matches by: its CEL selectors and its tolerations of device taints.
Selection = tuple[tuple[str, ...], tuple[Toleration, ...]]


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """Whether one of a pod's tolerations (as the API has them) tolerates the taint."""
    return any(Toleration.of(toleration).tolerates(taint) for toleration in tolerations)


def tolerations_of(raw: Iterable[Mapping[str, Any]] | None) -> tuple[Toleration, ...]:
    return tuple(Toleration.of(toleration) for toleration in raw or ())


def filtering(taints: Iterable[Taint] | None) -> list[Taint]:
    """The taints that keep work off: NoSchedule and NoExecute."""
    return [taint for taint in taints or () if taint.get("effect") in FILTERING_EFFECTS]


def all_tolerated(taints: Iterable[Mapping[str, Any]], tolerations: tuple[Toleration, ...]) -> bool:
    """Every filtering taint tolerated by one of `tolerations` (the allocator's taintPreventsAllocation, negated)."""
    return all(any(t.tolerates(taint) for t in tolerations) for taint in filtering(taints))
