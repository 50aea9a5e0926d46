"""core/v1 Event bodies about a pod, where `kubectl describe pod` shows them. Pure."""

from __future__ import annotations

import datetime as dt
from typing import Any

MAX_MESSAGE = 1024


def pod_event(
    pod: dict[str, Any], kind: str, reason: str, message: str, *, component: str, now: dt.datetime
) -> dict[str, Any]:
    """An event of `kind` (Normal or Warning) on `pod` (an API dict); its uid is what lets
    `kubectl describe` find it."""
    metadata = pod["metadata"]
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    involved = {"apiVersion": "v1", "kind": "Pod", "name": metadata["name"], "namespace": metadata["namespace"]}
    if metadata.get("uid"):
        involved["uid"] = metadata["uid"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{metadata['name']}.", "namespace": metadata["namespace"]},
        "involvedObject": involved,
        "type": kind,
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "source": {"component": component},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
