"""KubeSchedulerConfiguration fields that wire a local `nativedra extender` into kube-scheduler.

The same choices as `manifests/scheduler/kube-scheduler-config.yaml`, explained there."""

from __future__ import annotations

from typing import Any


def scheduler_extra(port: int, scheme: str = "http") -> dict[str, Any]:
    return {
        "percentageOfNodesToScore": 100,
        "extenders": [
            {
                "urlPrefix": f"{scheme}://127.0.0.1:{port}",
                "filterVerb": "filter",
                "prioritizeVerb": "prioritize",
                "weight": 5,
                "nodeCacheCapable": True,
                "ignorable": False,
                "httpTimeout": "10s",
            }
        ],
    }
