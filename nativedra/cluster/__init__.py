"""A real Kubernetes control plane on 127.0.0.1 for tests, the demo and `nativedra cluster`."""

from nativedra.cluster.binaries import Binaries, BinaryError, pinned_version, resolve
from nativedra.cluster.controlplane import ControlPlane, ControlPlaneError, recorded_state, stop_recorded
from nativedra.cluster.nodes import create_fake_node
from nativedra.cluster.waits import WaitTimeoutError, wait_for, wait_pod_scheduled, wait_pod_unschedulable

__all__ = [
    "Binaries",
    "BinaryError",
    "ControlPlane",
    "ControlPlaneError",
    "WaitTimeoutError",
    "create_fake_node",
    "pinned_version",
    "recorded_state",
    "resolve",
    "stop_recorded",
    "wait_for",
    "wait_pod_scheduled",
    "wait_pod_unschedulable",
]
