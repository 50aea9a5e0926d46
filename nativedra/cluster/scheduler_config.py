"""KubeSchedulerConfiguration fields that wire a local `nativedra extender` into kube-scheduler.

The same choices as `manifests/scheduler/kube-scheduler-config.yaml`, explained there. With `tls`
the scheduler calls the extender over HTTPS and presents a client certificate (as in a real
cluster); without it the extender must run with --insecure-http on loopback."""

from __future__ import annotations

from typing import Any

from nativedra.base.kube.names import CLASS_RESOURCES, EVERY_NODE_PROFILE, EXTENDER_MARKER
from nativedra.cluster.pki import ExtenderTls


def managed_resources() -> list[dict[str, Any]]:
    """The marker, ignored by the scheduler (no node has it), and our DeviceClasses' extended
    resources, which its DRA plugin counts (see nativedra.base.kube.names.CLASS_RESOURCES)."""
    return [
        {"name": EXTENDER_MARKER, "ignoredByScheduler": True},
        *({"name": name, "ignoredByScheduler": False} for name in CLASS_RESOURCES),
    ]


def scheduler_extra(port: int, tls: ExtenderTls | None = None, *, marked: bool = True) -> dict[str, Any]:
    """`marked`: only pods the marker policy marked are sent, from the profile the second policy
    moves them to (1.36+, see extender_wiring); without it, every pod is, and every pod's profile
    looks at every node, as a cluster without the policies must."""
    extender: dict[str, Any] = {
        "urlPrefix": f"{'https' if tls else 'http'}://127.0.0.1:{port}",
        "filterVerb": "filter",
        "prioritizeVerb": "prioritize",
        "weight": 5,
        "nodeCacheCapable": True,
        "ignorable": False,
        "httpTimeout": "10s",
    }
    if marked:
        extender["managedResources"] = managed_resources()
    if tls:
        extender["enableHTTPS"] = True
        extender["tlsConfig"] = {
            "caFile": str(tls.ca_cert),
            "certFile": str(tls.client_cert),
            "keyFile": str(tls.client_key),
            "serverName": "localhost",
        }
    if not marked:  # no policy moves the extender's pods to a profile of their own: every pod looks at every node
        return {"percentageOfNodesToScore": 100, "extenders": [extender]}
    return {"profiles": profiles(), "extenders": [extender]}


def profiles() -> list[dict[str, Any]]:
    """The default profile, with kube-scheduler's adaptive percentageOfNodesToScore, and the one the
    extender's pods are moved to, which looks at every node."""
    return [
        {"schedulerName": "default-scheduler"},
        {"schedulerName": EVERY_NODE_PROFILE, "percentageOfNodesToScore": 100},
    ]
