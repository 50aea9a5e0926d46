"""Pointing a local control plane's scheduler at an extender, and away again, the way an admin wires
a cluster: the scheduler configuration and the policy that marks the pods it sends go together
(manifests/scheduler/). A marked pod fits no node for a scheduler that does not ignore the marker,
and an unmarked one is never sent, so the policy is in effect exactly while the scheduler calls the
extender. Releases before 1.36 do not serve the policy by default: there every pod is sent."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubernetes import client

from extender.pods.gang import GANG
from nativedra.base.kube.names import EVERY_NODE_PROFILE, EXTENDER_MARKER
from nativedra.cluster.controlplane import ControlPlane
from nativedra.cluster.pki import ExtenderTls
from nativedra.cluster.scheduler_config import scheduler_extra
from nativedra.cluster.waits import wait_for
from nativedra.objects import apply_file, extender_marker_policy

POLICY_SERVED_SINCE = (1, 36)  # MutatingAdmissionPolicy: GA and served by default
POLICY_NAME = "nativedra-extender-marker"
ROUTING_POLICY_NAME = "nativedra-every-node"  # the second policy of the same file: the profile


def marks_pods(version: str) -> bool:
    """Whether a release serves the marker policy with its default gates ("v1.37.2" -> True)."""
    major, minor = (int(part) for part in version.lstrip("v").split(".")[:2])
    return (major, minor) >= POLICY_SERVED_SINCE


def _probe(api: client.ApiClient, scheduler: str) -> Any:
    """A gang pod of `scheduler` as it would be created now: a server-side dry run goes through
    admission, policies included."""
    probe = {
        "metadata": {"generateName": "nativedra-marker-probe-", "labels": {GANG: "probe"}},
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10"}],
        },
    }
    return client.CoreV1Api(api).create_namespaced_pod("default", probe, dry_run="All")


def _marked(pod: Any) -> bool:
    return EXTENDER_MARKER in (pod.spec.containers[0].resources.limits or {})


def marked_now(api: client.ApiClient, scheduler: str = "default-scheduler") -> bool:
    """Whether a gang pod of `scheduler` created now would be marked."""
    return _marked(_probe(api, scheduler))


def wired_now(api: client.ApiClient) -> tuple[bool, bool]:
    """Whether a gang pod of the default scheduler created now would be marked, and moved to
    EVERY_NODE_PROFILE: one dry run answers both."""
    pod = _probe(api, "default-scheduler")
    return _marked(pod), pod.spec.scheduler_name == EVERY_NODE_PROFILE


def withdraw_marker_policy(api: client.ApiClient, name: str) -> None:
    """Delete a marker policy and its binding (each shipped pair shares one name); gone already is fine."""
    policies = client.AdmissionregistrationV1Api(api)
    for delete in (policies.delete_mutating_admission_policy_binding, policies.delete_mutating_admission_policy):
        with contextlib.suppress(client.ApiException):
            delete(name)


def call_extender(
    plane: ControlPlane,
    port: int,
    tls: ExtenderTls | None = None,
    extra: Mapping[str, Any] | None = None,
    mounts: Mapping[Path, Path] | None = None,
) -> None:
    """Restart the scheduler calling the extender on 127.0.0.1:`port` (with `extra` configuration,
    and `mounts` as a static pod's hostPath volumes), once the marker policy marks new pods."""
    marked = marks_pods(plane.binaries.version)
    if marked:
        api = plane.api_client()
        apply_file(api, extender_marker_policy())
        wait_for(
            lambda: wired_now(api) == (True, True),
            30,
            "the policies to mark and move new pods",
            lambda: f"a gang pod created now: {_probe(api, 'default-scheduler').spec}",
        )
    plane.restart_scheduler({**scheduler_extra(port, tls, marked=marked), **(extra or {})}, mounts)


def stop_calling_extender(plane: ControlPlane, extra: Mapping[str, Any] | None = None) -> None:
    """Restart the scheduler without the extender (with `extra`), once new pods are no longer marked."""
    if marks_pods(plane.binaries.version):
        api = plane.api_client()
        withdraw_marker_policy(api, POLICY_NAME)
        withdraw_marker_policy(api, ROUTING_POLICY_NAME)
        wait_for(lambda: wired_now(api) == (False, False), 30, "new pods created as without the policies")
    plane.restart_scheduler(dict(extra or {}))
