"""A claim as the kubelet names it and as the plugin answers for it, where its API object comes
from, and the checks that decide whether a claim is this plugin's to prepare on this node. The
modules that only name a claim (events, device status, the gRPC server) import this one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cdi.store import is_kubernetes_uid
from dra_driver.errors import PrepareError
from nativedra.base.kube.names import DRIVER_NAME


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    uid: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} ({self.uid})"


@dataclass(frozen=True)
class PreparedDevice:
    request_names: list[str]
    pool_name: str
    device_name: str
    cdi_device_ids: list[str]
    share_id: str | None = None


ClaimReader = Callable[[ClaimRef], dict[str, Any]]  # raises PrepareError when it cannot
ClaimLister = Callable[[], list[dict[str, Any]]]  # every ResourceClaim; raises PrepareError when it cannot


@dataclass(frozen=True)
class ClaimSources:
    """Where claims come from: plain functions, so prepare and start-up repair run against plain
    data in tests. `read` serves the kubelet's calls, `list_all` the start-up repair."""

    read: ClaimReader
    list_all: ClaimLister


def check_uid(ref: ClaimRef) -> None:
    """Refuse a UID that is not a Kubernetes UID before it reaches a lock, a file name or a log line;
    it is shown with repr() because it may hold a newline or a path."""
    if not is_kubernetes_uid(ref.uid):
        raise PrepareError(
            "bad_uid",
            f"claim {ref.namespace}/{ref.name}: field uid {ref.uid!r} is not a Kubernetes UID (a lowercase RFC 4122 "
            "UUID)",
        )


def our_results(claim: dict[str, Any], ref: ClaimRef, node_name: str) -> list[dict[str, Any]]:
    """The allocation results this plugin must prepare, or an error saying why there are none."""
    if claim["metadata"]["uid"] != ref.uid:
        raise PrepareError(
            "uid_mismatch",
            f"claim {ref.namespace}/{ref.name}: metadata.uid is {claim['metadata']['uid']}, the kubelet asked for "
            f"{ref.uid} (the claim was deleted and re-created)",
        )
    allocation = claim.get("status", {}).get("allocation")
    if not allocation:
        raise PrepareError("not_allocated", f"claim {ref}: status.allocation is empty (the claim is not allocated)")
    results = allocation.get("devices", {}).get("results", [])
    mine = [r for r in results if r.get("driver") == DRIVER_NAME and r.get("pool") == node_name]
    if not mine:
        elsewhere = ", ".join(sorted({f"{r.get('driver')}/{r.get('pool')}" for r in results})) or "nothing"
        raise PrepareError(
            "not_ours",
            f"claim {ref}: status.allocation.devices.results has no device of driver {DRIVER_NAME} in pool "
            f"{node_name} (allocated: {elsewhere})",
        )
    return mine
