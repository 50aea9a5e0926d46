"""A node's prepare state on plain data, shared by the preparer and gRPC servicer tests: claims
are dicts handed over by a plain function, devices come from the real slice builder, files go to
a temporary CDI directory and checkpoint."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cdi.store import SpecStore
from dra_driver.discovery.simulated import load_profile, resolve_profile
from dra_driver.errors import PrepareError
from dra_driver.kubelet.checkpoint import Checkpoint
from dra_driver.kubelet.claim import ClaimRef, ClaimSources
from dra_driver.kubelet.metadata_store import MetadataStore
from dra_driver.kubelet.prepare import ClaimPreparer, LocalNode, Reporters
from dra_driver.kubelet.stores import Stores, spec_store
from dra_driver.live_instances import LiveInstances
from dra_driver.publishing.publish_config import PublishConfig
from dra_driver.publishing.published import PublishedDevice
from dra_driver.publishing.slices import devices_and_counters
from nativedra.base.kube.names import DRIVER_NAME

NODE = "node-a"
INVENTORY = load_profile(resolve_profile("h100-8x"))
PUBLISHED = {device.name: device for device in devices_and_counters(INVENTORY, PublishConfig())[0]}


def claim(
    uid: str,
    devices: Sequence[str] = ("gpu-0-1of2-0",),
    *,
    pool: str = NODE,
    driver: str = DRIVER_NAME,
    allocated: bool = True,
    name: str = "train",
) -> dict[str, Any]:
    results = [{"request": "gpus", "driver": driver, "pool": pool, "device": device} for device in devices]
    status = {"allocation": {"devices": {"results": results}}} if allocated else {}
    return {"metadata": {"namespace": "ns", "name": name, "uid": uid}, "status": status}


class Node:
    """One node's prepare state on disk, fresh or as left in `root` (by a killed plugin process, say);
    `preparer()` is a plugin (re)started on it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.claims: dict[str, dict[str, Any]] = {}  # by claim name: what the API would return
        # Device status reports: (claim, prepared device names), or (claim, None) once unprepared.
        self.reports: list[tuple[ClaimRef, list[str] | None]] = []
        self.dev = root / "dev"
        self.dev.mkdir(exist_ok=True)
        for name in ["nvidiactl", *(f"nvidia{gpu.minor}" for gpu in INVENTORY.gpus)]:
            if not (self.dev / name).is_symlink():
                (self.dev / name).symlink_to("/dev/null")  # a real character device, no root needed
        self.checkpoint_path = root / "checkpoint.json"
        self.specs: SpecStore = spec_store(root / "cdi")
        self.metadata_dir = root / "plugin-data"
        self.metadata = MetadataStore(self.metadata_dir)
        self.failures: list[tuple[ClaimRef, PrepareError]] = []  # what the plugin would turn into events

    def read_claim(self, ref: ClaimRef) -> dict[str, Any]:
        if ref.name not in self.claims:
            raise PrepareError("not_found", f"claim {ref}: not found in the API")
        return self.claims[ref.name]

    def list_claims(self) -> list[dict[str, Any]]:
        return list(self.claims.values())

    def checkpoint(self) -> Checkpoint:
        return Checkpoint(self.checkpoint_path, "boot-1")

    def stores(self) -> Stores:
        return Stores(self.checkpoint(), self.specs, self.metadata)

    def preparer(
        self,
        mig_supported: bool = True,
        published: dict[str, PublishedDevice] | None = None,
        *,
        sources: ClaimSources | None = None,
        stores: Stores | None = None,
        reporters: Reporters | None = None,
    ) -> ClaimPreparer:
        """A plugin started on this node; `sources`, `stores` and `reporters` replace the node's
        own (an API that fails, a store that fails at a chosen step)."""
        return ClaimPreparer(
            LocalNode(NODE, lambda: published or PUBLISHED, self.dev, (self.root / "vendor-cdi",), mig_supported),
            sources or ClaimSources(self.read_claim, self.list_claims),
            stores or self.stores(),
            reporters
            or Reporters(
                on_failure=lambda ref, error: self.failures.append((ref, error)),
                on_prepared=lambda ref, devices: self.reports.append((ref, [d.device.name for d in devices])),
                on_unprepared=lambda ref: self.reports.append((ref, None)),
            ),
        )


def new_claim(node: Node, name: str = "train", **kwargs: Any) -> ClaimRef:
    uid = str(uuid.uuid4())
    node.claims[name] = claim(uid, name=name, **kwargs)
    return ClaimRef("ns", uid, name)


def plugin_instance(data_dir: Path, name: str | None = None) -> LiveInstances:
    """A plugin process's place on the node in `data_dir` (not joined yet)."""
    name = name or str(uuid.uuid4())
    return LiveInstances(data_dir, name, data_dir / f"dra-{name}.sock")
