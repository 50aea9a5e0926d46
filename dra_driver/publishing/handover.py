"""Which of two plugin instances on one node publishes its slices during a rolling update.

With maxSurge 1 the new pod starts before the old one stops, and each kept the node's slices equal
to its own inventory: after an upgrade that turned fractions off, each undid the other's write
(pool generation 1,887 within two minutes in one test run) while both burnt the CPU their probes
needed. Each slice now names the instance that wrote it; an instance leaves the slices to one that
started after it while that one still serves the kubelet (its registration socket is there), and
takes them back once it is gone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dra_driver.kubelet_paths import registration_socket
from dra_driver.live_instances import answers

PUBLISHER_ANNOTATION = "nativedra.dev/publisher"


@dataclass(frozen=True)
class Instance:
    """One plugin process: its pod's UID and when it started (unix seconds, the node's clock)."""

    pod_uid: str
    started: float

    def stamp(self) -> str:
        return f"{self.started:.6f}/{self.pod_uid}"

    @classmethod
    def parse(cls, stamp: str | None) -> Instance | None:
        """The instance a slice's annotation names; None when there is none or it is malformed."""
        started, _, pod_uid = (stamp or "").partition("/")
        try:
            value = float(started)
        except ValueError:
            return None
        return cls(pod_uid, value) if pod_uid and math.isfinite(value) else None

    def newer_than(self, other: Instance) -> bool:
        return (self.started, self.pod_uid) > (other.started, other.pod_uid)


def newer_instance(me: Instance, slices: Iterable[dict[str, Any]], alive: Callable[[str], bool]) -> Instance | None:
    """The instance that wrote one of `slices`, started after `me` and still serving, if any."""
    for resource_slice in slices:
        annotations = (resource_slice.get("metadata") or {}).get("annotations") or {}
        other = Instance.parse(annotations.get(PUBLISHER_ANNOTATION))
        if other is not None and other.pod_uid != me.pod_uid and other.newer_than(me) and alive(other.pod_uid):
            return other
    return None


def serving_kubelet(registry_dir: Path, timeout_s: float = 1.0) -> Callable[[str], bool]:
    """Whether the pod with a UID answers on its registration socket in the kubelet's registry."""

    def alive(pod_uid: str) -> bool:
        try:
            path = registration_socket(registry_dir, pod_uid)
        except ValueError:  # not a UID: no such pod
            return False
        return answers(path, timeout_s)

    return alive
