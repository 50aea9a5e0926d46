"""Find the vendor's own CDI device for a GPU (e.g. from the NVIDIA container toolkit), so the
runtime also injects the driver libraries and hooks that spec carries."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import yaml

from dra_driver.inventory import Gpu, Vendor
from nativedra.base.kube.names import CDI_VENDOR

log = logging.getLogger(__name__)
VENDOR_KINDS = {Vendor.NVIDIA: "nvidia.com/gpu", Vendor.AMD: "amd.com/gpu", Vendor.INTEL: "intel.com/gpu"}


def _load(path: Path) -> dict[str, Any] | None:
    try:
        text = path.read_text()
        document = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as error:
        log.debug("ignoring unreadable CDI spec %s: %s", path, error)
        return None
    return document if isinstance(document, dict) else None


def vendor_device_id(gpu: Gpu, cdi_roots: tuple[Path, ...]) -> str | None:
    """`nvidia.com/gpu=<uuid>` (or `=<index>`) when a vendor spec on the host defines it."""
    kind = VENDOR_KINDS[gpu.vendor]
    names: set[str] = set()
    for root in cdi_roots:
        if not root.is_dir():
            continue
        for path in sorted(root.iterdir()):
            if path.name.startswith(CDI_VENDOR) or path.suffix not in (".yaml", ".json"):
                continue
            document = _load(path)
            if document and document.get("kind") == kind:
                names.update(str(d.get("name")) for d in document.get("devices", []) if isinstance(d, dict))
    for candidate in (gpu.uuid, str(gpu.index)):
        if candidate in names:
            return f"{kind}={candidate}"
    return None
