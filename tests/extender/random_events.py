"""A busy cluster fed to a real ClusterState as the watches do, and a reproducible stream of the
events a busy cluster delivers: the extender's oracle tests replay it and compare what the state
and the planner keep with what they work out from scratch."""

from __future__ import annotations

import copy
import json
import random
from datetime import datetime
from typing import Any

from extender.cluster.state import ClusterState
from extender.plan.config import RACK_LABEL
from extender.plan.planner import ClusterPlan
from testkit import builders
from testkit.builders import CREATED, DRIVER, claimed_pod, gang_labels

SOON = datetime.fromisoformat(CREATED.replace("Z", "+00:00")).timestamp() + 10
LATE = SOON + 3600  # every hold has expired: expired gangs plan behind the others
GPUS = [f"gpu-{index}" for index in range(8)]
Key = tuple[str, str]


def _key(obj: dict[str, Any]) -> Key:
    return obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


class Cluster:
    """64 nodes of 8 GPUs, 8 to a rack: 45 nodes run eight 1-GPU pods, 19 are free; 4 gangs of
    4 pods x 8 GPUs that require one rack are pending. Fed to a real ClusterState as the watches do."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)  # noqa: S311 - a reproducible event sequence, not a secret
        busy = builders.busy_cluster(64, rack_size=8, pending_gangs=4, pending_gang_size=4, namespace="ns")
        self.state = ClusterState(DRIVER)
        for kind, items in busy.objects.items():
            self.state.replace(kind, json.loads(json.dumps(items)))
        self.single = busy.single
        self.eight = next(t for t in busy.objects["resourceclaimtemplates"] if t["metadata"]["name"] == "eight")
        self.version = 2
        self.added = 0

    def _put(self, kind: str, obj: dict[str, Any]) -> None:
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.version += 1
        self.state.apply("MODIFIED", kind, obj)

    def _pick(self, kind: str, test: Any) -> dict[str, Any] | None:
        found = [obj for obj in self.state.objects[kind].values() if test(obj)]
        return self.random.choice(found) if found else None

    def touch_claim(self) -> str:
        """A status update that changes nothing the planner reads."""
        claim = self._pick("resourceclaims", lambda c: (c.get("status") or {}).get("allocation"))
        if claim is not None:
            self._put("resourceclaims", claim)
        return "touch"

    def free(self) -> str:
        """A running pod ends: its claim is deleted, its GPU is free again."""
        claim = self._pick("resourceclaims", lambda c: (c.get("status") or {}).get("allocation"))
        if claim is not None:
            self.state.apply("DELETED", "resourceclaims", claim)
        return "free"

    def allocate(self, node: str | None = None) -> str:
        """A pending gang member's claim is allocated on a node with all 8 GPUs free."""
        view = self.state.view()
        free = [name for name, used in view.usage.items() if not used.devices]
        claim = self._pick(
            "resourceclaims",
            lambda c: not (c.get("status") or {}).get("allocation") and c["metadata"]["name"].startswith("pending"),
        )
        if not free or claim is None:
            return "allocate (none)"
        node = node if node in free else self.random.choice(free)
        owner = claim["metadata"]["name"].removesuffix("-gpus")
        allocated = builders.allocated_claim(claim["metadata"]["name"], node, GPUS, "ns", reserved_for=owner)
        self._put("resourceclaims", {**claim, "status": allocated["status"]})
        return "allocate"

    def add_member(self) -> str:
        """A new gang of two appears, or a member joins one."""
        self.added += 1
        gang = f"late-{self.added // 2}"
        member, claim = claimed_pod(
            f"{gang}-{self.added % 2}", self.eight, "ns", labels=gang_labels(gang, 2, RACK_LABEL)
        )
        self._put("resourceclaims", claim)
        self._put("pods", member)
        return "member"

    def taint(self) -> str:
        """A node's slice changes: one of its GPUs is tainted (a new Node object)."""
        published = [s for s in self.state.slices.values() if s.table.devices]
        if published:
            changed = self.random.choice(published).as_api()
            device = self.random.choice(changed["spec"]["devices"])
            device["taints"] = [{"key": "broken", "effect": "NoSchedule"}]
            self._put("resourceslices", changed)
        return "taint"

    def step(self) -> str:
        event = self.random.choice(
            [self.touch_claim, self.touch_claim, self.free, self.allocate, self.add_member, self.taint]
        )
        return event()


def same_plan(mine: ClusterPlan, fresh: ClusterPlan) -> None:
    assert mine.plans == fresh.plans
    assert mine.held == fresh.held
    assert mine.holders == fresh.holders
    assert mine.valid_until == fresh.valid_until
