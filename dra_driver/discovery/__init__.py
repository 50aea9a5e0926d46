"""Discovery backends: each turns a node's hardware (or a profile) into an `Inventory`."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from dra_driver.inventory import Inventory


class DiscoveryError(RuntimeError):
    """Discovery cannot run; the message says why and what to do instead."""


class Backend(Protocol):
    """A source of inventory that can also say when the inventory may have changed."""

    name: str
    # Whether prepare may hand out a MIG placement. No backend creates MIG instances yet: the
    # simulated one has no hardware to change (the container gets the parent GPU and the
    # placement in env); on real GPUs an uncreated instance would be a lie, so prepare refuses.
    can_prepare_mig: bool

    def discover(self) -> Inventory:
        """The node's accelerators as they are now."""

    def watch(self, stop: threading.Event, changed: Callable[[], None]) -> None:
        """Block until `stop` is set, calling `changed` whenever discovery should run again."""
