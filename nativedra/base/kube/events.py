"""core/v1 Event bodies about a pod, where `kubectl describe pod` shows them (pure), and posting
one (an event lost is logged, never worth failing the work it tells of)."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from kubernetes import client

log = logging.getLogger(__name__)

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


def post_pod_event(
    core: client.CoreV1Api,
    pod: dict[str, Any],
    kind: str,
    reason: str,
    message: str,
    *,
    component: str,
    timeout_s: float,
) -> None:
    """`pod_event` posted in the pod's namespace; a refusal or a timeout is logged."""
    body = pod_event(pod, kind, reason, message, component=component, now=dt.datetime.now(dt.UTC))
    try:
        core.create_namespaced_event(pod["metadata"]["namespace"], body, _request_timeout=timeout_s)
    except Exception as error:  # noqa: BLE001 - an event lost is logged, the work goes on
        log.warning("could not post %s event on pod %s: %s", reason, pod["metadata"]["name"], error)
