"""Which mode a GPU is in while claims hold devices on it. A GPU out of MIG mode that offers MIG
placements and fractions at once (compatibility groups) takes the mode of the first claim prepared
on it: MIG for a placement, whole-GPU for anything else. A claim that needs the other mode while
another claim holds the GPU is refused: the scheduler's groups never allocate that, so its slice had
no groups."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from dra_driver.errors import PrepareError
from dra_driver.kubelet.cdi_edits import ClaimDevice
from dra_driver.kubelet.checkpoint import ClaimRecord
from dra_driver.kubelet.claim import ClaimRef
from dra_driver.publishing.published import DeviceKind, PublishedDevice

log = logging.getLogger(__name__)
MIG_MODE = "MIG"
WHOLE_GPU_MODE = "whole-GPU"


def mode(device: PublishedDevice) -> str:
    """The mode a device needs its GPU in: MIG for a placement, whole-GPU for a GPU, fraction or share."""
    return MIG_MODE if device.kind is DeviceKind.MIG else WHOLE_GPU_MODE


def check_modes(
    ref: ClaimRef,
    devices: list[ClaimDevice],
    records: Iterable[ClaimRecord],
    published: Mapping[str, PublishedDevice],
) -> None:
    """Refuse `devices` of claim `ref` (mode_conflict) if one needs its GPU in another mode than
    the claims of `records` (the prepared ones) hold it in, or than another of `devices` needs."""
    held: dict[int, tuple[str, str]] = {}  # GPU index -> (mode, the claim holding it)
    for record in records:
        for prepared in record.devices if record.uid != ref.uid else ():
            device = published.get(prepared["device_name"])
            if device is not None:
                held.setdefault(device.gpu_index, (mode(device), f"{record.namespace}/{record.name}"))
    for claim_device in devices:
        device = claim_device.device
        needed, holder = mode(device), held.get(device.gpu_index)
        if holder is not None and holder[0] != needed:
            raise PrepareError(
                "mode_conflict",
                f"claim {ref}: device {device.name} needs GPU {device.gpu_index} in {needed} mode, but claim "
                f"{holder[1]} holds it in {holder[0]} mode",
            )
        if holder is None and needed == MIG_MODE and not device.gpu.mig_enabled:
            log.info("GPU %d switches to MIG mode for claim %s", device.gpu_index, ref)
        held.setdefault(device.gpu_index, (needed, f"{ref.namespace}/{ref.name}"))
