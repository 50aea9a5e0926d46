"""The limits prepare injects through CDI (MPS env): a fraction's part of its GPU, a share's
consumed capacity, and an MPS opaque config that may only narrow them."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from dra_driver.discovery.simulated import load_profile, resolve_profile
from dra_driver.kubelet.cdi_edits import ClaimDevice, ContainerGpuLimits, HostDevices, claim_spec, limits
from dra_driver.kubelet.opaque_config import API_VERSION, DEFAULT, GpuConfig, parse
from dra_driver.publishing.publish_config import PublishConfig
from dra_driver.publishing.published import PublishedDevice
from dra_driver.publishing.slices import devices_and_counters
from nativedra.base.kube.units import GIB

H100_MIB = 81559  # memory of one GPU of the h100-8x profile


def published(share_gpus: tuple[int, ...] = ()) -> dict[str, PublishedDevice]:
    inventory = load_profile(resolve_profile("h100-8x"))
    devices, _ = devices_and_counters(inventory, PublishConfig(share_gpus=share_gpus))
    return {device.name: device for device in devices}


def mps(**settings: Any) -> GpuConfig:
    return parse(
        {
            "apiVersion": API_VERSION,
            "kind": "GpuConfig",
            "sharing": {"strategy": "MPS", "mps": settings},
        },
        "test",
    )


def claim_device(
    name: str, config: GpuConfig = DEFAULT, consumed: dict[str, int] | None = None, share_gpus: tuple[int, ...] = ()
) -> ClaimDevice:
    return ClaimDevice("gpus", published(share_gpus)[name], config, consumed=consumed)


@pytest.mark.parametrize(
    ("device", "parts", "expected"),
    [
        ("gpu-0-1of2-1", 2, ContainerGpuLimits(compute_percent=50, memory_mib=40779)),
        ("gpu-0-1of4-3", 4, ContainerGpuLimits(compute_percent=25, memory_mib=20389)),
        ("gpu-0-1of8-7", 8, ContainerGpuLimits(compute_percent=12, memory_mib=10194)),
    ],
)
def test_a_fraction_gets_its_part_of_memory_and_compute_rounded_down(
    device: str, parts: int, expected: ContainerGpuLimits
) -> None:
    found = limits(claim_device(device))
    assert found == expected
    assert found.memory_mib is not None and found.memory_mib * parts <= H100_MIB, "never more than the GPU has"


def test_a_whole_gpu_and_a_mig_placement_have_no_mps_limits() -> None:
    assert limits(claim_device("gpu-0")) == ContainerGpuLimits()
    assert limits(claim_device("gpu-6-3g-40gb-4")) == ContainerGpuLimits()


def test_a_share_gets_what_it_consumed() -> None:
    consumed = {"memory": 20 * GIB, "compute": 30}
    assert limits(claim_device("gpu-0-share", consumed=consumed, share_gpus=(0,))) == ContainerGpuLimits(30, 20480)
    assert limits(claim_device("gpu-0-share", consumed={"compute": 10}, share_gpus=(0,))) == ContainerGpuLimits(
        10, None
    )


def test_a_share_without_consumed_capacity_has_no_limits() -> None:
    assert limits(claim_device("gpu-0-share", share_gpus=(0,))) == ContainerGpuLimits()


def test_mps_config_narrows_a_fraction() -> None:
    config = mps(activeThreadPercentage=20, pinnedMemoryLimitMiB=1000)
    assert limits(claim_device("gpu-0-1of2-0", config)) == ContainerGpuLimits(20, 1000)


def test_mps_config_never_widens_a_fraction() -> None:
    config = mps(activeThreadPercentage=90, pinnedMemoryLimitMiB=60000)
    assert limits(claim_device("gpu-0-1of4-0", config)) == ContainerGpuLimits(25, 20389)


def test_mps_config_limits_a_whole_gpu_and_a_share() -> None:
    assert limits(claim_device("gpu-1", mps(activeThreadPercentage=30))) == ContainerGpuLimits(30, None)
    assert limits(claim_device("gpu-1", mps(pinnedMemoryLimitMiB=4096))) == ContainerGpuLimits(None, 4096)
    consumed = {"memory": 8 * GIB, "compute": 40}
    share = claim_device("gpu-0-share", mps(activeThreadPercentage=10), consumed, share_gpus=(0,))
    assert limits(share) == ContainerGpuLimits(10, 8192)


def test_a_claim_lists_all_its_gpus_once_in_a_claim_wide_variable(tmp_path: Path) -> None:
    """Two GPUs and two fractions of a third: a container that gets all of them sees every GPU;
    per-device values of the same variable would leave it only the last one."""
    for minor in (0, 1, 2):
        os.mknod(tmp_path / f"nvidia{minor}", 0o600 | stat.S_IFCHR, os.makedev(195, minor))
    os.mknod(tmp_path / "nvidiactl", 0o600 | stat.S_IFCHR, os.makedev(195, 255))
    devices = [claim_device(name) for name in ("gpu-0", "gpu-1", "gpu-2-1of4-0", "gpu-2-1of4-1")]
    spec = claim_spec("uid", devices, HostDevices(tmp_path))
    uuids = [published()[name].gpu.uuid for name in ("gpu-0", "gpu-1", "gpu-2")]
    assert spec.container_edits.env == (f"NATIVEDRA_GPU_UUIDS={','.join(uuids)}",)
    assert not any(e.startswith("NATIVEDRA_GPU_UUIDS") for d in spec.devices for e in d.container_edits.env)
